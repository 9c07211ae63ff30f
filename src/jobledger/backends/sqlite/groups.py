"""The groups role on SQLite (migration 008): limits, pauses and the operator's view. The
grouped claim is in ``grouped.py``."""

from __future__ import annotations

from datetime import datetime

from ..._records import GroupLimits, GroupStatus, group_status
from .database import SqliteDatabase, to_db
from .database import to_time as _dt

__all__ = ["SqliteGroups"]

_ts = to_db


class SqliteGroups:
    """``Groups`` for SQLite."""

    def __init__(self, db: SqliteDatabase):
        self._db = db
        self._sql = db.sql

    def limits_put(self, queue: str, limits: GroupLimits, now: datetime | None = None) -> None:
        with self._db.transaction() as c:
            if limits.unlimited:
                c.execute(self._sql["group_limits_delete"], {"queue": queue})
                return
            c.execute(
                self._sql["group_limits_put"],
                {
                    "queue": queue,
                    "max_leased": limits.max_leased,
                    "rate": limits.rate,
                    "burst": limits.burst,
                    "now": _ts(now),
                },
            )

    def limits_get(self, queue: str) -> GroupLimits:
        rows = self._db.read(self._sql["group_limits_get"], {"queue": queue})
        return GroupLimits() if not rows else GroupLimits(rows[0][0], rows[0][1], rows[0][2])

    def all(self, queue: str, now: datetime | None = None) -> list[GroupStatus]:
        clock = _ts(now)
        at = _dt(clock)
        assert at is not None
        limits = self.limits_get(queue)
        rows = self._db.read(self._sql["group_list"], {"queue": queue, "now": clock})
        return [group_status(queue, r, limits, at, _dt) for r in rows]

    def pause(
        self, queue: str, name: str, until: datetime, reason: str, now: datetime | None = None
    ) -> datetime:
        with self._db.transaction() as c:
            row = c.execute(
                self._sql["group_pause"],
                {"queue": queue, "name": name, "until": _ts(until), "reason": reason},
            ).fetchone()
        paused = _dt(row[0])
        assert paused is not None
        return paused

    def resume(self, queue: str, name: str, now: datetime | None = None) -> bool:
        with self._db.transaction() as c:
            cur = c.execute(
                self._sql["group_resume"], {"queue": queue, "name": name, "now": _ts(now)}
            )
            return cur.rowcount > 0
