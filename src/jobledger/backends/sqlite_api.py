"""The SQLite side of the HTTP API's storage: declared queues, API keys, rate limits, publishing.

Mixed into ``SqliteBackend``. Every write is one ``BEGIN IMMEDIATE`` transaction: SQLite's single
writer lock serialises publishes of the same key from any number of processes, so a second
request never overlaps the first one's write — it waits for it and finds its job.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .._faults import fault_point
from .._records import (
    ApiKey,
    JobState,
    PublishItem,
    PublishOutcome,
    QueueInfo,
    QueueSettings,
    Tombstone,
    payload_digest,
)
from ..errors import NotFound
from .common import from_epoch as _dt
from .common import insert_values
from .common import publish_compare as _compare


def _ts(value: datetime | None) -> float:
    return time.time() if value is None else value.timestamp()


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
    return QueueInfo(settings, _dt(row[8]), _dt(row[9]))  # type: ignore[arg-type]


def _apikey(row: Sequence[Any]) -> ApiKey:
    return ApiKey(
        id=row[0],
        name=row[1],
        scopes=tuple(row[2].split()),
        rate_per_second=row[3],
        burst=row[4],
        created_at=_dt(row[5]),
        revoked_at=_dt(row[6]),
    )


class SqliteApiMixin:
    """Queues, API keys, rate limits and publishing for ``SqliteBackend``."""

    if TYPE_CHECKING:
        _sql: dict[str, str]
        _write: Callable[..., AbstractContextManager[sqlite3.Connection]]
        _read: Callable[..., list[Any]]
        tombstone_find: Callable[..., list[Tombstone]]

    # -- declared queues ---------------------------------------------------------------------------

    def queue_put(
        self, settings: QueueSettings, now: datetime | None = None
    ) -> tuple[QueueInfo, bool]:
        s = settings
        with self._write() as c:
            existed = c.execute(self._sql["queue_exists"], {"name": s.name}).fetchone()
            c.execute(
                self._sql["queue_put"],
                {
                    "name": s.name,
                    "task": s.task,
                    "max_attempts": s.max_attempts,
                    "lease_seconds": s.lease_seconds,
                    "backoff_base": s.backoff_base,
                    "backoff_cap": s.backoff_cap,
                    "retention_seconds": s.retention_seconds,
                    "require_key": int(s.require_key),
                    "now": _ts(now),
                },
            )
            row = c.execute(self._sql["queue_select"] + " WHERE name = ?", (s.name,)).fetchone()
        return _queue(row), existed is None

    def queue_get(self, name: str) -> QueueInfo:
        rows = self._read(self._sql["queue_select"] + " WHERE name = ?", (name,))
        if not rows:
            raise NotFound(f"no queue named {name!r}; declare it first (PUT /v1/queues/{name})")
        return _queue(rows[0])

    def queue_list(self) -> list[QueueInfo]:
        return [_queue(r) for r in self._read(self._sql["queue_select"] + " ORDER BY name")]

    # -- API keys ----------------------------------------------------------------------------------

    def apikey_insert(self, key: ApiKey, digest: str, now: datetime | None = None) -> ApiKey:
        with self._write() as c:
            c.execute(
                self._sql["apikey_insert"],
                {
                    "id": key.id,
                    "digest": digest,
                    "name": key.name,
                    "scopes": " ".join(key.scopes),
                    "rate_per_second": key.rate_per_second,
                    "burst": key.burst,
                    "now": _ts(now),
                },
            )
            row = c.execute(self._sql["apikey_select"] + " WHERE id = ?", (key.id,)).fetchone()
        return _apikey(row)

    def apikey_get(self, digest: str) -> ApiKey | None:
        rows = self._read(self._sql["apikey_select"] + " WHERE digest = ?", (digest,))
        return _apikey(rows[0]) if rows else None

    def apikey_list(self) -> list[ApiKey]:
        return [
            _apikey(r) for r in self._read(self._sql["apikey_select"] + " ORDER BY created_at, id")
        ]

    def apikey_revoke(self, key_id: str, now: datetime | None = None) -> ApiKey:
        with self._write() as c:
            c.execute(self._sql["apikey_revoke"], {"id": key_id, "now": _ts(now)})
            row = c.execute(self._sql["apikey_select"] + " WHERE id = ?", (key_id,)).fetchone()
        if row is None:
            raise NotFound(f"no API key with id {key_id!r}")
        return _apikey(row)

    # -- rate limits -------------------------------------------------------------------------------

    def ratelimit_take(
        self, bucket: str, rate: float, burst: float, cost: float = 1.0, now: datetime | None = None
    ) -> float:
        clock = _ts(now)
        interval = 1.0 / rate
        params = {
            "bucket": bucket,
            "now": clock,
            "cost": cost,
            "interval": interval,
            "burst": burst,
        }
        with self._write() as c:
            if c.execute(self._sql["ratelimit_take"], params).fetchone() is not None:
                return 0.0
            (tat,) = c.execute(self._sql["ratelimit_get"], {"bucket": bucket}).fetchone()
        return max(1e-3, float(max(tat, clock)) + cost * interval - clock - burst * interval)

    # -- publishing --------------------------------------------------------------------------------

    def job_publish(
        self, items: Sequence[PublishItem], now: datetime | None = None
    ) -> list[PublishOutcome]:
        if not items:
            return []
        clock = _ts(now)
        outcomes: list[PublishOutcome] = []
        with self._write() as c:
            fault_point("publish.in_transaction")
            for item in items:
                job = item.job
                row = c.execute(
                    self._sql["job_insert"],
                    insert_values(job, clock if job.run_at is None else _ts(job.run_at), clock),
                ).fetchone()
                if row is not None:
                    job_id, status = row[0], "created"
                    self._publish_record(c, item, job_id, clock)
                else:
                    found = c.execute(
                        self._sql["publish_existing"], {"queue": job.queue, "key": job.key}
                    ).fetchone()
                    if found is None:
                        # No job, nothing inserted: a tombstone of a pruned job holds the key.
                        outcomes.append(self._publish_pruned(c, item, clock))
                        continue
                    job_id, payload, fingerprint = found
                    status = _compare(item, payload, fingerprint)
                state, run_at = c.execute(self._sql["publish_job_state"], {"id": job_id}).fetchone()
                outcomes.append(PublishOutcome(status, job_id, JobState(state), _dt(run_at)))  # type: ignore[arg-type]
        return outcomes

    def _publish_pruned(
        self, c: sqlite3.Connection, item: PublishItem, clock: float
    ) -> PublishOutcome:
        """A publish of a key whose job was pruned: a replay of the same payload names the
        pruned job (in its final state); another payload is a conflict."""
        job = item.job
        job_id, task, digest = c.execute(
            self._sql["tombstone_live"], {"queue": job.queue, "key": job.key, "now": clock}
        ).fetchone()
        [tomb] = [t for t in self.tombstone_find(job.key, job.queue) if t.job_id == job_id]
        same = task == job.task and payload_digest(job.payload_json) == digest
        # The pruned job's run time is gone; its finish time stands in for it.
        run_at = tomb.finished_at or tomb.pruned_at
        return PublishOutcome("replayed" if same else "conflict", job_id, tomb.state, run_at)

    def _publish_record(
        self, c: sqlite3.Connection, item: PublishItem, job_id: int, clock: float
    ) -> None:
        c.execute(
            self._sql["publish_record"],
            {
                "queue": item.job.queue,
                "key": item.job.key,
                "job_id": job_id,
                "fingerprint": item.fingerprint,
                "api_key_id": item.api_key_id,
                "now": clock,
            },
        )
