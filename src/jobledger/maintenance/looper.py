"""``Looper``: the shape of every background loop — a pass every ``interval`` on a thread of its
own, a backoff while the database is unavailable, and a bug logged rather than fatal."""

from __future__ import annotations

import logging
import threading

from ..errors import BackendUnavailable

__all__ = ["Looper"]

log = logging.getLogger("jobledger.maintenance")


class Looper:
    """Subclasses give ``name`` and ``run_once()``; ``start()`` runs it every ``interval``
    seconds until ``stop()``. ``run_once`` may also be called directly (a worker rescues in its
    own loop; tests pass an explicit ``now``)."""

    name = "looper"

    def __init__(self, interval: float, *, max_backoff: float | None = None):
        if not interval > 0:
            raise ValueError(f"{self.name} interval must be > 0 seconds, got {interval!r}")
        self.interval = float(interval)
        self.max_backoff = max_backoff if max_backoff is not None else max(30.0, self.interval)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> object:
        raise NotImplementedError

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._loop, name=f"jobledger-{self.name}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self._thread = None
        self.stopped()

    def stopped(self) -> None:
        """Called once the loop ended (a last flush, a lease given up)."""

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
                log.warning("%s failed (%s); next in %.1f s", self.name, exc, wait)
            except Exception:  # a bug: keep going, say so loudly
                failures += 1
                wait = min(self.max_backoff, self.interval * 2 ** min(failures, 10))
                log.exception("%s failed; next in %.1f s", self.name, wait)
            if self._stop.wait(wait):
                break
