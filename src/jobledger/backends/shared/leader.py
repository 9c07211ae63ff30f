"""The leader role, for both dialects: leader leases (migration 003).

A fenced write runs ``hold`` first in its transaction. On SQLite that transaction holds the
database's write lock, so no takeover can come in between; on PostgreSQL ``leader_fence`` is a
``SELECT … FOR SHARE`` of the lease row, so a takeover's update of that row waits until the
fenced transaction has committed. Either way nothing is written under a lease after it moved.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..._records import LeaderLease
from ...errors import LeadershipLost
from ..rows import leader_lease
from .database import Database

__all__ = ["SqlLeader"]


class SqlLeader:
    """``Leader`` over a dialect's database object."""

    def __init__(self, db: Database):
        self._db = db

    def acquire(
        self, name: str, holder: str, ttl: float, now: datetime | None = None
    ) -> LeaderLease | None:
        params = {"name": name, "holder": holder, "ttl": float(ttl), "now": self._db.clock(now)}
        rows = self._db.run("leader_acquire", params)
        return leader_lease(rows[0], self._db.to_time) if rows else None

    def renew(
        self, lease: LeaderLease, ttl: float, now: datetime | None = None
    ) -> LeaderLease | None:
        params = {"name": lease.name, "token": lease.token, "ttl": float(ttl)}
        rows = self._db.run("leader_renew", params | {"now": self._db.clock(now)})
        return leader_lease(rows[0], self._db.to_time) if rows else None

    def release(self, lease: LeaderLease, now: datetime | None = None) -> bool:
        params = {"name": lease.name, "token": lease.token, "now": self._db.clock(now)}
        return self._db.count("leader_release", params) == 1

    def leases(self, now: datetime | None = None) -> list[LeaderLease]:
        rows = self._db.read("leader_list", {"now": self._db.clock(now)})
        return [leader_lease(r, self._db.to_time) for r in rows]

    def fence(self, lease: LeaderLease, now: datetime | None = None, conn: Any = None) -> None:
        with self._db.transaction(conn) as c:
            self.hold(c, lease, self._db.clock(now))

    def hold(self, c: Any, lease: LeaderLease, clock: Any) -> None:
        """The fence check on an open transaction ``c`` of this database, at ``clock`` (as
        ``Database.clock`` gives it): ``LeadershipLost`` unless the lease is still held."""
        params = {"name": lease.name, "token": lease.token, "now": clock}
        if self._db.execute(c, "leader_fence", params).fetchone() is None:
            raise LeadershipLost(lease.name, lease.holder)
