"""The outbox role: queues routed to a broker, and the outbox records that database triggers
write for their jobs, in the transaction that makes a job pending (jobledger.brokers). A relay
reads the due records and marks them published, fenced by its leader lease.

Written once for both dialects, over the dialect's database object: routes and outbox records (migration 006).

Triggers on the jobs table write the outbox records, in the transaction that makes a job
pending; these methods only read, mark and prune them. Routing a queue first takes
``route_lock``: on PostgreSQL a SHARE lock on the jobs table for the route's (short)
transaction, so that no job can become pending in the queue between the route's insert and its
backfill; on SQLite the write transaction itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from .._records import LeaderLease, OutboxQueueStats, OutboxRecord, Route
from ..errors import NotFound
from .common import seconds
from .database import Database
from .leader import Leader
from .rows import outbox_record, route

__all__ = ["Outbox"]


class Outbox:
    """Routes and outbox records (``backend.outbox``)."""

    def __init__(self, db: Database, leader: Leader):
        self._db = db
        self._leader = leader

    # -- routes ----------------------------------------------------------------------------------

    def route_add(
        self, queue: str, actor: str, note: str | None = None, now: datetime | None = None
    ) -> tuple[Route, int]:
        """Route a queue to a broker: from now on every job of it that becomes pending gets an
        outbox record (database triggers write them). Jobs already pending get one now. Returns
        the route and how many records that backfill wrote (0 when it was routed already)."""
        params = {"queue": queue, "actor": actor, "note": note, "now": self._db.clock(now)}
        with self._db.transaction() as c:
            self._db.execute(c, "route_lock")
            added = self._db.execute(c, "route_add", params).rowcount == 1
            backfilled = self._db.execute(c, "route_backfill", params).rowcount if added else 0
        [found] = [r for r in self.routes() if r.queue == queue]
        return found, backfilled

    def route_remove(self, queue: str) -> int:
        """Stop routing a queue (``NotFound`` if it is not routed); its unpublished records are
        discarded. Returns how many. Polling workers then see its jobs as before."""
        with self._db.transaction() as c:
            self._db.execute(c, "route_lock")
            if self._db.execute(c, "route_remove", {"queue": queue}).rowcount == 0:
                raise NotFound(f"queue {queue!r} is not routed to a broker")
            return self._db.execute(c, "route_discard", {"queue": queue}).rowcount

    def routes(self) -> list[Route]:
        """Every routed queue, by name."""
        return [route(r, self._db.to_time) for r in self._db.read("route_list")]

    # -- the outbox ------------------------------------------------------------------------------

    def due(
        self, limit: int, now: datetime | None = None, queues: Sequence[str] | None = None
    ) -> list[OutboxRecord]:
        """Unpublished records whose time has come, in ``(available_at, id)`` order."""
        params: dict[str, Any] = {"now": self._db.clock(now)}
        where = "1 = 1"
        if queues is not None:
            where, among = self._db.among("queue", "queues", list(queues))
            params |= among
        rows = self._db.read("outbox_due", params, queue_in=where, limit=max(1, int(limit)))
        return [outbox_record(r, self._db.to_time) for r in rows]

    def mark(self, ids: Sequence[int], lease: LeaderLease, now: datetime | None = None) -> int:
        """Mark records published, fenced by the relay's leader lease (``LeadershipLost`` and
        nothing marked when it is no longer held). Returns how many were marked."""
        if not ids:
            return 0
        clock = self._db.clock(now)
        with self._db.transaction() as c:
            self._leader.hold(c, lease, clock)
            rows = [{"id": int(record_id)} for record_id in ids]
            return self._db.executemany(c, "outbox_mark", rows, now=clock)

    def records(
        self,
        job_id: int | None = None,
        queue: str | None = None,
        unpublished: bool = False,
        limit: int = 100,
    ) -> list[OutboxRecord]:
        """Records, newest first: of one job, of one queue, only the unpublished ones."""
        param = self._db.param
        clauses: list[str] = []
        params: dict[str, Any] = {}
        if job_id is not None:
            clauses.append(f"job_id = {param('job_id')}")
            params["job_id"] = int(job_id)
        if queue is not None:
            clauses.append(f"queue = {param('queue')}")
            params["queue"] = queue
        if unpublished:
            clauses.append("published_at IS NULL AND superseded_at IS NULL")
        where = " AND ".join(clauses) or "1 = 1"
        rows = self._db.read("outbox_list", params, where=where, limit=max(1, int(limit)))
        return [outbox_record(r, self._db.to_time) for r in rows]

    def stats(self, now: datetime | None = None) -> list[OutboxQueueStats]:
        """Unpublished and due records per queue, with the age of the oldest due one."""
        rows = self._db.read("outbox_stats", {"now": self._db.clock(now)})
        return [
            OutboxQueueStats(
                queue=r[0],
                unpublished=int(r[1] or 0),
                due=int(r[2] or 0),
                oldest_due_seconds=None
                if r[3] is None
                else max(0.0, seconds(r[5]) - seconds(r[3])),
                last_published_at=self._db.to_time(r[4]),
            )
            for r in sorted(rows, key=lambda r: r[0])
        ]

    def prune(self, published_before: datetime, limit: int = 10000) -> int:
        """Delete up to ``limit`` records published before a time; return how many."""
        params = {"before": self._db.to_db(published_before)}
        return self._db.count("outbox_prune", params, limit=max(1, int(limit)))

    def republish(
        self,
        queue: str,
        due_before: datetime,
        now: datetime | None = None,
        limit: int = 10000,
    ) -> int:
        """Write a new record for each pending job of a routed queue, due at or before
        ``due_before``, that has no unpublished record (its message was lost by the broker). Returns how many."""
        params = {
            "queue": queue,
            "due_before": self._db.to_db(due_before),
            "now": self._db.clock(now),
        }
        return self._db.count("outbox_republish", params, limit=max(1, int(limit)))
