"""The api role, for both dialects: declared queues, API keys, dashboard sessions and rate
limits (migrations 004 and 007)."""

from __future__ import annotations

from datetime import datetime

from ..._records import ApiKey, QueueInfo, QueueSettings
from ...errors import NotFound
from ..rows import api_key, queue_info
from .database import Database

__all__ = ["SqlApi"]


class SqlApi:
    """``Api`` over a dialect's database object."""

    def __init__(self, db: Database):
        self._db = db
        self._by_name = f"WHERE name = {db.param('name')}"
        self._by_id = f"WHERE id = {db.param('id')}"
        self._by_digest = f"WHERE digest = {db.param('digest')}"

    # -- declared queues -----------------------------------------------------------------------

    def queue_put(
        self, settings: QueueSettings, now: datetime | None = None
    ) -> tuple[QueueInfo, bool]:
        s = settings
        params = {
            "name": s.name,
            "task": s.task,
            "max_attempts": s.max_attempts,
            "lease_seconds": s.lease_seconds,
            "backoff_base": s.backoff_base,
            "backoff_cap": s.backoff_cap,
            "retention_seconds": s.retention_seconds,
            "require_key": bool(s.require_key),
            "timeout_seconds": s.timeout_seconds,
            "now": self._db.clock(now),
        }
        with self._db.transaction() as c:
            row = self._db.execute(c, "queue_insert", params).fetchone()
            created = row is not None
            if row is None:
                row = self._db.execute(c, "queue_update", params).fetchone()
        return queue_info(row, self._db.to_time), created

    def queue_get(self, name: str) -> QueueInfo:
        rows = self._db.read("queue_select", {"name": name}, where=self._by_name)
        if not rows:
            raise NotFound(f"no queue named {name!r}; declare it first (PUT /v1/queues/{name})")
        return queue_info(rows[0], self._db.to_time)

    def queues(self) -> list[QueueInfo]:
        rows = self._db.read("queue_select", where="ORDER BY name")
        return [queue_info(r, self._db.to_time) for r in rows]

    # -- API keys ------------------------------------------------------------------------------

    def key_insert(self, key: ApiKey, digest: str, now: datetime | None = None) -> ApiKey:
        params = {
            "id": key.id,
            "digest": digest,
            "name": key.name,
            "scopes": " ".join(key.scopes),
            "rate_per_second": key.rate_per_second,
            "burst": key.burst,
            "now": self._db.clock(now),
        }
        [row] = self._db.run("apikey_insert", params)
        return api_key(row, self._db.to_time)

    def key_get(self, digest: str) -> ApiKey | None:
        rows = self._db.read("apikey_select", {"digest": digest}, where=self._by_digest)
        return api_key(rows[0], self._db.to_time) if rows else None

    def keys(self) -> list[ApiKey]:
        rows = self._db.read("apikey_select", where="ORDER BY created_at, id")
        return [api_key(r, self._db.to_time) for r in rows]

    def key_revoke(self, key_id: str, now: datetime | None = None) -> ApiKey:
        params = {"id": key_id, "now": self._db.clock(now)}
        with self._db.transaction() as c:
            self._db.execute(c, "apikey_revoke", params)
            row = self._db.execute(c, "apikey_select", params, where=self._by_id).fetchone()
        if row is None:
            raise NotFound(f"no API key with id {key_id!r}")
        return api_key(row, self._db.to_time)

    # -- dashboard sessions --------------------------------------------------------------------

    def session_insert(
        self, digest: str, api_key_id: str, ttl_seconds: float, now: datetime | None = None
    ) -> datetime:
        params = {"digest": digest, "api_key_id": api_key_id, "ttl": float(ttl_seconds)}
        [(expires,)] = self._db.run("session_insert", params | {"now": self._db.clock(now)})
        return self._db.to_time(expires)  # type: ignore[return-value]

    def session_get(self, digest: str, now: datetime | None = None) -> ApiKey | None:
        rows = self._db.read("session_get", {"digest": digest, "now": self._db.clock(now)})
        return api_key(rows[0], self._db.to_time) if rows else None

    def session_delete(self, digest: str) -> None:
        self._db.count("session_delete", {"digest": digest})

    def session_prune(self, now: datetime | None = None) -> int:
        return self._db.count("session_prune", {"now": self._db.clock(now)})

    # -- rate limits ---------------------------------------------------------------------------

    def ratelimit_take(
        self, bucket: str, rate: float, burst: float, cost: float = 1.0, now: datetime | None = None
    ) -> float:
        interval = 1.0 / rate
        params = {
            "bucket": bucket,
            "now": self._db.clock(now),
            "cost": cost,
            "interval": interval,
            "burst": burst,
        }
        with self._db.transaction() as c:
            if self._db.execute(c, "ratelimit_take", params).fetchone() is not None:
                return 0.0
            (ahead,) = self._db.execute(c, "ratelimit_get", params).fetchone()
        return max(1e-3, max(0.0, float(ahead)) + cost * interval - burst * interval)
