"""The outbox role on SQLite: routes and outbox records (migration 006).

Triggers on ``jobledger_jobs`` write the outbox records, in the transaction that makes a job
pending; these methods only read, mark and prune them. Every write is one ``BEGIN IMMEDIATE``
transaction, so routing a queue cannot interleave with an enqueue.
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
from .database import SqliteDatabase, to_db, to_time
from .leader import SqliteLeader

__all__ = ["SqliteOutbox"]

_ts = to_db


def _dt(value: float) -> datetime:
    return to_time(value)  # type: ignore[return-value]


def _record(row: Sequence[Any]) -> OutboxRecord:
    return OutboxRecord(
        id=row[0],
        job_id=row[1],
        queue=row[2],
        key=row[3],
        reason=OutboxReason(row[4]),
        available_at=_dt(row[5]),
        created_at=_dt(row[6]),
        published_at=None if row[7] is None else _dt(row[7]),
        superseded_at=None if row[8] is None else _dt(row[8]),
    )


def _route(row: Sequence[Any]) -> Route:
    return Route(queue=row[0], routed_at=_dt(row[1]), routed_by=row[2], note=row[3])


class SqliteOutbox:
    """``Outbox`` for SQLite."""

    def __init__(self, db: SqliteDatabase, leader: SqliteLeader):
        self._db = db
        self._sql = db.sql
        self._leader = leader

    # -- routes ----------------------------------------------------------------------------------

    def route_add(
        self, queue: str, actor: str, note: str | None = None, now: datetime | None = None
    ) -> tuple[Route, int]:
        clock = _ts(now)
        params = {"queue": queue, "actor": actor, "note": note, "now": clock}
        with self._db.transaction() as c:
            added = c.execute(self._sql["route_add"], params).rowcount == 1
            backfilled = c.execute(self._sql["route_backfill"], params).rowcount if added else 0
        [route] = [r for r in self.routes() if r.queue == queue]
        return route, backfilled

    def route_remove(self, queue: str) -> int:
        with self._db.transaction() as c:
            if c.execute(self._sql["route_remove"], {"queue": queue}).rowcount == 0:
                raise NotFound(f"queue {queue!r} is not routed to a broker")
            return int(c.execute(self._sql["route_discard"], {"queue": queue}).rowcount)

    def routes(self) -> list[Route]:
        return [_route(r) for r in self._db.read(self._sql["route_list"])]

    # -- the outbox ------------------------------------------------------------------------------

    def due(
        self, limit: int, now: datetime | None = None, queues: Sequence[str] | None = None
    ) -> list[OutboxRecord]:
        params: dict[str, Any] = {"now": _ts(now)}
        where = "1 = 1"
        if queues is not None:
            names = []
            for i, queue in enumerate(queues):
                names.append(f":q{i}")
                params[f"q{i}"] = queue
            where = f"queue IN ({', '.join(names) or 'NULL'})"
        text = (
            self._sql["outbox_due"]
            .replace("{queues}", where)
            .replace("{limit}", str(max(1, int(limit))))
        )
        return [_record(r) for r in self._db.read(text, params)]

    def mark(self, ids: Sequence[int], lease: LeaderLease, now: datetime | None = None) -> int:
        if not ids:
            return 0
        clock = _ts(now)
        with self._db.transaction() as c:
            self._leader.hold(c, lease, clock)
            marked = 0
            for record_id in ids:
                marked += c.execute(
                    self._sql["outbox_mark"], {"id": int(record_id), "now": clock}
                ).rowcount
        return marked

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
            clauses.append("job_id = :job_id")
            params["job_id"] = int(job_id)
        if queue is not None:
            clauses.append("queue = :queue")
            params["queue"] = queue
        if unpublished:
            clauses.append("published_at IS NULL AND superseded_at IS NULL")
        text = (
            self._sql["outbox_list"]
            .replace("{where}", " AND ".join(clauses) or "1 = 1")
            .replace("{limit}", str(max(1, int(limit))))
        )
        return [_record(r) for r in self._db.read(text, params)]

    def stats(self, now: datetime | None = None) -> list[OutboxQueueStats]:
        clock = _ts(now)
        return [
            OutboxQueueStats(
                queue=r[0],
                unpublished=int(r[1] or 0),
                due=int(r[2] or 0),
                oldest_due_seconds=None if r[3] is None else max(0.0, clock - r[3]),
                last_published_at=None if r[4] is None else _dt(r[4]),
            )
            for r in sorted(
                self._db.read(self._sql["outbox_stats"], {"now": clock}), key=lambda r: r[0]
            )
        ]

    def prune(self, published_before: datetime, limit: int = 10000) -> int:
        text = self._sql["outbox_prune"].replace("{limit}", str(max(1, int(limit))))
        with self._db.transaction() as c:
            return int(c.execute(text, {"before": _ts(published_before)}).rowcount)

    def republish(
        self,
        queue: str,
        due_before: datetime,
        now: datetime | None = None,
        limit: int = 10000,
    ) -> int:
        text = self._sql["outbox_republish"].replace("{limit}", str(max(1, int(limit))))
        params = {"queue": queue, "due_before": _ts(due_before), "now": _ts(now)}
        with self._db.transaction() as c:
            return int(c.execute(text, params).rowcount)
