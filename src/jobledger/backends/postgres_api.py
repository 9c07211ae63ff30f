"""The PostgreSQL side of the HTTP API's storage: declared queues, API keys, rate limits,
publishing. Mixed into ``PostgresBackend``.

A publish takes, per key, a transaction-level advisory lock **without waiting**
(``pg_try_advisory_xact_lock``). A key whose lock is held belongs to a publish still in flight in
another transaction — in this server process or any other — and is reported as ``in_flight``
instead of queueing behind it. The lock ends with the transaction, so a crashed server never
leaves a key stuck.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg

from .._faults import fault_point
from .._records import (
    ApiKey,
    JobState,
    PublishItem,
    PublishOutcome,
    PublishStatus,
    QueueInfo,
    QueueSettings,
    Tombstone,
)
from ..errors import BackendUnavailable, NotFound
from .common import publish_compare as _compare
from .common import utc as _utc
from .postgres_newjob import new_job_arrays


def _queue(row: Sequence[Any]) -> QueueInfo:
    settings = QueueSettings(
        name=row[0],
        task=row[1],
        max_attempts=row[2],
        lease_seconds=row[3],
        backoff_base=row[4],
        backoff_cap=row[5],
        retention_seconds=row[6],
        require_key=bool(row[7]),
    )
    return QueueInfo(settings, _utc(row[8]), _utc(row[9]))  # type: ignore[arg-type]


def _apikey(row: Sequence[Any]) -> ApiKey:
    return ApiKey(
        id=row[0],
        name=row[1],
        scopes=tuple(row[2].split()),
        rate_per_second=row[3],
        burst=row[4],
        created_at=_utc(row[5]),
        revoked_at=_utc(row[6]),
    )


class PostgresApiMixin:
    """Queues, API keys, rate limits and publishing for ``PostgresBackend``."""

    if TYPE_CHECKING:
        schema: str
        channel: str
        _sql: dict[str, str]
        _tx: Callable[..., AbstractContextManager[psycopg.Connection[Any]]]
        _run: Callable[..., list[Any]]
        _tombstoned: Callable[..., dict[tuple[str, str], tuple[int, str, str]]]
        _same_payload: Callable[..., dict[tuple[str, str], tuple[int, str, Any]]]
        tombstone_find: Callable[..., list[Tombstone]]

    # -- declared queues ---------------------------------------------------------------------------

    def queue_put(
        self, settings: QueueSettings, now: datetime | None = None
    ) -> tuple[QueueInfo, bool]:
        s = settings
        [row] = self._run(
            "queue_put",
            {
                "name": s.name,
                "task": s.task,
                "max_attempts": s.max_attempts,
                "lease_seconds": s.lease_seconds,
                "backoff_base": s.backoff_base,
                "backoff_cap": s.backoff_cap,
                "retention_seconds": s.retention_seconds,
                "require_key": s.require_key,
                "now": now,
            },
        )
        return _queue(row), bool(row[10])

    def _select(self, name: str, where: str, params: dict[str, Any]) -> list[Any]:
        with self._tx() as c:
            return c.execute((self._sql[name] + where).encode(), params).fetchall()

    def queue_get(self, name: str) -> QueueInfo:
        rows = self._select("queue_select", " WHERE name = %(name)s", {"name": name})
        if not rows:
            raise NotFound(f"no queue named {name!r}; declare it first (PUT /v1/queues/{name})")
        return _queue(rows[0])

    def queue_list(self) -> list[QueueInfo]:
        return [_queue(r) for r in self._select("queue_select", " ORDER BY name", {})]

    # -- API keys ----------------------------------------------------------------------------------

    def apikey_insert(self, key: ApiKey, digest: str, now: datetime | None = None) -> ApiKey:
        params = {
            "id": key.id,
            "digest": digest,
            "name": key.name,
            "scopes": " ".join(key.scopes),
            "rate_per_second": key.rate_per_second,
            "burst": key.burst,
            "now": now,
        }
        with self._tx() as c:
            c.execute(self._sql["apikey_insert"].encode(), params)
            row = c.execute(
                (self._sql["apikey_select"] + " WHERE id = %(id)s").encode(), {"id": key.id}
            ).fetchone()
        return _apikey(row)  # type: ignore[arg-type]

    def apikey_get(self, digest: str) -> ApiKey | None:
        rows = self._select("apikey_select", " WHERE digest = %(digest)s", {"digest": digest})
        return _apikey(rows[0]) if rows else None

    def apikey_list(self) -> list[ApiKey]:
        return [_apikey(r) for r in self._select("apikey_select", " ORDER BY created_at, id", {})]

    def apikey_revoke(self, key_id: str, now: datetime | None = None) -> ApiKey:
        with self._tx() as c:
            c.execute(self._sql["apikey_revoke"].encode(), {"id": key_id, "now": now})
            row = c.execute(
                (self._sql["apikey_select"] + " WHERE id = %(id)s").encode(), {"id": key_id}
            ).fetchone()
        if row is None:
            raise NotFound(f"no API key with id {key_id!r}")
        return _apikey(row)

    # -- rate limits -------------------------------------------------------------------------------

    def ratelimit_take(
        self, bucket: str, rate: float, burst: float, cost: float = 1.0, now: datetime | None = None
    ) -> float:
        interval = 1.0 / rate
        params = {"bucket": bucket, "now": now, "cost": cost, "interval": interval, "burst": burst}
        with self._tx() as c:
            if c.execute(self._sql["ratelimit_take"].encode(), params).fetchone() is not None:
                return 0.0
            # tat - now: how far ahead of the clock the bucket is.
            (ahead,) = c.execute(self._sql["ratelimit_get"].encode(), params).fetchone()  # type: ignore[misc]
        return max(1e-3, max(0.0, float(ahead)) + cost * interval - burst * interval)

    # -- publishing --------------------------------------------------------------------------------

    def job_publish(
        self, items: Sequence[PublishItem], now: datetime | None = None
    ) -> list[PublishOutcome]:
        if not items:
            return []
        for _ in range(3):
            try:
                return self._publish_once(items, now)
            except _Again:
                continue
        raise BackendUnavailable("publish kept racing with pruning; try again")

    def _publish_once(
        self, items: Sequence[PublishItem], now: datetime | None
    ) -> list[PublishOutcome]:
        sql = self._sql
        with self._tx() as c:
            idents = list(dict.fromkeys(f"{i.job.queue}\n{i.job.key}" for i in items))
            locks = c.execute(
                sql["publish_try_locks"].encode(),
                {"prefix": f"jobledger:{self.schema}:", "keys": idents},
            ).fetchall()
            busy = {ident for ident, got in locks if not got}
            fault_point("publish.in_transaction")
            todo = [i for i in items if f"{i.job.queue}\n{i.job.key}" not in busy]
            jobs = [i.job for i in todo]
            created: dict[tuple[str, str], int] = {}
            if jobs:
                inserted = c.execute(
                    sql["job_insert"].encode(),
                    new_job_arrays(jobs) | {"channel": self.channel, "now": now},
                ).fetchall()
                created = {(r[1], r[2]): r[0] for r in inserted}
            # Keys whose jobs were pruned are held by tombstones, as for any enqueue.
            pruned = self._tombstoned(c, list(dict.fromkeys((j.queue, j.key) for j in jobs)), now)
            undo = [created.pop(i) for i in list(created) if i in pruned]
            if undo:
                c.execute(sql["job_insert_undo"].encode(), {"ids": undo})
            same_pruned = self._same_payload(c, jobs, pruned)
            missing = [
                (j.queue, j.key)
                for j in jobs
                if (j.queue, j.key) not in created and (j.queue, j.key) not in pruned
            ]
            existing: dict[tuple[str, str], tuple[int, Any, str | None]] = {}
            if missing:
                found = c.execute(
                    sql["publish_existing"].encode(),
                    {"queue": [m[0] for m in missing], "key": [m[1] for m in missing]},
                ).fetchall()
                existing = {(r[1], r[2]): (r[0], r[3], r[4]) for r in found}
                if any(m not in existing for m in missing):
                    # The row that made the insert conflict vanished before we read it (pruned):
                    # roll back and try again.
                    raise _Again
            statuses: list[tuple[PublishStatus, int | None]] = []
            first: dict[tuple[str, str], PublishItem] = {}
            records: list[tuple[PublishItem, int]] = []
            for item in items:
                ident = (item.job.queue, item.job.key)
                if f"{ident[0]}\n{ident[1]}" in busy:
                    statuses.append(("in_flight", None))
                elif ident in created and ident not in first:
                    first[ident] = item
                    records.append((item, created[ident]))
                    statuses.append(("created", created[ident]))
                elif ident in first:
                    same = first[ident].fingerprint == item.fingerprint
                    statuses.append(("replayed" if same else "conflict", created[ident]))
                elif ident in same_pruned:
                    job_id, task, is_same = same_pruned[ident]
                    same = task == item.job.task and is_same(item.job)
                    statuses.append(("replayed" if same else "conflict", job_id))
                else:
                    job_id, payload, fingerprint = existing[ident]
                    statuses.append((_compare(item, payload, fingerprint), job_id))
            if records:
                c.execute(
                    sql["publish_record"].encode(),
                    {
                        "queue": [i.job.queue for i, _ in records],
                        "key": [i.job.key for i, _ in records],
                        "job_id": [job_id for _, job_id in records],
                        "fingerprint": [i.fingerprint for i, _ in records],
                        "api_key_id": [i.api_key_id for i, _ in records],
                        "now": now,
                    },
                )
            ids = sorted({job_id for _, job_id in statuses if job_id is not None})
            rows = (
                c.execute(sql["publish_job_state"].encode(), {"ids": ids}).fetchall() if ids else []
            )
        state = {r[0]: (JobState(r[1]), _utc(r[2])) for r in rows}
        for ident, (job_id, _task, _digest) in pruned.items():
            for tomb in self.tombstone_find(ident[1], ident[0]):
                if tomb.job_id == job_id:
                    state[job_id] = (tomb.state, tomb.finished_at or tomb.pruned_at)
        return [
            PublishOutcome(status, job_id, *state[job_id])
            if job_id is not None
            else PublishOutcome(status)
            for status, job_id in statuses
        ]


class _Again(Exception):
    """The publish transaction must be run again."""
