"""The api role on PostgreSQL: declared queues, API keys, dashboard sessions and rate limits
(migrations 004 and 007)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..._records import ApiKey, QueueInfo, QueueSettings
from ...errors import NotFound
from .database import PostgresDatabase
from .database import to_time as _utc

__all__ = ["PostgresApi"]


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


class PostgresApi:
    """``Api`` for PostgreSQL."""

    def __init__(self, db: PostgresDatabase):
        self._db = db

    # -- declared queues ---------------------------------------------------------------------------

    def queue_put(
        self, settings: QueueSettings, now: datetime | None = None
    ) -> tuple[QueueInfo, bool]:
        s = settings
        [row] = self._db.run(
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
        with self._db.transaction() as c:
            return c.execute((self._db.sql[name] + where).encode(), params).fetchall()

    def queue_get(self, name: str) -> QueueInfo:
        rows = self._select("queue_select", " WHERE name = %(name)s", {"name": name})
        if not rows:
            raise NotFound(f"no queue named {name!r}; declare it first (PUT /v1/queues/{name})")
        return _queue(rows[0])

    def queues(self) -> list[QueueInfo]:
        return [_queue(r) for r in self._select("queue_select", " ORDER BY name", {})]

    # -- API keys ----------------------------------------------------------------------------------

    def key_insert(self, key: ApiKey, digest: str, now: datetime | None = None) -> ApiKey:
        params = {
            "id": key.id,
            "digest": digest,
            "name": key.name,
            "scopes": " ".join(key.scopes),
            "rate_per_second": key.rate_per_second,
            "burst": key.burst,
            "now": now,
        }
        with self._db.transaction() as c:
            c.execute(self._db.sql["apikey_insert"].encode(), params)
            row = c.execute(
                (self._db.sql["apikey_select"] + " WHERE id = %(id)s").encode(), {"id": key.id}
            ).fetchone()
        return _apikey(row)  # type: ignore[arg-type]

    def key_get(self, digest: str) -> ApiKey | None:
        rows = self._select("apikey_select", " WHERE digest = %(digest)s", {"digest": digest})
        return _apikey(rows[0]) if rows else None

    def keys(self) -> list[ApiKey]:
        return [_apikey(r) for r in self._select("apikey_select", " ORDER BY created_at, id", {})]

    def key_revoke(self, key_id: str, now: datetime | None = None) -> ApiKey:
        with self._db.transaction() as c:
            c.execute(self._db.sql["apikey_revoke"].encode(), {"id": key_id, "now": now})
            row = c.execute(
                (self._db.sql["apikey_select"] + " WHERE id = %(id)s").encode(), {"id": key_id}
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
        with self._db.transaction() as c:
            if c.execute(self._db.sql["ratelimit_take"].encode(), params).fetchone() is not None:
                return 0.0
            # tat - now: how far ahead of the clock the bucket is.
            (ahead,) = c.execute(self._db.sql["ratelimit_get"].encode(), params).fetchone()  # type: ignore[misc]
        return max(1e-3, max(0.0, float(ahead)) + cost * interval - burst * interval)

    # -- dashboard sessions --------------------------------------------------------------------

    def session_insert(
        self, digest: str, api_key_id: str, ttl_seconds: float, now: datetime | None = None
    ) -> datetime:
        [(expires,)] = self._db.run(
            "session_insert",
            {"digest": digest, "api_key_id": api_key_id, "ttl": float(ttl_seconds), "now": now},
        )
        return _utc(expires)  # type: ignore[return-value]

    def session_get(self, digest: str, now: datetime | None = None) -> ApiKey | None:
        rows = self._db.run("session_get", {"digest": digest, "now": now})
        if not rows:
            return None
        return _apikey(rows[0])

    def session_delete(self, digest: str) -> None:
        self._db.run("session_delete", {"digest": digest})

    def session_prune(self, now: datetime | None = None) -> int:
        rows = self._db.run("session_prune", {"now": now})
        return int(rows[0][0]) if rows else 0
