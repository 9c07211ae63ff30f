"""The outbox role on PostgreSQL: routes and outbox records (migration 006).

Triggers on the jobs table write the outbox records, in the transaction that makes a job
pending; these methods only read, mark and prune them. Routing a queue takes a SHARE lock on
the jobs table for its (short) transaction, so that no job can become pending in the queue
between the route's insert and its backfill.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..._records import (
    LeaderLease,
    OutboxQueueStats,
    OutboxReason,
    OutboxRecord,
    Route,
)
from ...errors import NotFound
from .database import PostgresDatabase, to_time
from .leader import PostgresLeader

__all__ = ["PostgresOutbox"]


def _utc(value: datetime) -> datetime:
    return to_time(value)  # type: ignore[return-value]


def _record(row: Sequence[Any]) -> OutboxRecord:
    return OutboxRecord(
        id=row[0],
        job_id=row[1],
        queue=row[2],
        key=row[3],
        reason=OutboxReason(row[4]),
        available_at=_utc(row[5]),
        created_at=_utc(row[6]),
        published_at=None if row[7] is None else _utc(row[7]),
        superseded_at=None if row[8] is None else _utc(row[8]),
    )


def _route(row: Sequence[Any]) -> Route:
    return Route(queue=row[0], routed_at=_utc(row[1]), routed_by=row[2], note=row[3])


class PostgresOutbox:
    """``Outbox`` for PostgreSQL."""

    def __init__(self, db: PostgresDatabase, leader: PostgresLeader):
        self._db = db
        self._leader = leader

    # -- routes ----------------------------------------------------------------------------------

    def route_add(
        self, queue: str, actor: str, note: str | None = None, now: datetime | None = None
    ) -> tuple[Route, int]:
        params = {"queue": queue, "actor": actor, "note": note, "now": now}
        with self._db.transaction() as c:
            c.execute(self._db.sql["route_lock"])
            added = c.execute(self._db.sql["route_add"], params).fetchall()
            backfilled = c.execute(self._db.sql["route_backfill"], params).rowcount if added else 0
        [route] = [r for r in self.routes() if r.queue == queue]
        return route, backfilled

    def route_remove(self, queue: str) -> int:
        with self._db.transaction() as c:
            c.execute(self._db.sql["route_lock"])
            if not c.execute(self._db.sql["route_remove"], {"queue": queue}).fetchall():
                raise NotFound(f"queue {queue!r} is not routed to a broker")
            return int(c.execute(self._db.sql["route_discard"], {"queue": queue}).rowcount)

    def routes(self) -> list[Route]:
        return [_route(r) for r in self._db.run("route_list", {})]

    # -- the outbox ------------------------------------------------------------------------------

    def due(
        self, limit: int, now: datetime | None = None, queues: Sequence[str] | None = None
    ) -> list[OutboxRecord]:
        params = {"now": now, "queues": None if queues is None else list(queues)}
        return [_record(r) for r in self._db.run("outbox_due", params, limit=max(1, int(limit)))]

    def mark(self, ids: Sequence[int], lease: LeaderLease, now: datetime | None = None) -> int:
        if not ids:
            return 0
        with self._db.transaction() as c:
            self._leader.hold(c, lease, now)
            rows = c.execute(
                self._db.sql["outbox_mark"],
                {"ids": [int(i) for i in ids], "now": now},
            ).fetchall()
        return len(rows)

    def records(
        self,
        job_id: int | None = None,
        queue: str | None = None,
        unpublished: bool = False,
        limit: int = 100,
    ) -> list[OutboxRecord]:
        clauses: list[str] = []
        params: dict[str, Any] = {}
        if job_id is not None:
            clauses.append("job_id = %(job_id)s")
            params["job_id"] = int(job_id)
        if queue is not None:
            clauses.append("queue = %(queue)s")
            params["queue"] = queue
        if unpublished:
            clauses.append("published_at IS NULL AND superseded_at IS NULL")
        text = (
            self._db.sql["outbox_list"]
            .replace("{where}", " AND ".join(clauses) or "true")
            .replace("{limit}", str(max(1, int(limit))))
        )
        with self._db.transaction() as c:
            return [_record(r) for r in c.execute(text.encode(), params).fetchall()]

    def stats(self, now: datetime | None = None) -> list[OutboxQueueStats]:
        rows = self._db.run("outbox_stats", {"now": now})
        return [
            OutboxQueueStats(
                queue=r[0],
                unpublished=int(r[1]),
                due=int(r[2]),
                oldest_due_seconds=None
                if r[3] is None
                else max(0.0, (r[5] - r[3]).total_seconds()),
                last_published_at=None if r[4] is None else _utc(r[4]),
            )
            for r in sorted(rows, key=lambda r: r[0])
        ]

    def prune(self, published_before: datetime, limit: int = 10000) -> int:
        with self._db.transaction() as c:
            text = self._db.sql["outbox_prune"].replace("{limit}", str(max(1, int(limit))))
            return int(c.execute(text.encode(), {"before": published_before}).rowcount)

    def republish(
        self,
        queue: str,
        due_before: datetime,
        now: datetime | None = None,
        limit: int = 10000,
    ) -> int:
        with self._db.transaction() as c:
            text = self._db.sql["outbox_republish"].replace("{limit}", str(max(1, int(limit))))
            params = {"queue": queue, "due_before": due_before, "now": now}
            return int(c.execute(text.encode(), params).rowcount)
