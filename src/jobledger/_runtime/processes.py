"""Several worker processes on one host, under one parent: ``jobledger worker --processes N``,
and ``WorkerProcesses`` for the same from code.

The GIL lets one Python process run one thread of Python at a time; several processes use
several cores. The parent starts N copies of the same worker command (``jobledger worker APP``,
each importing the app by its path), passes SIGTERM and SIGINT on to them (a second signal stops
them at once, as with one worker), restarts a child that dies while the others run on (not in
burst mode, and not one that dies within seconds of its start: it would die again), reports
every child that dies, and ends with the first non-zero status of a child, or 0.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from .._records import whole_number
from .._signals import relayed_signals

__all__ = ["ChildExit", "Supervisor", "WorkerProcesses"]

log = logging.getLogger("jobledger.worker")

MIN_LIFETIME = 5.0
"""A child that dies sooner than this after its start is not restarted (it would die again)."""

_POLL = 0.1


@dataclass(frozen=True)
class ChildExit:
    """A worker process that ended: its pid, its exit code (negative: the signal that ended
    it), how long it ran, and whether another was started in its place."""

    pid: int
    code: int
    lived: float
    restarted: bool


class Supervisor:
    """The children of one parent, each running ``python -m jobledger <child_args>`` (with
    ``env`` added to this process's environment): started, signalled, reaped and restarted by
    ``poll()``. Thread-safe; ``send`` may be called from a signal handler."""

    def __init__(
        self,
        child_args: Sequence[str],
        processes: int,
        burst: bool,
        env: dict[str, str] | None = None,
    ):
        whole_number(processes, 1, 256, "processes")
        self.command = [sys.executable, "-m", "jobledger", *child_args]
        self.processes = processes
        self.burst = burst
        self.env = {**os.environ, **(env or {})}
        self.children: list[tuple[subprocess.Popen[bytes], float]] = []
        self.exits: list[ChildExit] = []
        self.signals = 0
        self.status = 0
        """The first non-zero exit status of a child (a signal's as 128 + its number), or 0."""
        self._lock = threading.RLock()

    def _spawn(self) -> tuple[subprocess.Popen[bytes], float]:
        # Each child in a process group of its own: a Ctrl-C at the terminal reaches this
        # process only, which passes it on once. (In the terminal's group, each child would get
        # it twice — from the terminal and passed on — and a second signal means "stop now".)
        child = subprocess.Popen(self.command, env=self.env, process_group=0)
        return child, time.monotonic()

    def start(self) -> None:
        with self._lock:
            self.children = [self._spawn() for _ in range(self.processes)]

    def pids(self) -> list[int]:
        with self._lock:
            return [child.pid for child, _ in self.children]

    def send(self, signum: int) -> None:
        """Pass a signal on to every child still running (counted: after one, nothing is
        restarted)."""
        with self._lock:
            self.signals += 1
            children = list(self.children)
        for child, _ in children:
            if child.poll() is None:
                child.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL to every child still running."""
        with self._lock:
            children = list(self.children)
        for child, _ in children:
            if child.poll() is None:
                child.kill()

    def poll(self) -> bool:
        """Reap the children that ended (restarting one that died while the others run on);
        True while some still run."""
        with self._lock:
            running = []
            for child, started in self.children:
                code = child.poll()
                if code is None:
                    running.append((child, started))
                    continue
                lived = time.monotonic() - started
                restart = code != 0 and not self.burst and not self.signals
                restart = restart and lived >= MIN_LIFETIME
                if restart:
                    log.warning(
                        "worker process %d exited with %d; starting another", child.pid, code
                    )
                    running.append(self._spawn())
                elif self.signals and code in (-signal.SIGTERM, -signal.SIGINT):
                    pass  # asked to stop before it could stop gracefully (still starting)
                elif code != 0:
                    if not self.signals:
                        log.warning("worker process %d exited with %d", child.pid, code)
                    if self.status == 0:
                        self.status = code if code > 0 else 128 - code
                self.exits.append(ChildExit(child.pid, code, lived, restart))
            self.children = running
            return bool(running)


class WorkerProcesses:
    """Several worker processes of one app, started and stopped from code: what
    ``jobledger worker APP --processes N`` runs.

        with WorkerProcesses("myapp.tasks:ledger", processes=4, queues=["emails"]) as workers:
            ...                                 # four processes drain the queues
        # leaving the block stops them: SIGTERM, then each finishes what it runs

    Each child imports ``app`` (``MODULE:LEDGER``) by its path, as the CLI does (the working
    directory is on its import path), and runs ``jobledger worker`` with these options; the
    database is ``url`` (default: the app's own, or ``JOBLEDGER_URL``), passed in the
    children's environment. A child that dies while the others run on is logged, listed in
    ``exits``, and replaced (not in burst mode, and not one that dies within 5 s of its start).
    ``run()`` blocks and passes SIGTERM and SIGINT on to the children, as the CLI does;
    ``start()`` returns at once and leaves this process's signals alone.
    """

    def __init__(
        self,
        app: str,
        processes: int = 2,
        *,
        url: str | None = None,
        queues: Sequence[str] | None = None,
        concurrency: int = 4,
        batch_size: int = 10,
        prefetch: int = 0,
        burst: bool = False,
        grace_seconds: float = 30.0,
        poll_interval: float | None = None,
        rescue_interval: float | None = None,
        scheduler: bool = True,
        history: str | None = None,
        log_level: str = "info",
        log_format: str = "console",
        env: dict[str, str] | None = None,
    ):
        module, sep, attribute = app.partition(":")
        if not sep or not module or not attribute:
            raise ValueError(f"expected MODULE:LEDGER (e.g. myapp.jobs:ledger), got {app!r}")
        self.app = app
        self.grace_seconds = grace_seconds
        # The command line (after ``jobledger``) of each child.
        args = ["worker", app, "--concurrency", str(concurrency), "--batch-size", str(batch_size)]
        args += ["--prefetch", str(prefetch), "--grace", str(grace_seconds)]
        args += ["--log-level", log_level, "--log-format", log_format]
        args += [f"--queues={q}" for q in queues or ()]
        args += ["--burst"] if burst else []
        args += ["--poll-interval", str(poll_interval)] if poll_interval is not None else []
        args += ["--rescue-interval", str(rescue_interval)] if rescue_interval else []
        args += ["--no-scheduler"] if not scheduler else []
        args += ["--history", history] if history else []
        child_env = dict(env or {})
        if url:
            # The URL goes to the children in their environment, not on their command line.
            child_env["JOBLEDGER_URL"] = url
        self._supervisor = Supervisor(args, processes, burst, child_env)
        self._monitor: threading.Thread | None = None
        self._done = threading.Event()

    def __repr__(self) -> str:
        return f"WorkerProcesses({self.app!r}, processes={self._supervisor.processes})"

    @property
    def exits(self) -> list[ChildExit]:
        """The children that ended so far (restarted ones among them)."""
        return list(self._supervisor.exits)

    @property
    def pids(self) -> list[int]:
        """The process ids of the children running now."""
        return self._supervisor.pids()

    @property
    def running(self) -> bool:
        return self._monitor is not None and not self._done.is_set()

    @property
    def status(self) -> int:
        """The first non-zero exit status of a child, or 0."""
        return self._supervisor.status

    def run(self) -> int:
        """Start the processes and wait until all have ended (with ``burst``, once nothing is
        due; else until ``stop()`` from another thread, or a signal); return the exit status.
        Called in the main thread, it passes SIGTERM and SIGINT on to the processes, as the CLI
        does."""
        self.start()
        with relayed_signals(lambda signum, count: self._supervisor.send(signum)):
            while not self._done.wait(_POLL):
                pass
        return self.status

    def start(self) -> WorkerProcesses:
        """Start the processes and return; a thread watches them."""
        if self._monitor is not None:
            raise RuntimeError("these worker processes were started already")
        self._supervisor.start()
        self._monitor = threading.Thread(
            target=self._watch, name="jobledger-processes", daemon=True
        )
        self._monitor.start()
        return self

    def _watch(self) -> None:
        try:
            while self._supervisor.poll():
                time.sleep(_POLL)
        finally:
            self._done.set()

    def wait(self, timeout: float | None = None) -> int:
        """Wait until every process has ended (with ``burst``: once nothing is due); return the
        exit status. ``TimeoutError`` if some still run after ``timeout`` seconds."""
        if self._monitor is None:
            raise RuntimeError("wait() is for worker processes started with start()")
        if not self._done.wait(timeout):
            raise TimeoutError(f"worker processes {self.pids} still run after {timeout} s")
        return self.status

    def send_signal(self, signum: int) -> None:
        """Pass a signal on to every process still running."""
        self._supervisor.send(signum)

    def stop(self, timeout: float | None = None) -> int:
        """Stop the processes gracefully: SIGTERM, so that each stops claiming and lets its
        running jobs finish (within ``grace_seconds``); once ``timeout`` seconds have passed
        (default ``grace_seconds`` + 5), a second SIGTERM stops them at once, and 5 s later
        SIGKILL ends what is left. Returns the exit status (a process asked to stop while it
        was starting counts as stopped). Idempotent."""
        if self._monitor is None:
            return self.status
        if self._done.is_set():
            return self.status
        wait = self.grace_seconds + 5.0 if timeout is None else timeout
        self._supervisor.send(signal.SIGTERM)
        if not self._done.wait(wait):
            self._supervisor.send(signal.SIGTERM)
            if not self._done.wait(5.0):
                self._supervisor.kill()
                self._done.wait()
        return self.status

    def __enter__(self) -> WorkerProcesses:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
