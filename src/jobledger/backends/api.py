"""The api role: what the HTTP API keeps in the database — declared queues, API keys, dashboard
sessions and rate-limit buckets (shared by every server process).

Written once for both dialects, over the dialect's database object: declared queues, API keys, dashboard sessions and rate
limits (migrations 004 and 007).
"""

from __future__ import annotations

from datetime import datetime

from .._records import ApiKey, QueueInfo, QueueSettings
from ..errors import NotFound
from .database import Database
from .rows import api_key, queue_info

__all__ = ["Api"]


class Api:
    """Queues, keys, sessions and rate limits (``backend.api``)."""

    def __init__(self, db: Database):
        self._db = db
        self._by_name = f"WHERE name = {db.param('name')}"
        self._by_id = f"WHERE id = {db.param('id')}"
        self._by_digest = f"WHERE digest = {db.param('digest')}"

    # -- declared queues -----------------------------------------------------------------------

    def queue_put(
        self, settings: QueueSettings, now: datetime | None = None
    ) -> tuple[QueueInfo, bool]:
        """Declare a queue or replace its settings; return it and whether it was created."""
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
        """The declared queue, or ``NotFound``."""
        rows = self._db.read("queue_select", {"name": name}, where=self._by_name)
        if not rows:
            raise NotFound(f"no queue named {name!r}; declare it first (PUT /v1/queues/{name})")
        return queue_info(rows[0], self._db.to_time)

    def queues(self) -> list[QueueInfo]:
        """Every declared queue, by name."""
        rows = self._db.read("queue_select", where="ORDER BY name")
        return [queue_info(r, self._db.to_time) for r in rows]

    # -- API keys ------------------------------------------------------------------------------

    def key_insert(self, key: ApiKey, digest: str, now: datetime | None = None) -> ApiKey:
        """Store a new key by its digest; return it as stored (with ``created_at``)."""
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
        """The key with this digest (revoked or not), or None."""
        rows = self._db.read("apikey_select", {"digest": digest}, where=self._by_digest)
        return api_key(rows[0], self._db.to_time) if rows else None

    def keys(self) -> list[ApiKey]:
        """Every key, oldest first, revoked ones included."""
        rows = self._db.read("apikey_select", where="ORDER BY created_at, id")
        return [api_key(r, self._db.to_time) for r in rows]

    def key_revoke(self, key_id: str, now: datetime | None = None) -> ApiKey:
        """Revoke a key (it stops working at once); ``NotFound`` for an unknown id. Revoking a
        revoked key changes nothing."""
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
        """Store a dashboard session by the digest of its token; return when it expires."""
        params = {"digest": digest, "api_key_id": api_key_id, "ttl": float(ttl_seconds)}
        [(expires,)] = self._db.run("session_insert", params | {"now": self._db.clock(now)})
        return self._db.to_time(expires)  # type: ignore[return-value]

    def session_get(self, digest: str, now: datetime | None = None) -> ApiKey | None:
        """The API key of an unexpired session (revoked or not: the caller checks), or None."""
        rows = self._db.read("session_get", {"digest": digest, "now": self._db.clock(now)})
        return api_key(rows[0], self._db.to_time) if rows else None

    def session_delete(self, digest: str) -> None:
        """End a session."""
        self._db.count("session_delete", {"digest": digest})

    def session_prune(self, now: datetime | None = None) -> int:
        """Delete expired sessions; return how many."""
        return self._db.count("session_prune", {"now": self._db.clock(now)})

    # -- rate limits ---------------------------------------------------------------------------

    def ratelimit_take(
        self, bucket: str, rate: float, burst: float, cost: float = 1.0, now: datetime | None = None
    ) -> float:
        """Take ``cost`` tokens from a bucket refilled at ``rate`` per second up to ``burst``.

        Returns 0.0 when taken, else the seconds until they would be (and takes nothing). The
        bucket lives in the database, so every server process shares it. ``cost <= burst``.
        """
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
