"""Real worker processes for the tests: start, kill with SIGKILL, stop with SIGTERM, and wait for
them — for progress, not for the clock (see ``waiting.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from .waiting import Patience

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def worker_process(
    app: str,
    url: str,
    *args: str,
    faults: str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[str]:
    """Start ``jobledger worker APP`` in a new process against ``url``."""
    full_env = dict(os.environ)
    full_env.pop("JOBLEDGER_FAULTS", None)
    full_env.update(env or {})
    full_env["JOBLEDGER_URL"] = url
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full_env.get("PYTHONPATH")]))
    if faults:
        full_env["JOBLEDGER_FAULTS"] = faults
    return subprocess.Popen(
        [sys.executable, "-m", "jobledger", "worker", app, *args],
        cwd=ROOT,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_exit(
    proc: subprocess.Popen[str],
    timeout: float = 60.0,
    progress: Callable[[], Any] | None = None,
) -> tuple[int, str, str]:
    """Wait for a process to end, reading its output; kill it and fail once ``timeout`` machine
    seconds have passed without it ending — and, when ``progress`` is given, without a change
    of ``progress()``."""
    patience = Patience(timeout, progress)
    while True:
        try:
            out, err = proc.communicate(timeout=0.5)
        except subprocess.TimeoutExpired:
            # communicate() keeps what it has read for the next call: retrying loses nothing.
            if not patience.expired():
                continue
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(
                f"process {proc.pid} did not exit: {patience.describe()}\n"
                f"stdout:\n{out}\nstderr:\n{err}"
            ) from None
        return proc.returncode, out, err


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 30.0,
    interval: float = 0.02,
    what: str = "condition",
    progress: Callable[[], Any] | None = None,
) -> T:
    """Poll ``predicate`` until it returns something truthy, or fail once ``timeout`` machine
    seconds have passed without it — and, when ``progress`` is given, without a change of
    ``progress()`` (the number of jobs done, say): a wait for many things fails when they stop
    coming, not when they come slowly."""
    patience = Patience(timeout, progress)
    while True:
        value = predicate()
        if value:
            return value
        if patience.expired():
            raise AssertionError(f"gave up waiting for {what}: {patience.describe()}")
        time.sleep(interval)


def bursts_until(
    ledger: Any,
    done: Callable[[], bool],
    what: str,
    timeout: float = 30.0,
    progress: Callable[[], Any] | None = None,
    **worker: Any,
) -> None:
    """Run burst workers in this thread until ``done()``. A burst stops when nothing is due,
    and a retry due a millisecond later is not due yet: a test whose jobs retry with a tiny
    backoff runs bursts until they are all finished."""

    def burst_then_check() -> bool:
        ledger.run_worker(burst=True, handle_signals=False, **worker)
        return done()

    wait_until(burst_then_check, timeout=timeout, what=what, progress=progress)


def handles(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has installed a handler for ``sig`` (Linux: the ``SigCgt`` mask
    in /proc/PID/status). True where that cannot be read: a process that is gone, or no /proc."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except (OSError, ValueError):
        pass
    return True


def terminate(proc: subprocess.Popen[Any], timeout: float = 60.0) -> None:
    """SIGTERM, once the process handles it. A process still starting (importing, loading its
    app) has no handler yet and would die of the signal (exit -15) instead of stopping cleanly;
    on a busy machine that start-up can outlast the work the test gave the process."""
    wait_until(
        lambda: proc.poll() is not None or handles(proc.pid, signal.SIGTERM),
        timeout,
        interval=0.05,
        what=f"process {proc.pid} to install its SIGTERM handler",
    )
    if proc.poll() is None:
        proc.terminate()


def killed_by_sigkill(returncode: int) -> bool:
    return returncode == -signal.SIGKILL
