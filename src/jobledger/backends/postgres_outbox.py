"""The PostgreSQL side of broker delivery: routes, the outbox, claims by key (migration 006).

Mixed into ``PostgresBackend``. Triggers on the jobs table write the outbox records, in the
transaction that makes a job pending; these methods only read, mark and prune them. Routing a
queue takes a SHARE lock on the jobs table for its (short) transaction, so that no job can
become pending in the queue between the route's insert and its backfill.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg

from .._records import (
    JobRow,
    KeyClaim,
    LeaderLease,
    OutboxQueueStats,
    OutboxReason,
    OutboxRecord,
    Route,
)
from ..errors import NotFound
from .common import JOB_COLUMNS, claimed_job, job_row

__all__ = ["PostgresOutbox"]


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is UTC else value.astimezone(UTC)


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
    """Broker-delivery methods of the Backend protocol, for PostgreSQL."""

    if TYPE_CHECKING:
        _sql: dict[str, str]
        _tx: Callable[..., AbstractContextManager[psycopg.Connection[Any]]]
        _run: Callable[..., list[Any]]
        _fence: Callable[[psycopg.Connection[Any], LeaderLease, datetime | None], None]
        _tables: dict[str, str]

    # -- routes ----------------------------------------------------------------------------------

    def route_add(
        self, queue: str, actor: str, note: str | None = None, now: datetime | None = None
    ) -> tuple[Route, int]:
        params = {"queue": queue, "actor": actor, "note": note, "now": now}
        with self._tx() as c:
            c.execute(self._sql["route_lock"])
            added = c.execute(self._sql["route_add"], params).fetchall()
            backfilled = c.execute(self._sql["route_backfill"], params).rowcount if added else 0
        [route] = [r for r in self.route_list() if r.queue == queue]
        return route, backfilled

    def route_remove(self, queue: str) -> int:
        with self._tx() as c:
            c.execute(self._sql["route_lock"])
            if not c.execute(self._sql["route_remove"], {"queue": queue}).fetchall():
                raise NotFound(f"queue {queue!r} is not routed to a broker")
            return int(c.execute(self._sql["route_discard"], {"queue": queue}).rowcount)

    def route_list(self) -> list[Route]:
        return [_route(r) for r in self._run("route_list", {})]

    # -- the outbox ------------------------------------------------------------------------------

    def outbox_due(
        self, limit: int, now: datetime | None = None, queues: Sequence[str] | None = None
    ) -> list[OutboxRecord]:
        params = {"now": now, "queues": None if queues is None else list(queues)}
        return [_record(r) for r in self._run("outbox_due", params, limit=max(1, int(limit)))]

    def outbox_mark(
        self, ids: Sequence[int], lease: LeaderLease, now: datetime | None = None
    ) -> int:
        if not ids:
            return 0
        with self._tx() as c:
            self._fence(c, lease, now)
            rows = c.execute(
                self._sql["outbox_mark"],
                {"ids": [int(i) for i in ids], "now": now},
            ).fetchall()
        return len(rows)

    def outbox_list(
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
            self._sql["outbox_list"]
            .replace("{where}", " AND ".join(clauses) or "true")
            .replace("{limit}", str(max(1, int(limit))))
        )
        with self._tx() as c:
            return [_record(r) for r in c.execute(text.encode(), params).fetchall()]

    def outbox_stats(self, now: datetime | None = None) -> list[OutboxQueueStats]:
        rows = self._run("outbox_stats", {"now": now})
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

    def outbox_prune(self, published_before: datetime, limit: int = 10000) -> int:
        with self._tx() as c:
            text = self._sql["outbox_prune"].replace("{limit}", str(max(1, int(limit))))
            return int(c.execute(text.encode(), {"before": published_before}).rowcount)

    def outbox_republish(
        self,
        queue: str,
        due_before: datetime,
        now: datetime | None = None,
        limit: int = 10000,
    ) -> int:
        with self._tx() as c:
            text = self._sql["outbox_republish"].replace("{limit}", str(max(1, int(limit))))
            params = {"queue": queue, "due_before": due_before, "now": now}
            return int(c.execute(text.encode(), params).rowcount)

    # -- claims by key ---------------------------------------------------------------------------

    def job_claim_keys(
        self,
        wanted: Sequence[tuple[str, str]],
        worker: str,
        now: datetime | None = None,
        lease_seconds: float | None = None,
    ) -> list[KeyClaim]:
        if not wanted:
            return []
        pairs = {"queues": [q for q, _ in wanted], "keys": [k for _, k in wanted]}
        params = pairs | {"worker": worker, "now": now, "lease_seconds": lease_seconds}
        with self._tx() as c:
            rows = c.execute(self._sql["job_claim_keys"], params).fetchall()
            claimed = {(r[1], r[2]): claimed_job(r, _utc_or_none) for r in rows}
            # The others as they are now (and a pair named twice: claimed for its first mention).
            rest = [p for p in dict.fromkeys(wanted) if p not in claimed or wanted.count(p) > 1]
            current: dict[tuple[str, str], JobRow] = {}
            if rest:
                found = c.execute(
                    f"SELECT {JOB_COLUMNS} FROM {self._tables['jobs']} WHERE (queue, key) IN "
                    "(SELECT * FROM unnest(%(queues)s::text[], %(keys)s::text[]))",
                    {"queues": [q for q, _ in rest], "keys": [k for _, k in rest]},
                ).fetchall()
                current = {(r[1], r[2]): job_row(r, _utc_or_none) for r in found}
            grouped = {(j.queue, j.group) for j in current.values() if j.group is not None}
            paused: dict[tuple[str, str | None], datetime] = {}
            if grouped:
                paused = {
                    (r[0], r[1]): _utc(r[2])
                    for r in c.execute(
                        self._sql["group_paused_until"],
                        {
                            "queues": [q for q, _ in grouped],
                            "names": [n for _, n in grouped],
                            "now": now,
                        },
                    ).fetchall()
                }
        results = []
        for pair in wanted:
            job = claimed.pop(pair, None)
            if job is not None:
                results.append(KeyClaim(job))
                continue
            row = current.get(pair)
            until = None if row is None else paused.get((row.queue, row.group))
            results.append(KeyClaim(None, row, until))
        return results


def _utc_or_none(value: datetime | None) -> datetime | None:
    return None if value is None else _utc(value)
