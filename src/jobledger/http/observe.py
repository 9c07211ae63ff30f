"""The server's share of observability: its metrics (with the ledger's gauges), the cached
snapshot of the ledger that ``/metrics`` and the dashboard read, and the per-minute rollups of
what pull consumers did (received, acked, nacked) — written like a worker's."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from .._records import ClaimedJob, MinuteStats, RescueResult
from ..maintenance.rollups import RollupFlusher
from ..observability.metrics import Metrics, metrics_for
from ..observability.rollup import MinuteStatsRecorder, install_rollups
from ..observability.snapshot import SnapshotCache

if TYPE_CHECKING:
    from .state import ServerState

__all__ = ["ServerObservability", "observe"]

_LOCK = threading.Lock()


class ServerObservability:
    """Metrics, snapshots and rollups of one server (``observe(state)``)."""

    def __init__(self, state: ServerState):
        settings = state.settings
        self.state = state
        self.metrics: Metrics = metrics_for(state.ledger)
        self.snapshots = SnapshotCache(
            state.ledger,
            live_seconds=settings.snapshot_seconds,
            finished_seconds=settings.finished_seconds,
        )
        self.metrics.add_ledger(self.snapshots)
        self.rollups: MinuteStatsRecorder = install_rollups(state.ledger)
        self._minutes: tuple[float, datetime, list[MinuteStats]] | None = None
        self._minutes_lock = threading.Lock()

    # -- pull consumers and the server's rescuer -------------------------------------------------

    def received(self, jobs: Sequence[ClaimedJob], lease_seconds: float | None = None) -> None:
        """A consumer received ``jobs``, leased for ``lease_seconds`` (None: their own)."""
        if lease_seconds is not None:
            # The claim's time is lease_until minus the lease it was given.
            jobs = [replace(j, lease_seconds=float(lease_seconds)) for j in jobs]
        self.metrics.claimed(jobs)
        self.rollups.claimed(jobs)

    def stale(self, queue: str, action: str) -> None:
        self.metrics.stale_write(queue, action)

    # The runtime's recorder tells pull consumers' outcomes here (``PullLeases``).

    def outcomes(self, observed: list[tuple[ClaimedJob, str, float, str | None]]) -> None:
        for job, outcome, _, _ in observed:
            self.metrics.finished(job.queue, job.task, outcome, None, job.attempt)
            self.rollups.finished(job.queue, job.task, outcome, None)

    def lease_lost(self, job: ClaimedJob, action: str) -> None:
        self.stale(job.queue, action)

    def count(self, **counts: int) -> None:
        """Counts are the metrics' (above)."""

    def rescued(self, rescued: list[RescueResult]) -> None:
        self.metrics.rescued(rescued)

    def flusher(self) -> RollupFlusher:
        return RollupFlusher(self.rollups, self.state.ledger.minute_stats)

    # -- reading -----------------------------------------------------------------------------------

    def last_hour(self) -> tuple[datetime, list[MinuteStats]]:
        """The rollups of the last 60 minutes (and the time they were read), reused for as long
        as a snapshot is."""
        with self._minutes_lock:
            now = time.monotonic()
            cached = self._minutes
            if cached is not None and now - cached[0] < self.snapshots.live_seconds:
                return cached[1], cached[2]
            read_at = datetime.now(UTC)
            since = read_at.replace(second=0, microsecond=0) - timedelta(minutes=59)
            rows = self.state.ledger.minute_stats.since(since)
            self._minutes = (now, read_at, rows)
            return read_at, rows


def observe(state: ServerState) -> ServerObservability:
    """The server's observability, made on first use."""
    if state.observability is None:
        with _LOCK:
            if state.observability is None:
                state.observability = ServerObservability(state)
    return state.observability  # type: ignore[no-any-return]
