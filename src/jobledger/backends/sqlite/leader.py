"""The leader role on SQLite: leader leases (migration 003). Every write is one
``BEGIN IMMEDIATE`` transaction, so a fence check and the write it guards cannot be separated by
another process's takeover."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..._records import LeaderLease
from ...errors import LeadershipLost
from .database import SqliteDatabase, to_db, to_time

__all__ = ["SqliteLeader"]

_ts = to_db


def _dt(value: float) -> datetime:
    return to_time(value)  # type: ignore[return-value]


def _lease(row: Sequence[Any], clock: float) -> LeaderLease:
    return LeaderLease(
        name=row[0],
        holder=row[1],
        token=row[2],
        term=row[3],
        until=_dt(row[4]),
        acquired_at=_dt(row[5]),
        renewed_at=_dt(row[6]),
        now=_dt(clock),
    )


class SqliteLeader:
    """``Leader`` for SQLite."""

    def __init__(self, db: SqliteDatabase):
        self._db = db
        self._sql = db.sql

    def acquire(
        self, name: str, holder: str, ttl: float, now: datetime | None = None
    ) -> LeaderLease | None:
        clock = _ts(now)
        with self._db.transaction() as c:
            row = c.execute(
                self._sql["leader_acquire"],
                {"name": name, "holder": holder, "ttl": float(ttl), "now": clock},
            ).fetchone()
        return None if row is None else _lease(row, clock)

    def renew(
        self, lease: LeaderLease, ttl: float, now: datetime | None = None
    ) -> LeaderLease | None:
        clock = _ts(now)
        with self._db.transaction() as c:
            row = c.execute(
                self._sql["leader_renew"],
                {"name": lease.name, "token": lease.token, "ttl": float(ttl), "now": clock},
            ).fetchone()
        return None if row is None else _lease(row, clock)

    def release(self, lease: LeaderLease, now: datetime | None = None) -> bool:
        with self._db.transaction() as c:
            cur = c.execute(
                self._sql["leader_release"],
                {"name": lease.name, "token": lease.token, "now": _ts(now)},
            )
            return cur.rowcount == 1

    def leases(self, now: datetime | None = None) -> list[LeaderLease]:
        clock = _ts(now)
        return [_lease(r, clock) for r in self._db.read(self._sql["leader_list"])]

    def fence(self, lease: LeaderLease, now: datetime | None = None, conn: Any = None) -> None:
        with self._db.transaction(conn) as c:
            self.hold(c, lease, _ts(now))

    def hold(self, c: sqlite3.Connection, lease: LeaderLease, clock: float) -> None:
        """The fence check on an open write transaction of this database (``clock`` in epoch
        seconds): ``LeadershipLost`` unless the lease is still held."""
        held = c.execute(
            self._sql["leader_fence"], {"name": lease.name, "token": lease.token, "now": clock}
        ).fetchone()
        if held is None:
            raise LeadershipLost(lease.name, lease.holder)
