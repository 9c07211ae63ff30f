"""Per-minute rollups of claims and outcomes (``ledger.minute_stats``): written by the flushers
of workers and servers, read by the dashboard's charts."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from .._records import MinuteStats
from .base import Service

__all__ = ["MinuteStatsBook"]


class MinuteStatsBook(Service):
    """The stored rollups."""

    def add(self, rows: Sequence[MinuteStats]) -> None:
        """Add these counts to the stored rollups (one transaction)."""
        self._backend.stats.minutes_add(rows)

    def since(self, minute: datetime) -> list[MinuteStats]:
        """Rollups of minutes at or after ``minute``, oldest first."""
        return self._backend.stats.minutes(minute)

    def prune(self, before: datetime) -> int:
        """Delete rollups of minutes before ``before``; return how many rows."""
        return self._backend.stats.minutes_prune(before)
