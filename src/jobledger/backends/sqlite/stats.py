"""The stats role on SQLite: counts per queue, queue depths read through the partial indexes,
per-minute rollups (migration 007)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..._records import MinuteStats, QueueDepth, QueueStats
from ..common import queue_depths_from_rows
from .database import SqliteDatabase, to_db
from .database import to_time as _dt

__all__ = ["SqliteStats"]

_ts = to_db


class SqliteStats:
    """``Stats`` for SQLite."""

    def __init__(self, db: SqliteDatabase):
        self._db = db
        self._sql = db.sql

    def queues(
        self, now: datetime | None = None, late_after_seconds: float = 300.0
    ) -> list[QueueStats]:
        clock = _ts(now)
        params = {"now": clock, "late_after": float(late_after_seconds)}
        counts = self._db.read(self._sql["queue_counts"])
        attempts: dict[str, dict[str, int]] = {}
        for queue, state, _, n in counts:
            attempts.setdefault(queue, {})[state] = int(n or 0)
        oldest = {
            r[0]: (r[1], r[2] or 0) for r in self._db.read(self._sql["queue_oldest_due"], params)
        }
        expired = {r[0]: r[1] for r in self._db.read(self._sql["queue_lease_expiries"], params)}
        by_queue: dict[str, dict[str, int]] = {}
        for queue, state, n, _ in counts:
            by_queue.setdefault(queue, {})[state] = n
        result = []
        for queue in sorted(by_queue):
            first, n_late = oldest.get(queue, (None, 0))
            result.append(
                QueueStats(
                    queue=queue,
                    counts=by_queue[queue],
                    oldest_due_pending_seconds=None if first is None else max(0.0, clock - first),
                    late_pending=int(n_late),
                    lease_expiries_last_hour=expired.get(queue, 0),
                    attempts=attempts.get(queue, {}),
                )
            )
        return result

    def depths(self, now: datetime | None = None) -> list[QueueDepth]:
        clock = _ts(now)
        rows = self._db.read(self._sql["queue_depths"], {"now": clock})
        return queue_depths_from_rows((q, s, n, m, first, clock) for q, s, n, m, first in rows)

    def finished_counts(self) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for queue, state, n in self._db.read(self._sql["queue_finished_counts"]):
            counts.setdefault(queue, {})[state] = int(n)
        return counts

    def minutes_add(self, rows: Sequence[MinuteStats]) -> None:
        if not rows:
            return
        with self._db.transaction() as c:
            c.executemany(
                self._sql["minute_stats_add"],
                [
                    {
                        "minute": r.minute.timestamp(),
                        "queue": r.queue,
                        "task": r.task,
                        "claimed": r.claimed,
                        "wait_sum": r.wait_sum,
                        "wait_max": r.wait_max,
                        "done": r.done,
                        "retried": r.retried,
                        "dead": r.dead,
                        "run_count": r.run_count,
                        "run_sum": r.run_sum,
                        "run_max": r.run_max,
                    }
                    for r in sorted(rows, key=lambda r: (r.minute, r.queue, r.task))
                ],
            )

    def minutes(self, since: datetime) -> list[MinuteStats]:
        rows = self._db.read(self._sql["minute_stats_list"], {"since": since.timestamp()})
        return [MinuteStats(_dt(r[0]), *r[1:]) for r in rows]  # type: ignore[arg-type]

    def minutes_prune(self, before: datetime) -> int:
        with self._db.transaction() as c:
            return c.execute(
                self._sql["minute_stats_prune"], {"before": before.timestamp()}
            ).rowcount
