"""The rollup flusher: writes the per-minute sums that the observers added up in memory
(``observability.rollup.MinuteStatsRecorder``) every few seconds, one upsert per row, so that
neither the claim nor the completion path gains a statement; once more when stopped."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from .looper import Looper

if TYPE_CHECKING:
    from .._services.stats import MinuteStatsBook

__all__ = ["RollupFlusher"]

log = logging.getLogger("jobledger.maintenance")


class Sums(Protocol):
    """What accumulates between flushes (the recorder)."""

    def flush(self, store: MinuteStatsBook) -> int:
        """Write what accumulated; the rows written, or -1 when the write failed (the sums are
        kept for the next flush)."""
        ...


class RollupFlusher(Looper):
    """Flushes ``sums`` into ``store`` every ``interval`` seconds (a worker's or a server's
    service)."""

    name = "rollups"

    def __init__(self, sums: Sums, store: MinuteStatsBook, interval: float = 5.0):
        super().__init__(interval)
        self._sums = sums
        self._store = store
        self._healthy = True

    def run_once(self) -> int:
        written = self._sums.flush(self._store)
        self._healthy = written >= 0
        return written

    def stopped(self) -> None:
        if not self._healthy:
            return  # the database was failing: never hold up a shutdown for a last flush
        try:
            self.run_once()
        except Exception:  # a bug: never take the host down with it
            log.exception("writing per-minute stats failed")
