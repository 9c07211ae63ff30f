"""Worker processes for the demo and the drill: started as ``jobledger worker APP``, killed with
SIGKILL, stopped with SIGTERM. Their output goes to log files, never to pipes nobody reads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["WorkerProcesses"]


class WorkerProcesses:
    """Worker processes of one app against one database; each one's output in ``logdir``."""

    def __init__(
        self,
        app: str,
        url: str,
        logdir: Path,
        *,
        env: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
    ):
        self.app = app
        self.url = url
        self.logdir = logdir
        self.env = env or {}
        self.args = args
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: dict[int, Path] = {}

    def start(
        self, *, faults: str | None = None, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start one more worker; ``faults`` sets ``JOBLEDGER_FAULTS`` for it alone."""
        full = dict(os.environ)
        full.pop("JOBLEDGER_FAULTS", None)
        full.update(self.env)
        full.update(env or {})
        full["JOBLEDGER_URL"] = self.url
        if faults:
            full["JOBLEDGER_FAULTS"] = faults
        path = self.logdir / f"worker-{len(self.procs) + 1}.log"
        with open(path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "jobledger", "worker", self.app, *self.args],
                env=full,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.procs.append(proc)
        self.logs[proc.pid] = path
        return proc

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None]

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL: no cleanup, no flush, like a power cut for the process."""
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def log_tail(self, proc: subprocess.Popen[bytes], lines: int = 5) -> str:
        path = self.logs.get(proc.pid)
        if path is None or not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM to every live worker; SIGKILL to those still running after ``timeout``."""
        for proc in self.alive():
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> int | None:
    """The process's exit code, or None if it is still running after ``timeout`` seconds."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None
