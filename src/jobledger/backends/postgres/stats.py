"""The stats role on PostgreSQL: counts per queue, queue depths read through the partial
indexes, per-minute rollups (migration 007)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..._records import MinuteStats, QueueDepth, QueueStats
from ..common import queue_depths_from_rows
from .database import PostgresDatabase
from .database import to_time as _utc

__all__ = ["PostgresStats"]


class PostgresStats:
    """``Stats`` for PostgreSQL."""

    def __init__(self, db: PostgresDatabase):
        self._db = db

    def queues(
        self, now: datetime | None = None, late_after_seconds: float = 300.0
    ) -> list[QueueStats]:
        with self._db.transaction() as c:
            clock = now or c.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
            params = {"now": clock, "late_after": float(late_after_seconds)}
            counts = c.execute(self._db.sql["queue_counts"]).fetchall()
            oldest = c.execute(self._db.sql["queue_oldest_due"], params).fetchall()
            expiries = c.execute(self._db.sql["queue_lease_expiries"], params).fetchall()
        stats: dict[str, QueueStats] = {}
        for queue, state, n, attempts in counts:
            entry = stats.setdefault(queue, QueueStats(queue))
            entry.counts[state] = n
            entry.attempts[state] = int(attempts or 0)
        result = []
        late = {q: (first, n) for q, first, n in oldest}
        expired = dict(expiries)
        for queue in sorted(stats):
            first, n_late = late.get(queue, (None, 0))
            result.append(
                QueueStats(
                    queue=queue,
                    counts=stats[queue].counts,
                    oldest_due_pending_seconds=None
                    if first is None
                    else max(0.0, (clock - first).total_seconds()),
                    late_pending=n_late,
                    lease_expiries_last_hour=expired.get(queue, 0),
                    attempts=stats[queue].attempts,
                )
            )
        return result

    def depths(self, now: datetime | None = None) -> list[QueueDepth]:
        rows = self._db.run("queue_depths", {"now": now})
        return queue_depths_from_rows(rows)

    def finished_counts(self) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for queue, state, n in self._db.run("queue_finished_counts", {}):
            counts.setdefault(queue, {})[state] = int(n)
        return counts

    def minutes_add(self, rows: Sequence[MinuteStats]) -> None:
        if not rows:
            return
        ordered = sorted(rows, key=lambda r: (r.minute, r.queue, r.task))
        self._db.run(
            "minute_stats_add",
            {
                "minute": [r.minute for r in ordered],
                "queue": [r.queue for r in ordered],
                "task": [r.task for r in ordered],
                "claimed": [r.claimed for r in ordered],
                "wait_sum": [r.wait_sum for r in ordered],
                "wait_max": [r.wait_max for r in ordered],
                "done": [r.done for r in ordered],
                "retried": [r.retried for r in ordered],
                "dead": [r.dead for r in ordered],
                "run_count": [r.run_count for r in ordered],
                "run_sum": [r.run_sum for r in ordered],
                "run_max": [r.run_max for r in ordered],
            },
        )

    def minutes(self, since: datetime) -> list[MinuteStats]:
        return [
            MinuteStats(_utc(r[0]), *r[1:])  # type: ignore[arg-type]
            for r in self._db.run("minute_stats_list", {"since": since})
        ]

    def minutes_prune(self, before: datetime) -> int:
        rows = self._db.run("minute_stats_prune", {"before": before})
        return int(rows[0][0]) if rows else 0
