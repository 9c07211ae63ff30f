"""The schedules role: the schedules a leader declares, their cursors, and the ticks that
enqueue their jobs (jobledger.scheduling). Every write a scheduler makes is fenced by its
leader lease."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from .._records import LeaderLease, ScheduleDefinition, ScheduleRow, TickRow, TickState

__all__ = ["Schedules"]


class Schedules(Protocol):
    """Schedules and ticks (``backend.schedules``)."""

    def declare(
        self,
        definitions: Sequence[ScheduleDefinition],
        lease: LeaderLease,
        now: datetime | None = None,
    ) -> None:
        """Record the schedules a leader declares. A new one starts at ``now`` (its first tick
        is the first after); an existing one keeps its cursor and pause state."""
        ...

    def all(self) -> list[ScheduleRow]:
        """Every schedule, by name."""
        ...

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
        """Pause or resume a schedule (``NotFound`` if unknown). ``cursor`` moves it forward,
        counting ``skipped`` ticks, when a resume skips what it missed."""
        ...

    def advance(
        self,
        name: str,
        cursor: datetime,
        skipped: int,
        lease: LeaderLease,
        now: datetime | None = None,
    ) -> None:
        """Move a schedule's cursor forward to ``cursor`` (never back), counting ``skipped``."""
        ...

    def tick_start(
        self, name: str, tick_time: datetime, lease: LeaderLease, now: datetime | None = None
    ) -> TickRow:
        """Record that a tick starts (or, if it was left running, starts again); return its row,
        which is ``done`` when the tick was already finished."""
        ...

    def tick_progress(
        self,
        name: str,
        tick_time: datetime,
        created: int,
        existing: int,
        conflicts: int,
        conn: Any,
    ) -> None:
        """Add a batch's counts to a tick, inside the transaction that enqueued the batch."""
        ...

    def tick_finish(
        self, name: str, tick_time: datetime, lease: LeaderLease, now: datetime | None = None
    ) -> TickRow:
        """Mark a tick done and move its schedule's cursor to it, in one transaction."""
        ...

    def tick_error(
        self, name: str, tick_time: datetime, error: str, now: datetime | None = None
    ) -> None:
        """Note why a running tick could not finish (it is tried again)."""
        ...

    def ticks(
        self,
        name: str | None = None,
        limit: int = 20,
        state: TickState | None = None,
        after: datetime | None = None,
    ) -> list[TickRow]:
        """Ticks, most recent first: of one schedule or all, in one state, after a time."""
        ...

    def tick_prune(self, before: datetime, limit: int = 1000) -> int:
        """Delete up to ``limit`` finished ticks with a tick time before ``before`` and behind
        their schedule's cursor; return how many."""
        ...
