"""Real worker processes for the tests: start, kill with SIGKILL, wait with a deadline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

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


def wait_exit(proc: subprocess.Popen[str], timeout: float = 60.0) -> tuple[int, str, str]:
    """Wait for a process to end; kill it and fail if it outlives the deadline."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(
            f"process did not exit within {timeout} s\nstdout:\n{out}\nstderr:\n{err}"
        ) from None
    return proc.returncode, out, err


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 30.0,
    interval: float = 0.02,
    what: str = "condition",
) -> T:
    """Poll ``predicate`` until it returns something truthy, or fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def bursts_until(
    ledger: Any, done: Callable[[], bool], what: str, timeout: float = 30.0, **worker: Any
) -> None:
    """Run burst workers in this thread until ``done()``. A burst stops when nothing is due,
    and a retry due a millisecond later is not due yet: a test whose jobs retry with a tiny
    backoff runs bursts until they are all finished."""

    def burst_then_check() -> bool:
        ledger.run_worker(burst=True, handle_signals=False, **worker)
        return done()

    wait_until(burst_then_check, timeout=timeout, what=what)


def killed_by_sigkill(returncode: int) -> bool:
    return returncode == -signal.SIGKILL
