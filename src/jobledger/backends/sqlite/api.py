"""The api role on SQLite: declared queues, API keys, dashboard sessions and rate limits
(migrations 004 and 007). Every write is one ``BEGIN IMMEDIATE`` transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..._records import ApiKey, QueueInfo, QueueSettings
from ...errors import NotFound
from .database import SqliteDatabase, to_db
from .database import to_time as _dt

__all__ = ["SqliteApi"]

_ts = to_db


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


class SqliteApi:
    """``Api`` for SQLite."""

    def __init__(self, db: SqliteDatabase):
        self._db = db
        self._sql = db.sql

    # -- declared queues ---------------------------------------------------------------------------

    def queue_put(
        self, settings: QueueSettings, now: datetime | None = None
    ) -> tuple[QueueInfo, bool]:
        s = settings
        with self._db.transaction() as c:
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
        rows = self._db.read(self._sql["queue_select"] + " WHERE name = ?", (name,))
        if not rows:
            raise NotFound(f"no queue named {name!r}; declare it first (PUT /v1/queues/{name})")
        return _queue(rows[0])

    def queues(self) -> list[QueueInfo]:
        return [_queue(r) for r in self._db.read(self._sql["queue_select"] + " ORDER BY name")]

    # -- API keys ----------------------------------------------------------------------------------

    def key_insert(self, key: ApiKey, digest: str, now: datetime | None = None) -> ApiKey:
        with self._db.transaction() as c:
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

    def key_get(self, digest: str) -> ApiKey | None:
        rows = self._db.read(self._sql["apikey_select"] + " WHERE digest = ?", (digest,))
        return _apikey(rows[0]) if rows else None

    def keys(self) -> list[ApiKey]:
        return [
            _apikey(r)
            for r in self._db.read(self._sql["apikey_select"] + " ORDER BY created_at, id")
        ]

    def key_revoke(self, key_id: str, now: datetime | None = None) -> ApiKey:
        with self._db.transaction() as c:
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
        with self._db.transaction() as c:
            if c.execute(self._sql["ratelimit_take"], params).fetchone() is not None:
                return 0.0
            (tat,) = c.execute(self._sql["ratelimit_get"], {"bucket": bucket}).fetchone()
        return max(1e-3, float(max(tat, clock)) + cost * interval - clock - burst * interval)

    # -- dashboard sessions --------------------------------------------------------------------

    def session_insert(
        self, digest: str, api_key_id: str, ttl_seconds: float, now: datetime | None = None
    ) -> datetime:
        clock = _ts(now)
        with self._db.transaction() as c:
            c.execute(
                self._sql["session_insert"],
                {"digest": digest, "api_key_id": api_key_id, "now": clock, "ttl": ttl_seconds},
            )
        return _dt(clock + ttl_seconds)  # type: ignore[return-value]

    def session_get(self, digest: str, now: datetime | None = None) -> ApiKey | None:
        rows = self._db.read(self._sql["session_get"], {"digest": digest, "now": _ts(now)})
        if not rows:
            return None
        return _apikey(rows[0])

    def session_delete(self, digest: str) -> None:
        with self._db.transaction() as c:
            c.execute(self._sql["session_delete"], {"digest": digest})

    def session_prune(self, now: datetime | None = None) -> int:
        with self._db.transaction() as c:
            return c.execute(self._sql["session_prune"], {"now": _ts(now)}).rowcount
