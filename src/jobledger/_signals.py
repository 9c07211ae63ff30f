"""Signal handlers that never take a lock.

Python runs a signal handler in the main thread, between two of its bytecodes: possibly while
that thread is inside ``Event.wait`` and holds the event's lock. A handler that then sets the
same event (``worker.stop()`` sets the one the fetch loop waits on) waits for the lock its own
thread holds, for ever: the process ignores every later signal but SIGKILL. So the handlers
here only write the signal's number to a pipe, and a thread of their own reads it and acts.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = ["relayed_signals"]

log = logging.getLogger("jobledger")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def relayed_signals(
    act: Callable[[int, int], Any],
    signals: Sequence[int] = STOP_SIGNALS,
    *,
    interrupt_after: int | None = None,
) -> Iterator[None]:
    """While the block runs, each of ``signals`` calls ``act(signum, count)`` in a thread of
    its own (``count``: how many of them so far, this one included), in the order they came.

    ``interrupt_after``: once that many were relayed, the next one raises ``KeyboardInterrupt``
    in the main thread at once instead (a second Ctrl-C that must not wait). Outside the main
    thread, where Python installs no handlers, the block runs without any."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read, write = os.pipe()
    received = 0

    def handler(signum: int, frame: object) -> None:
        nonlocal received
        received += 1
        if interrupt_after is not None and received > interrupt_after:
            raise KeyboardInterrupt
        os.write(write, bytes([signum]))  # takes no lock of Python's

    def relay() -> None:
        count = 0
        try:
            while data := os.read(read, 64):
                for signum in data:
                    count += 1
                    try:
                        act(signum, count)
                    except Exception:  # a failing action must not end the relay
                        log.exception("acting on signal %d failed", signum)
        finally:
            os.close(read)

    threading.Thread(target=relay, name="jobledger-signals", daemon=True).start()
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        os.close(write)  # the relay reads the end of the pipe and ends
