"""The stats role: what the CLI's status, the metrics and the dashboard read — counts per queue,
live depths through the partial indexes, and the per-minute rollups (jobledger.observability)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from .._records import MinuteStats, QueueDepth, QueueStats

__all__ = ["Stats"]


class Stats(Protocol):
    """Queue statistics and rollups (``backend.stats``)."""

    def queues(
        self, now: datetime | None = None, late_after_seconds: float = 300.0
    ) -> list[QueueStats]:
        """Jobs per queue and state, the oldest due pending job, lease expiries of the last
        hour. This counts the whole table: for operators, not for a scrape."""
        ...

    def depths(self, now: datetime | None = None) -> list[QueueDepth]:
        """Pending (and due), leased (and expired) and dead jobs per queue, with the age of the
        oldest due pending job; read through the partial indexes, never the whole table."""
        ...

    def finished_counts(self) -> dict[str, dict[str, int]]:
        """Done and cancelled jobs per queue (``{queue: {state: n}}``). This reads the table:
        cache it."""
        ...

    def minutes_add(self, rows: Sequence[MinuteStats]) -> None:
        """Add these counts to the stored rollups (one transaction)."""
        ...

    def minutes(self, since: datetime) -> list[MinuteStats]:
        """Rollups of minutes at or after ``since``, oldest first."""
        ...

    def minutes_prune(self, before: datetime) -> int:
        """Delete rollups of minutes before ``before``; return how many rows."""
        ...
