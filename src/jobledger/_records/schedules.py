"""What the backends store for scheduling: leader leases, schedules and their ticks.

A leaf module (standard library only), so that the backends can return these rows without
depending on the scheduler.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

__all__ = [
    "CatchUp",
    "LeaderLease",
    "ScheduleDefinition",
    "ScheduleRow",
    "TickRow",
    "TickState",
]


class CatchUp(enum.StrEnum):
    """What a schedule does with ticks it missed (the scheduler was down, or the schedule was
    paused) — ticks more than ``grace`` seconds in the past when the scheduler gets to them."""

    SKIP = "skip"
    """Run none of them: carry on from now."""
    LATEST = "latest"
    """Run the most recent missed tick once (unless a tick on time runs anyway)."""
    ALL = "all"
    """Run each missed tick, oldest first, at most ``max_catch_up`` of them (the most recent)."""


class TickState(enum.StrEnum):
    """Where a tick stands."""

    RUNNING = "running"
    """Started: its jobs are being enqueued. A tick left running by a scheduler that died is
    finished by the next leader (keys make the repeat safe)."""
    DONE = "done"
    """Every job of the tick is enqueued."""


@dataclass(frozen=True, slots=True)
class LeaderLease:
    """A leader lease: who holds the named authority, under which token, until when.

    ``term`` counts the holders the lease has had; ``now`` is the clock the statement that read
    or wrote the row used (the database's, unless an explicit time was given).
    """

    name: str
    holder: str
    token: str
    term: int
    until: datetime
    acquired_at: datetime
    renewed_at: datetime
    now: datetime

    @property
    def valid(self) -> bool:
        """True while the lease had not expired at ``now``."""
        return self.until > self.now


@dataclass(frozen=True, slots=True)
class ScheduleDefinition:
    """A schedule as declared in code, in the form the ledger stores it."""

    name: str
    cohort: str
    cron: str
    time_zone: str
    catch_up: CatchUp
    max_catch_up: int
    grace_seconds: float
    target: str
    """What a tick enqueues, for people: ``task send_digest → queue digests``."""
    key_template: str
    fan_out: bool


@dataclass(frozen=True, slots=True)
class ScheduleRow(ScheduleDefinition):
    """A schedule as the ledger knows it: its definition and where it stands."""

    cursor: datetime
    """Ticks up to this time are handled (run or skipped); the next tick is the first after."""
    skipped_ticks: int
    """Ticks skipped by the catch-up policy, in total."""
    paused: bool
    pause_changed_at: datetime | None
    pause_changed_by: str | None
    pause_note: str | None
    declared_at: datetime
    """The last time a leader declared this schedule (on taking the lease)."""
    created_at: datetime


@dataclass(frozen=True, slots=True)
class TickRow:
    """One tick of one schedule: unique on ``(schedule, tick_time)``."""

    schedule: str
    tick_time: datetime
    state: TickState
    leader: str
    """The scheduler that last worked on the tick."""
    term: int
    """The leader lease's term when it did."""
    runs: int
    """How many times a scheduler started the tick: more than 1 when one died half-way."""
    jobs_created: int
    jobs_existing: int
    """Keys that already had a job (a repeat of a half-finished tick, or another schedule)."""
    conflicts: int
    """Keys that exist with a different payload: reported, never overwritten."""
    started_at: datetime
    finished_at: datetime | None
    error: str | None
