"""``jobledger worker --processes N``: N worker processes on one host, under one parent.

The GIL lets one Python process run one thread of Python at a time; several processes use
several cores. The parent starts N copies of the same worker command (``--processes 1``),
passes SIGTERM and SIGINT on to them (a second signal stops them at once, as with one worker),
restarts a child that dies while the others run on (not in ``--burst`` mode), and exits with
the first non-zero status of a child, or 0.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

__all__ = ["supervise"]

log = logging.getLogger("jobledger.worker")

#: A child that dies sooner than this after its start is not restarted (it would die again).
_MIN_LIFETIME = 5.0


def supervise(
    child_args: Sequence[str], processes: int, burst: bool, env: dict[str, str] | None = None
) -> int:
    """Run ``python -m jobledger <child_args>`` ``processes`` times (with ``env`` added to
    this process's environment); return the exit status."""
    command = [sys.executable, "-m", "jobledger", *child_args]
    child_env = {**os.environ, **(env or {})}

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(command, env=child_env)

    children: list[tuple[subprocess.Popen[bytes], float]] = [
        (start(), time.monotonic()) for _ in range(processes)
    ]
    signals = 0

    def forward(signum: int, frame: object) -> None:
        nonlocal signals
        signals += 1
        for child, _ in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    status = 0
    try:
        while children:
            time.sleep(0.1)
            running = []
            for child, started in children:
                code = child.poll()
                if code is None:
                    running.append((child, started))
                    continue
                lived = time.monotonic() - started
                if code != 0 and not burst and not signals and lived >= _MIN_LIFETIME:
                    log.warning(
                        "worker process %d exited with %d; starting another", child.pid, code
                    )
                    running.append((start(), time.monotonic()))
                elif signals and code in (-signal.SIGTERM, -signal.SIGINT):
                    pass  # asked to stop before it could stop gracefully (still starting)
                elif code != 0 and status == 0:
                    status = code if code > 0 else 128 - code
            children = running
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return status
