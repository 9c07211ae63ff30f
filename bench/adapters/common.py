"""What every adapter shares: its command line, the start barrier, latency files, pacing.

Standard library only: the adapters of other queues import this from their own virtualenv.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def parser(name: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"bench.adapters.{name}")
    p.add_argument("command", choices=["setup", "info", "enqueue", "fill", "work", "produce"])
    p.add_argument("--dsn", required=True)
    p.add_argument("--single", type=int, default=0, help="enqueue: jobs enqueued one by one")
    p.add_argument("--bulk", type=int, default=0, help="enqueue: jobs enqueued in batches")
    p.add_argument("--n", type=int, default=0, help="fill: jobs to enqueue")
    p.add_argument(
        "--async-handlers",
        action="store_true",
        help="fill: jobs of the app's async task (where the queue has one): an async drain",
    )
    p.add_argument("--batch", type=int, default=1000, help="batch size of bulk enqueues")
    p.add_argument("--processes", type=int, default=1, help="work: worker processes")
    p.add_argument("--rundir", default="", help="work: where ready/latency files go")
    p.add_argument("--rate", type=float, default=0.0, help="produce: jobs per second")
    p.add_argument("--seconds", type=float, default=0.0, help="produce: for how long")
    p.add_argument("--chunk", type=int, default=1, help="produce: jobs per enqueue call")
    p.add_argument(
        "--groups", type=int, default=0, help="produce: spread the jobs over this many groups"
    )
    return p


def emit(result: dict[str, Any]) -> None:
    """The one JSON line the harness reads from an adapter's standard output."""
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else 0.0


class Run:
    """A worker process's part in a run: say it is ready, wait for the barrier, record the
    enqueue→start latency of every job that carries its enqueue time ``t``."""

    def __init__(self, rundir: str):
        self.dir = Path(rundir)
        self.latencies: list[float] = []
        #: When each of ``latencies`` started (Unix time), in the same order.
        self.starts: list[float] = []
        #: (Unix time, seconds, jobs) of each claim, when the adapter times its claims.
        self.claims: list[tuple[float, float, int]] = []
        self._lock = threading.Lock()

    def ready_and_wait(self) -> None:
        (self.dir / f"ready-{os.getpid()}").touch()
        barrier = self.dir / "go"
        while not barrier.exists():
            time.sleep(0.005)

    def started(self, t: float | None) -> None:
        if t is not None:
            now = time.time()
            with self._lock:
                self.latencies.append(now - t)
                self.starts.append(now)

    def timed_claims(self, claim: Callable[..., Any]) -> Callable[..., Any]:
        """``claim`` (a function that returns the claimed jobs), timing every call."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            at, started = time.time(), time.perf_counter()
            jobs = claim(*args, **kwargs)
            with self._lock:
                self.claims.append((at, time.perf_counter() - started, len(jobs)))
            return jobs

        return timed

    def save(self) -> None:
        with self._lock:
            data, starts, claims = list(self.latencies), list(self.starts), list(self.claims)
        pid = os.getpid()
        (self.dir / f"latency-{pid}.json").write_text(json.dumps(data))
        (self.dir / f"starts-{pid}.json").write_text(json.dumps(starts))
        (self.dir / f"claims-{pid}.json").write_text(json.dumps(claims))


def fan_out(module: str, processes: int) -> bool:
    """With ``--processes N`` > 1, run N copies of this command (``python -m module``) with one
    process each, pass SIGTERM/SIGINT on, and wait for them. Returns False when the caller
    should do the work itself."""
    if processes <= 1:
        return False
    args = sys.argv[1:]
    i = args.index("--processes")
    args[i + 1] = "1"
    children = [subprocess.Popen([sys.executable, "-m", module, *args]) for _ in range(processes)]

    def forward(signum: int, frame: object) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for child in children:
        child.wait()
    return True


def paced(rate_per_s: float, seconds: float, chunk: int) -> Iterator[int]:
    """Yield chunk counts on a fixed schedule: ``rate_per_s`` jobs a second for ``seconds``."""
    total = int(rate_per_s * seconds)
    interval = chunk / rate_per_s
    start = time.perf_counter()
    sent = 0
    while sent < total:
        due = start + (sent / chunk) * interval
        pause = due - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        n = min(chunk, total - sent)
        yield n
        sent += n


def stop_event() -> threading.Event:
    """An event set by SIGTERM or SIGINT."""
    event = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        event.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return event


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
