"""The schedules role, for both dialects: schedules and their ticks (migration 003). Every
write a scheduler makes is fenced by its leader lease (``SqlLeader.hold``) in the same
transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..._records import CatchUp, LeaderLease, ScheduleDefinition, ScheduleRow, TickRow, TickState
from ...errors import NotFound
from ..rows import schedule, tick
from .database import Database
from .leader import SqlLeader

__all__ = ["SqlSchedules"]


class SqlSchedules:
    """``Schedules`` over a dialect's database object."""

    def __init__(self, db: Database, leader: SqlLeader):
        self._db = db
        self._leader = leader

    def declare(
        self,
        definitions: Sequence[ScheduleDefinition],
        lease: LeaderLease,
        now: datetime | None = None,
    ) -> None:
        clock = self._db.clock(now)
        rows = [
            {
                "name": d.name,
                "cohort": d.cohort,
                "cron": d.cron,
                "time_zone": d.time_zone,
                "catch_up": CatchUp(d.catch_up).value,
                "max_catch_up": d.max_catch_up,
                "grace_seconds": float(d.grace_seconds),
                "target": d.target,
                "key_template": d.key_template,
                "fan_out": bool(d.fan_out),
            }
            for d in definitions
        ]
        with self._db.transaction() as c:
            self._leader.hold(c, lease, clock)
            if rows:
                self._db.executemany(c, "schedule_declare", rows, now=clock)

    def all(self) -> list[ScheduleRow]:
        return [schedule(r, self._db.to_time) for r in self._db.read("schedule_list")]

    def pause(
        self,
        name: str,
        paused: bool,
        actor: str,
        note: str | None,
        now: datetime | None = None,
        cursor: datetime | None = None,
        skipped: int = 0,
    ) -> ScheduleRow:
        params = {
            "name": name,
            "paused": bool(paused),
            "actor": actor,
            "note": note,
            "now": self._db.clock(now),
            "cursor": self._db.to_db(cursor),
            "skipped": int(skipped),
        }
        if self._db.count("schedule_pause", params) != 1:
            raise NotFound(f"no schedule named {name!r} in the ledger")
        return next(r for r in self.all() if r.name == name)

    def advance(
        self,
        name: str,
        cursor: datetime,
        skipped: int,
        lease: LeaderLease,
        now: datetime | None = None,
    ) -> None:
        params = {"name": name, "cursor": self._db.to_db(cursor), "skipped": int(skipped)}
        with self._db.transaction() as c:
            self._leader.hold(c, lease, self._db.clock(now))
            self._db.execute(c, "schedule_advance", params)

    # -- ticks -----------------------------------------------------------------------------------

    def _tick(self, c: Any, name: str, params: dict[str, Any]) -> TickRow:
        """The tick a statement returned, or (none: it was not changed) the tick as it is."""
        row = self._db.execute(c, name, params).fetchone()
        if row is None:
            row = self._db.execute(c, "schedule_tick_get", params).fetchone()
        assert row is not None, "a tick just written or found is there"
        return tick(row, self._db.to_time)

    def tick_start(
        self, name: str, tick_time: datetime, lease: LeaderLease, now: datetime | None = None
    ) -> TickRow:
        clock = self._db.clock(now)
        params = {"schedule": name, "tick_time": self._db.to_db(tick_time)}
        with self._db.transaction() as c:
            self._leader.hold(c, lease, clock)
            started = params | {"leader": lease.holder, "term": lease.term, "now": clock}
            return self._tick(c, "schedule_tick_start", started)

    def tick_progress(
        self,
        name: str,
        tick_time: datetime,
        created: int,
        existing: int,
        conflicts: int,
        conn: Any,
    ) -> None:
        params = {
            "schedule": name,
            "tick_time": self._db.to_db(tick_time),
            "created": created,
            "existing": existing,
            "conflicts": conflicts,
        }
        self._db.count("schedule_tick_progress", params, conn=conn)

    def tick_finish(
        self, name: str, tick_time: datetime, lease: LeaderLease, now: datetime | None = None
    ) -> TickRow:
        clock = self._db.clock(now)
        at = self._db.to_db(tick_time)
        with self._db.transaction() as c:
            self._leader.hold(c, lease, clock)
            row = self._tick(
                c, "schedule_tick_finish", {"schedule": name, "tick_time": at, "now": clock}
            )
            self._db.execute(c, "schedule_advance", {"name": name, "cursor": at, "skipped": 0})
        return row

    def tick_error(
        self, name: str, tick_time: datetime, error: str, now: datetime | None = None
    ) -> None:
        params = {"schedule": name, "tick_time": self._db.to_db(tick_time), "error": error[:4000]}
        self._db.count("schedule_tick_error", params)

    def ticks(
        self,
        name: str | None = None,
        limit: int = 20,
        state: TickState | None = None,
        after: datetime | None = None,
    ) -> list[TickRow]:
        param = self._db.param
        clauses: list[str] = []
        params: dict[str, Any] = {}
        if name is not None:
            clauses.append(f"schedule = {param('schedule')}")
            params["schedule"] = name
        if state is not None:
            clauses.append(f"state = {param('state')}")
            params["state"] = TickState(state).value
        if after is not None:
            clauses.append(f"tick_time > {param('after')}")
            params["after"] = self._db.to_db(after)
        where = " AND ".join(clauses) or "1 = 1"
        rows = self._db.read("schedule_tick_list", params, where=where, limit=max(1, int(limit)))
        return [tick(r, self._db.to_time) for r in rows]

    def tick_prune(self, before: datetime, limit: int = 1000) -> int:
        params = {"before": self._db.to_db(before)}
        return self._db.count("schedule_tick_prune", params, limit=max(1, int(limit)))
