"""The SQLite side of scheduling: leader leases, schedules and ticks (migration 003).

Mixed into ``SqliteBackend``. Every write is one ``BEGIN IMMEDIATE`` transaction, so a fence
check and the write it guards cannot be separated by another process's takeover.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .._records import (
    CatchUp,
    LeaderLease,
    ScheduleDefinition,
    ScheduleRow,
    TickRow,
    TickState,
)
from ..errors import LeadershipLost, NotFound

__all__ = ["SqliteScheduling"]


def _ts(value: datetime | None) -> float:
    """Epoch seconds; None is the process clock now (as in sqlite.py)."""
    if value is None:
        return time.time()
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: pass an aware datetime (UTC)")
    return value.timestamp()


def _dt(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


def _dt_or_none(value: float | None) -> datetime | None:
    return None if value is None else _dt(value)


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


class SqliteScheduling:
    """Scheduling methods of the Backend protocol, for SQLite."""

    if TYPE_CHECKING:
        _sql: dict[str, str]
        _write: Callable[..., AbstractContextManager[sqlite3.Connection]]
        _read: Callable[..., list[Any]]

    # -- leader leases ---------------------------------------------------------------------------

    def leader_acquire(
        self, name: str, holder: str, ttl: float, now: datetime | None = None
    ) -> LeaderLease | None:
        clock = _ts(now)
        with self._write() as c:
            row = c.execute(
                self._sql["leader_acquire"],
                {"name": name, "holder": holder, "ttl": float(ttl), "now": clock},
            ).fetchone()
        return None if row is None else _lease(row, clock)

    def leader_renew(
        self, lease: LeaderLease, ttl: float, now: datetime | None = None
    ) -> LeaderLease | None:
        clock = _ts(now)
        with self._write() as c:
            row = c.execute(
                self._sql["leader_renew"],
                {"name": lease.name, "token": lease.token, "ttl": float(ttl), "now": clock},
            ).fetchone()
        return None if row is None else _lease(row, clock)

    def leader_release(self, lease: LeaderLease, now: datetime | None = None) -> bool:
        with self._write() as c:
            cur = c.execute(
                self._sql["leader_release"],
                {"name": lease.name, "token": lease.token, "now": _ts(now)},
            )
            return cur.rowcount == 1

    def leader_list(self, now: datetime | None = None) -> list[LeaderLease]:
        clock = _ts(now)
        return [_lease(r, clock) for r in self._read(self._sql["leader_list"])]

    def leader_fence(
        self, lease: LeaderLease, now: datetime | None = None, conn: Any = None
    ) -> None:
        with self._write(conn) as c:
            self._fence(c, lease, _ts(now))

    def _fence(self, c: sqlite3.Connection, lease: LeaderLease, clock: float) -> None:
        held = c.execute(
            self._sql["leader_fence"], {"name": lease.name, "token": lease.token, "now": clock}
        ).fetchone()
        if held is None:
            raise LeadershipLost(lease.name, lease.holder)

    # -- schedules -------------------------------------------------------------------------------

    def schedule_declare(
        self,
        definitions: Sequence[ScheduleDefinition],
        lease: LeaderLease,
        now: datetime | None = None,
    ) -> None:
        clock = _ts(now)
        with self._write() as c:
            self._fence(c, lease, clock)
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

    def schedule_list(self) -> list[ScheduleRow]:
        return [_schedule(r) for r in self._read(self._sql["schedule_list"])]

    def schedule_pause(
        self,
        name: str,
        paused: bool,
        actor: str,
        note: str | None,
        now: datetime | None = None,
        cursor: datetime | None = None,
        skipped: int = 0,
    ) -> ScheduleRow:
        with self._write() as c:
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
        return next(r for r in self.schedule_list() if r.name == name)

    def schedule_advance(
        self,
        name: str,
        cursor: datetime,
        skipped: int,
        lease: LeaderLease,
        now: datetime | None = None,
    ) -> None:
        with self._write() as c:
            self._fence(c, lease, _ts(now))
            c.execute(
                self._sql["schedule_advance"],
                {"name": name, "cursor": _ts(cursor), "skipped": int(skipped)},
            )

    # -- ticks -----------------------------------------------------------------------------------

    def schedule_tick_start(
        self, name: str, tick_time: datetime, lease: LeaderLease, now: datetime | None = None
    ) -> TickRow:
        clock = _ts(now)
        params = {"schedule": name, "tick_time": _ts(tick_time)}
        with self._write() as c:
            self._fence(c, lease, clock)
            row = c.execute(
                self._sql["schedule_tick_start"],
                params | {"leader": lease.holder, "term": lease.term, "now": clock},
            ).fetchone()
            if row is None:
                row = c.execute(self._sql["schedule_tick_get"], params).fetchone()
        return _tick(row)

    def schedule_tick_progress(
        self,
        name: str,
        tick_time: datetime,
        created: int,
        existing: int,
        conflicts: int,
        conn: Any,
    ) -> None:
        with self._write(conn) as c:
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

    def schedule_tick_finish(
        self, name: str, tick_time: datetime, lease: LeaderLease, now: datetime | None = None
    ) -> TickRow:
        clock = _ts(now)
        params = {"schedule": name, "tick_time": _ts(tick_time)}
        with self._write() as c:
            self._fence(c, lease, clock)
            row = c.execute(self._sql["schedule_tick_finish"], params | {"now": clock}).fetchone()
            if row is None:
                row = c.execute(self._sql["schedule_tick_get"], params).fetchone()
            c.execute(
                self._sql["schedule_advance"],
                {"name": name, "cursor": params["tick_time"], "skipped": 0},
            )
        return _tick(row)

    def schedule_tick_error(
        self, name: str, tick_time: datetime, error: str, now: datetime | None = None
    ) -> None:
        with self._write() as c:
            c.execute(
                self._sql["schedule_tick_error"],
                {"schedule": name, "tick_time": _ts(tick_time), "error": error[:4000]},
            )

    def schedule_tick_prune(self, before: datetime, limit: int = 1000) -> int:
        text = self._sql["schedule_tick_prune"].replace("{limit}", str(max(1, int(limit))))
        with self._write() as c:
            return int(c.execute(text, {"before": _ts(before)}).rowcount)

    def schedule_tick_list(
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
        return [_tick(r) for r in self._read(text, params)]
