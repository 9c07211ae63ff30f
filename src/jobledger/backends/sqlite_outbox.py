"""The SQLite side of broker delivery: routes, the outbox, claims by key (migration 006).

Mixed into ``SqliteBackend``. Triggers on ``jobledger_jobs`` write the outbox records, in the
transaction that makes a job pending; these methods only read, mark and prune them. Every write
is one ``BEGIN IMMEDIATE`` transaction, so routing a queue cannot interleave with an enqueue.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .._records import (
    KeyClaim,
    LeaderLease,
    OutboxQueueStats,
    OutboxReason,
    OutboxRecord,
    Route,
)
from ..errors import NotFound
from .common import JOB_COLUMNS, claimed_job, job_row

__all__ = ["SqliteOutbox"]


def _ts(value: datetime | None) -> float:
    """Epoch seconds; None is the process clock now (as in sqlite.py)."""
    if value is None:
        return time.time()
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: pass an aware datetime (UTC)")
    return value.timestamp()


def _dt(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


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
    """Broker-delivery methods of the Backend protocol, for SQLite."""

    if TYPE_CHECKING:
        _sql: dict[str, str]
        _write: Callable[..., AbstractContextManager[sqlite3.Connection]]
        _read: Callable[..., list[Any]]
        _fence: Callable[[sqlite3.Connection, LeaderLease, float], None]

    # -- routes ----------------------------------------------------------------------------------

    def route_add(
        self, queue: str, actor: str, note: str | None = None, now: datetime | None = None
    ) -> tuple[Route, int]:
        clock = _ts(now)
        params = {"queue": queue, "actor": actor, "note": note, "now": clock}
        with self._write() as c:
            added = c.execute(self._sql["route_add"], params).rowcount == 1
            backfilled = c.execute(self._sql["route_backfill"], params).rowcount if added else 0
        [route] = [r for r in self.route_list() if r.queue == queue]
        return route, backfilled

    def route_remove(self, queue: str) -> int:
        with self._write() as c:
            if c.execute(self._sql["route_remove"], {"queue": queue}).rowcount == 0:
                raise NotFound(f"queue {queue!r} is not routed to a broker")
            return int(c.execute(self._sql["route_discard"], {"queue": queue}).rowcount)

    def route_list(self) -> list[Route]:
        return [_route(r) for r in self._read(self._sql["route_list"])]

    # -- the outbox ------------------------------------------------------------------------------

    def outbox_due(
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
        return [_record(r) for r in self._read(text, params)]

    def outbox_mark(
        self, ids: Sequence[int], lease: LeaderLease, now: datetime | None = None
    ) -> int:
        if not ids:
            return 0
        clock = _ts(now)
        with self._write() as c:
            self._fence(c, lease, clock)
            marked = 0
            for record_id in ids:
                marked += c.execute(
                    self._sql["outbox_mark"], {"id": int(record_id), "now": clock}
                ).rowcount
        return marked

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
        return [_record(r) for r in self._read(text, params)]

    def outbox_stats(self, now: datetime | None = None) -> list[OutboxQueueStats]:
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
                self._read(self._sql["outbox_stats"], {"now": clock}), key=lambda r: r[0]
            )
        ]

    def outbox_prune(self, published_before: datetime, limit: int = 10000) -> int:
        text = self._sql["outbox_prune"].replace("{limit}", str(max(1, int(limit))))
        with self._write() as c:
            return int(c.execute(text, {"before": _ts(published_before)}).rowcount)

    def outbox_republish(
        self,
        queue: str,
        due_before: datetime,
        now: datetime | None = None,
        limit: int = 10000,
    ) -> int:
        text = self._sql["outbox_republish"].replace("{limit}", str(max(1, int(limit))))
        params = {"queue": queue, "due_before": _ts(due_before), "now": _ts(now)}
        with self._write() as c:
            return int(c.execute(text, params).rowcount)

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
        clock = _ts(now)
        results = []
        with self._write() as c:
            for queue, key in wanted:
                params = {
                    "queue": queue,
                    "key": key,
                    "worker": worker,
                    "now": clock,
                    "lease_seconds": lease_seconds,
                }
                r = c.execute(self._sql["job_claim_keys"], params).fetchone()
                if r is not None:
                    c.execute(self._sql["attempt_open"], (r[0], r[5], r[6], worker, clock))
                    results.append(KeyClaim(claimed_job(r, _dt_or_none)))
                    continue
                row = c.execute(
                    f"SELECT {JOB_COLUMNS} FROM jobledger_jobs WHERE queue = ? AND key = ?",
                    (queue, key),
                ).fetchone()
                current = None if row is None else job_row(row, _dt_or_none)
                paused = None
                if current is not None and current.group is not None:
                    found = c.execute(
                        self._sql["group_paused_until"],
                        {"queue": queue, "name": current.group, "now": clock},
                    ).fetchone()
                    paused = None if found is None else _dt(found[0])
                results.append(KeyClaim(None, current, paused))
        return results


def _dt_or_none(value: float | None) -> datetime | None:
    return None if value is None else _dt(value)
