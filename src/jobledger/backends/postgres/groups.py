"""The groups role on PostgreSQL (migration 008): limits, pauses and the operator's view. The
grouped claim is in ``grouped.py``."""

from __future__ import annotations

from datetime import datetime

from ..._records import GroupLimits, GroupStatus, group_status
from .database import PostgresDatabase
from .database import to_time as _utc

__all__ = ["PostgresGroups"]


class PostgresGroups:
    """``Groups`` for PostgreSQL."""

    def __init__(self, db: PostgresDatabase):
        self._db = db

    def limits_put(self, queue: str, limits: GroupLimits, now: datetime | None = None) -> None:
        if limits.unlimited:
            self._db.run("group_limits_delete", {"queue": queue})
            return
        self._db.run(
            "group_limits_put",
            {
                "queue": queue,
                "max_leased": limits.max_leased,
                "rate": limits.rate,
                "burst": limits.burst,
                "now": now,
            },
        )

    def limits_get(self, queue: str) -> GroupLimits:
        rows = self._db.run("group_limits_get", {"queue": queue})
        return GroupLimits() if not rows else GroupLimits(rows[0][0], rows[0][1], rows[0][2])

    def all(self, queue: str, now: datetime | None = None) -> list[GroupStatus]:
        limits = self.limits_get(queue)
        rows = self._db.run("group_list", {"queue": queue, "now": now})
        return [group_status(queue, r, limits, r[9], _utc) for r in rows]

    def pause(
        self, queue: str, name: str, until: datetime, reason: str, now: datetime | None = None
    ) -> datetime:
        rows = self._db.run(
            "group_pause", {"queue": queue, "name": name, "until": until, "reason": reason}
        )
        paused = _utc(rows[0][0])
        assert paused is not None
        return paused

    def resume(self, queue: str, name: str, now: datetime | None = None) -> bool:
        return bool(self._db.run("group_resume", {"queue": queue, "name": name, "now": now}))
