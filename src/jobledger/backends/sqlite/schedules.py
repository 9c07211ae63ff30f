"""The schedules role on SQLite: schedules and their ticks (migration 003).

Every write is one ``BEGIN IMMEDIATE`` transaction, so a fence check and the write it guards
cannot be separated by another process's takeover.
"""

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
from .database import SqliteDatabase, to_db, to_time
from .leader import SqliteLeader

__all__ = ["SqliteSchedules"]


def _dt(value: float) -> datetime:
    return to_time(value)  # type: ignore[return-value]


_dt_or_none = to_time
_ts = to_db


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
        cursor=_dt(row[10]),
        skipped_ticks=row[11],
        paused=bool(row[12]),
        pause_changed_at=_dt_or_none(row[13]),
        pause_changed_by=row[14],
        pause_note=row[15],
        declared_at=_dt(row[16]),
        created_at=_dt(row[17]),
    )


def _tick(row: Sequence[Any]) -> TickRow:
    return TickRow(
        schedule=row[0],
        tick_time=_dt(row[1]),
        state=TickState(row[2]),
        leader=row[3],
        term=row[4],
        runs=row[5],
        jobs_created=row[6],
        jobs_existing=row[7],
        conflicts=row[8],
        started_at=_dt(row[9]),
        finished_at=_dt_or_none(row[10]),
        error=row[11],
    )


class SqliteSchedules:
    """``Schedules`` for SQLite."""

    def __init__(self, db: SqliteDatabase, leader: SqliteLeader):
        self._db = db
        self._sql = db.sql
        self._leader = leader

    def declare(
        self,
        definitions: Sequence[ScheduleDefinition],
        lease: LeaderLease,
        now: datetime | None = None,
    ) -> None:
        clock = _ts(now)
        with self._db.transaction() as c:
            self._leader.hold(c, lease, clock)
            c.executemany(
                self._sql["schedule_declare"],
                [
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
                        "fan_out": int(d.fan_out),
                        "now": clock,
                    }
                    for d in definitions
                ],
            )

    def all(self) -> list[ScheduleRow]:
        return [_schedule(r) for r in self._db.read(self._sql["schedule_list"])]

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
        with self._db.transaction() as c:
            cur = c.execute(
                self._sql["schedule_pause"],
                {
                    "name": name,
                    "paused": int(paused),
                    "actor": actor,
                    "note": note,
                    "now": _ts(now),
                    "cursor": None if cursor is None else _ts(cursor),
                    "skipped": int(skipped),
                },
            )
            if cur.rowcount != 1:
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
            self._leader.hold(c, lease, _ts(now))
            c.execute(
                self._sql["schedule_advance"],
                {"name": name, "cursor": _ts(cursor), "skipped": int(skipped)},
            )

    # -- ticks -----------------------------------------------------------------------------------

    def tick_start(
        self, name: str, tick_time: datetime, lease: LeaderLease, now: datetime | None = None
    ) -> TickRow:
        clock = _ts(now)
        params = {"schedule": name, "tick_time": _ts(tick_time)}
        with self._db.transaction() as c:
            self._leader.hold(c, lease, clock)
            row = c.execute(
                self._sql["schedule_tick_start"],
                params | {"leader": lease.holder, "term": lease.term, "now": clock},
            ).fetchone()
            if row is None:
                row = c.execute(self._sql["schedule_tick_get"], params).fetchone()
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
        with self._db.transaction(conn) as c:
            c.execute(
                self._sql["schedule_tick_progress"],
                {
                    "schedule": name,
                    "tick_time": _ts(tick_time),
                    "created": created,
                    "existing": existing,
                    "conflicts": conflicts,
                },
            )

    def tick_finish(
        self, name: str, tick_time: datetime, lease: LeaderLease, now: datetime | None = None
    ) -> TickRow:
        clock = _ts(now)
        params = {"schedule": name, "tick_time": _ts(tick_time)}
        with self._db.transaction() as c:
            self._leader.hold(c, lease, clock)
            row = c.execute(self._sql["schedule_tick_finish"], params | {"now": clock}).fetchone()
            if row is None:
                row = c.execute(self._sql["schedule_tick_get"], params).fetchone()
            c.execute(
                self._sql["schedule_advance"],
                {"name": name, "cursor": params["tick_time"], "skipped": 0},
            )
        return _tick(row)

    def tick_error(
        self, name: str, tick_time: datetime, error: str, now: datetime | None = None
    ) -> None:
        with self._db.transaction() as c:
            c.execute(
                self._sql["schedule_tick_error"],
                {"schedule": name, "tick_time": _ts(tick_time), "error": error[:4000]},
            )

    def tick_prune(self, before: datetime, limit: int = 1000) -> int:
        text = self._sql["schedule_tick_prune"].replace("{limit}", str(max(1, int(limit))))
        with self._db.transaction() as c:
            return int(c.execute(text, {"before": _ts(before)}).rowcount)

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
            clauses.append("schedule = :schedule")
            params["schedule"] = name
        if state is not None:
            clauses.append("state = :state")
            params["state"] = TickState(state).value
        if after is not None:
            clauses.append("tick_time > :after")
            params["after"] = _ts(after)
        text = (
            self._sql["schedule_tick_list"]
            .replace("{where}", " AND ".join(clauses) or "1 = 1")
            .replace("{limit}", str(max(1, int(limit))))
        )
        return [_tick(r) for r in self._db.read(text, params)]
