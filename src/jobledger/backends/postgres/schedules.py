"""The schedules role on PostgreSQL: schedules and their ticks (migration 003). Every write a
scheduler makes is fenced by its leader lease (``PostgresLeader.hold``) in the same
transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..._records import (
    CatchUp,
    LeaderLease,
    ScheduleDefinition,
    ScheduleRow,
    TickRow,
    TickState,
)
from ...errors import NotFound
from .database import PostgresDatabase, to_time
from .leader import PostgresLeader

__all__ = ["PostgresSchedules"]


def _utc(value: datetime) -> datetime:
    return to_time(value)  # type: ignore[return-value]


_utc_or_none = to_time


def _schedule(row: Sequence[Any]) -> ScheduleRow:
    return ScheduleRow(
        name=row[0],
        cohort=row[1],
        cron=row[2],
        time_zone=row[3],
        catch_up=CatchUp(row[4]),
        max_catch_up=row[5],
        grace_seconds=float(row[6]),
        target=row[7],
        key_template=row[8],
        fan_out=bool(row[9]),
        cursor=_utc(row[10]),
        skipped_ticks=row[11],
        paused=bool(row[12]),
        pause_changed_at=_utc_or_none(row[13]),
        pause_changed_by=row[14],
        pause_note=row[15],
        declared_at=_utc(row[16]),
        created_at=_utc(row[17]),
    )


def _tick(row: Sequence[Any]) -> TickRow:
    return TickRow(
        schedule=row[0],
        tick_time=_utc(row[1]),
        state=TickState(row[2]),
        leader=row[3],
        term=row[4],
        runs=row[5],
        jobs_created=row[6],
        jobs_existing=row[7],
        conflicts=row[8],
        started_at=_utc(row[9]),
        finished_at=_utc_or_none(row[10]),
        error=row[11],
    )


class PostgresSchedules:
    """``Schedules`` for PostgreSQL."""

    def __init__(self, db: PostgresDatabase, leader: PostgresLeader):
        self._db = db
        self._leader = leader

    def declare(
        self,
        definitions: Sequence[ScheduleDefinition],
        lease: LeaderLease,
        now: datetime | None = None,
    ) -> None:
        params = {
            "name": [d.name for d in definitions],
            "cohort": [d.cohort for d in definitions],
            "cron": [d.cron for d in definitions],
            "time_zone": [d.time_zone for d in definitions],
            "catch_up": [CatchUp(d.catch_up).value for d in definitions],
            "max_catch_up": [d.max_catch_up for d in definitions],
            "grace_seconds": [float(d.grace_seconds) for d in definitions],
            "target": [d.target for d in definitions],
            "key_template": [d.key_template for d in definitions],
            "fan_out": [bool(d.fan_out) for d in definitions],
            "now": now,
        }
        with self._db.transaction() as c:
            self._leader.hold(c, lease, now)
            c.execute(self._db.sql["schedule_declare"], params)

    def all(self) -> list[ScheduleRow]:
        return [_schedule(r) for r in self._db.run("schedule_list", {})]

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
        rows = self._db.run(
            "schedule_pause",
            {
                "name": name,
                "paused": bool(paused),
                "actor": actor,
                "note": note,
                "now": now,
                "cursor": cursor,
                "skipped": int(skipped),
            },
        )
        if not rows:
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
        with self._db.transaction() as c:
            self._leader.hold(c, lease, now)
            c.execute(
                self._db.sql["schedule_advance"],
                {"name": name, "cursor": cursor, "skipped": int(skipped)},
            )

    # -- ticks -----------------------------------------------------------------------------------

    def tick_start(
        self, name: str, tick_time: datetime, lease: LeaderLease, now: datetime | None = None
    ) -> TickRow:
        params = {"schedule": name, "tick_time": tick_time}
        with self._db.transaction() as c:
            self._leader.hold(c, lease, now)
            row = c.execute(
                self._db.sql["schedule_tick_start"],
                params | {"leader": lease.holder, "term": lease.term, "now": now},
            ).fetchone()
            if row is None:
                row = c.execute(self._db.sql["schedule_tick_get"], params).fetchone()
        assert row is not None, "a tick just written or found is there"
        return _tick(row)

    def tick_progress(
        self,
        name: str,
        tick_time: datetime,
        created: int,
        existing: int,
        conflicts: int,
        conn: Any,
    ) -> None:
        self._db.run(
            "schedule_tick_progress",
            {
                "schedule": name,
                "tick_time": tick_time,
                "created": created,
                "existing": existing,
                "conflicts": conflicts,
            },
            conn=conn,
        )

    def tick_finish(
        self, name: str, tick_time: datetime, lease: LeaderLease, now: datetime | None = None
    ) -> TickRow:
        params = {"schedule": name, "tick_time": tick_time}
        with self._db.transaction() as c:
            self._leader.hold(c, lease, now)
            row = c.execute(
                self._db.sql["schedule_tick_finish"],
                params | {"now": now},
            ).fetchone()
            if row is None:
                row = c.execute(self._db.sql["schedule_tick_get"], params).fetchone()
            c.execute(
                self._db.sql["schedule_advance"],
                {"name": name, "cursor": tick_time, "skipped": 0},
            )
        assert row is not None, "a tick just written or found is there"
        return _tick(row)

    def tick_error(
        self, name: str, tick_time: datetime, error: str, now: datetime | None = None
    ) -> None:
        self._db.run(
            "schedule_tick_error",
            {"schedule": name, "tick_time": tick_time, "error": error[:4000]},
        )

    def tick_prune(self, before: datetime, limit: int = 1000) -> int:
        return len(self._db.run("schedule_tick_prune", {"before": before}, limit=limit))

    def ticks(
        self,
        name: str | None = None,
        limit: int = 20,
        state: TickState | None = None,
        after: datetime | None = None,
    ) -> list[TickRow]:
        clauses: list[str] = []
        params: dict[str, Any] = {}
        if name is not None:
            clauses.append("schedule = %(schedule)s")
            params["schedule"] = name
        if state is not None:
            clauses.append("state = %(state)s")
            params["state"] = TickState(state).value
        if after is not None:
            clauses.append("tick_time > %(after)s")
            params["after"] = after
        text = self._db.sql["schedule_tick_list"].replace(
            "{where}", " AND ".join(clauses) or "1 = 1"
        )
        with self._db.transaction() as c:
            rows = c.execute(
                text.replace("{limit}", str(max(1, int(limit)))),
                params,
            ).fetchall()
        return [_tick(r) for r in rows]
