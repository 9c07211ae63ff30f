"""The leader role on PostgreSQL: leader leases (migration 003).

A fenced write runs ``hold`` (``SELECT … FOR SHARE`` on the lease row) first in its
transaction: a takeover's update of that row waits until the fenced transaction has committed,
so nothing is written under a lease after it moved.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from ..._records import LeaderLease
from ...errors import LeadershipLost
from .database import PostgresDatabase, to_time

__all__ = ["PostgresLeader"]


def _utc(value: datetime) -> datetime:
    return to_time(value)  # type: ignore[return-value]


def _lease(row: Sequence[Any]) -> LeaderLease:
    return LeaderLease(
        name=row[0],
        holder=row[1],
        token=str(row[2]),
        term=row[3],
        until=_utc(row[4]),
        acquired_at=_utc(row[5]),
        renewed_at=_utc(row[6]),
        now=_utc(row[7]),
    )


class PostgresLeader:
    """``Leader`` for PostgreSQL."""

    def __init__(self, db: PostgresDatabase):
        self._db = db

    def acquire(
        self, name: str, holder: str, ttl: float, now: datetime | None = None
    ) -> LeaderLease | None:
        rows = self._db.run(
            "leader_acquire", {"name": name, "holder": holder, "ttl": float(ttl), "now": now}
        )
        return _lease(rows[0]) if rows else None

    def renew(
        self, lease: LeaderLease, ttl: float, now: datetime | None = None
    ) -> LeaderLease | None:
        rows = self._db.run(
            "leader_renew",
            {"name": lease.name, "token": lease.token, "ttl": float(ttl), "now": now},
        )
        return _lease(rows[0]) if rows else None

    def release(self, lease: LeaderLease, now: datetime | None = None) -> bool:
        rows = self._db.run(
            "leader_release", {"name": lease.name, "token": lease.token, "now": now}
        )
        return bool(rows)

    def leases(self, now: datetime | None = None) -> list[LeaderLease]:
        return [_lease(r) for r in self._db.run("leader_list", {"now": now})]

    def fence(self, lease: LeaderLease, now: datetime | None = None, conn: Any = None) -> None:
        with self._db.transaction(conn) as c:
            self.hold(c, lease, now)

    def hold(self, c: psycopg.Connection[Any], lease: LeaderLease, now: datetime | None) -> None:
        """The fence check on an open transaction of this database: ``LeadershipLost`` unless
        the lease is still held, whose row it then holds (``FOR SHARE``) until that ends."""
        held = c.execute(
            self._db.sql["leader_fence"],
            {"name": lease.name, "token": lease.token, "now": now},
        ).fetchone()
        if held is None:
            raise LeadershipLost(lease.name, lease.holder)
