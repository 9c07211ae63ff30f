"""The stats role: what the CLI's status, the metrics and the dashboard read — counts per queue,
live depths through the partial indexes, and the per-minute rollups (jobledger.observability).

Written once for both dialects, over the dialect's database object: counts per queue, queue depths read through the partial
indexes, per-minute rollups (migration 007).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from .._records import EARLIEST_TIME, MinuteStats, QueueDepth, QueueStats
from .common import queue_depths_from_rows, seconds
from .database import Database

__all__ = ["Stats"]


class Stats:
    """Queue statistics and rollups (``backend.stats``)."""

    def __init__(self, db: Database):
        self._db = db

    def queues(
        self, now: datetime | None = None, late_after_seconds: float = 300.0
    ) -> list[QueueStats]:
        """Jobs per queue and state, the oldest due pending job, lease expiries of the last
        hour. This counts the whole table: for operators, not for a scrape."""
        db = self._db
        with db.reading() as c:
            # One clock for every statement of the read, so their counts agree.
            clock = db.execute(c, "clock", {"now": db.clock(now)}).fetchone()[0]
            # No job is due before the earliest time the ledger keeps: a wait longer than
            # that counts none late (PostgreSQL could not subtract it from its clock).
            longest = seconds(clock) - EARLIEST_TIME.timestamp() + 1.0
            params = {"now": clock, "late_after": min(float(late_after_seconds), longest)}
            counts = db.execute(c, "queue_counts").fetchall()
            oldest = db.execute(c, "queue_oldest_due", params).fetchall()
            expiries = db.execute(c, "queue_lease_expiries", params).fetchall()
        by_queue: dict[str, dict[str, int]] = {}
        attempts: dict[str, dict[str, int]] = {}
        for queue, state, n, tried in counts:
            by_queue.setdefault(queue, {})[state] = n
            attempts.setdefault(queue, {})[state] = int(tried or 0)
        late = {r[0]: (r[1], r[2] or 0) for r in oldest}
        expired = {r[0]: r[1] for r in expiries}
        result = []
        for queue in sorted(by_queue):
            first, n_late = late.get(queue, (None, 0))
            result.append(
                QueueStats(
                    queue=queue,
                    counts=by_queue[queue],
                    oldest_due_pending_seconds=None
                    if first is None
                    else max(0.0, seconds(clock) - seconds(first)),
                    late_pending=int(n_late),
                    lease_expiries_last_hour=expired.get(queue, 0),
                    attempts=attempts[queue],
                )
            )
        return result

    def depths(self, now: datetime | None = None) -> list[QueueDepth]:
        """Pending (and due), leased (and expired) and dead jobs per queue, with the age of the
        oldest due pending job; read through the partial indexes, never the whole table."""
        return queue_depths_from_rows(self._db.read("queue_depths", {"now": self._db.clock(now)}))

    def finished_counts(self) -> dict[str, dict[str, int]]:
        """Done and cancelled jobs per queue (``{queue: {state: n}}``). This reads the table:
        cache it."""
        counts: dict[str, dict[str, int]] = {}
        for queue, state, n in self._db.read("queue_finished_counts"):
            counts.setdefault(queue, {})[state] = int(n)
        return counts

    def minutes_add(self, rows: Sequence[MinuteStats]) -> None:
        """Add these counts to the stored rollups (one transaction)."""
        if not rows:
            return
        # Sorted by (minute, queue, task), so two writers lock the rows in the same order.
        ordered = sorted(rows, key=lambda r: (r.minute, r.queue, r.task))
        values = [
            {
                "minute": self._db.to_db(r.minute),
                "queue": r.queue,
                "task": r.task,
                "claimed": r.claimed,
                "wait_sum": float(r.wait_sum),
                "wait_max": float(r.wait_max),
                "done": r.done,
                "retried": r.retried,
                "dead": r.dead,
                "run_count": r.run_count,
                "run_sum": float(r.run_sum),
                "run_max": float(r.run_max),
            }
            for r in ordered
        ]
        with self._db.transaction() as c:
            self._db.executemany(c, "minute_stats_add", values)

    def minutes(self, since: datetime) -> list[MinuteStats]:
        """Rollups of minutes at or after ``since``, oldest first."""
        rows = self._db.read("minute_stats_list", {"since": self._db.to_db(since)})
        return [MinuteStats(self._db.to_time(r[0]), *r[1:]) for r in rows]  # type: ignore[arg-type]

    def minutes_prune(self, before: datetime) -> int:
        """Delete rollups of minutes before ``before``; return how many rows."""
        return self._db.count("minute_stats_prune", {"before": self._db.to_db(before)})
