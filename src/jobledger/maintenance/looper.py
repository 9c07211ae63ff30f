"""``Looper``: the shape of every background loop — a pass every ``interval`` on a thread of its
own, a backoff while the database is unavailable, and a bug logged rather than fatal."""

from __future__ import annotations

import logging
import threading

from .._records import positive_seconds
from ..errors import BackendUnavailable

__all__ = ["Looper"]

log = logging.getLogger("jobledger.maintenance")


class Looper:
    """Subclasses give ``kind`` and ``run_once()``; ``run()`` runs it every ``interval`` seconds
    in this thread until ``stop()``, ``start()`` on a thread of its own. ``run_once`` may also be
    called directly (a worker rescues in its own loop; tests pass an explicit ``now``).
    ``stopped()`` runs once the loop has ended, on its thread."""

    kind = "looper"

    def __init__(self, interval: float, *, max_backoff: float | None = None):
        self.interval = positive_seconds(interval, f"{self.kind} interval")
        self.max_backoff = max_backoff if max_backoff is not None else max(30.0, self.interval)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> object:
        raise NotImplementedError

    def run(self) -> None:
        """Pass after pass in this thread until ``stop()``, then ``stopped()``."""
        try:
            self._loop()
        finally:
            self.stopped()

    def start(self) -> None:
        """Run on a thread of its own (how workers and servers run their loopers)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name=f"jobledger-{self.kind}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop after the current pass (safe from a signal handler when the loop runs in
        another thread); wait up to ``timeout`` seconds for its thread."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            self._thread = None

    def stopped(self) -> None:
        """Called once the loop ended, on its thread (a last flush, a lease given up)."""

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True when asked to stop meanwhile."""
        return self._stop.wait(seconds)

    def _loop(self) -> None:
        failures = 0
        while not self._stop.is_set():
            wait = self.interval
            try:
                self.run_once()
                failures = 0
            except BackendUnavailable as exc:
                failures += 1
                wait = min(self.max_backoff, self.interval * 2 ** min(failures, 10))
                log.warning("%s pass failed (%s); next in %.1f s", self.kind, exc, wait)
            except Exception:  # a bug: keep going, say so loudly
                failures += 1
                wait = min(self.max_backoff, self.interval * 2 ** min(failures, 10))
                log.exception("%s pass failed; next in %.1f s", self.kind, wait)
            if self._stop.wait(wait):
                break
