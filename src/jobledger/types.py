"""The nouns of the ledger: states, job rows, attempts, events.

This is a leaf module: it imports nothing from the rest of jobledger, so every other layer can
depend on it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

__all__ = [
    "Attempt",
    "AttemptOutcome",
    "ClaimedJob",
    "Enqueued",
    "Event",
    "JobRow",
    "JobSpec",
    "JobState",
    "Tombstone",
]


class JobState(enum.StrEnum):
    """Where a job stands. Every transition is listed in docs/concepts.md."""

    PENDING = "pending"
    """Waiting to run once ``run_at`` has passed. Enqueue, a transient failure with budget left,
    the rescuer (expired lease, budget left), a redrive and ``resolve --pending`` put jobs here."""

    LEASED = "leased"
    """Claimed by one worker until ``lease_until``, under a lease token that fences its writes.
    Only a claim puts a job here."""

    DONE = "done"
    """Finished. A completion by the lease holder, or an operator's ``resolve --done``."""

    DEAD = "dead"
    """Parked for an operator: a permanent failure, a spent retry budget, or a lease that expired
    with the budget spent. Only a redrive or a resolve moves it on."""

    CANCELLED = "cancelled"
    """Withdrawn by an operator while it was pending; it never runs."""

    @property
    def is_final(self) -> bool:
        """True for states that no worker moves a job out of."""
        return self in (JobState.DONE, JobState.DEAD, JobState.CANCELLED)


class AttemptOutcome(enum.StrEnum):
    """How one attempt ended, written once when the attempt is closed."""

    DONE = "done"
    """The handler returned and the completion was accepted."""
    RETRY = "retry"
    """The handler failed transiently and the job went back to pending."""
    DEAD = "dead"
    """The handler failed permanently, or failed with the budget spent."""
    LEASE_EXPIRED = "lease_expired"
    """The holder neither finished nor renewed in time; the rescuer closed the attempt."""
    RELEASED = "released"
    """The worker gave the job back unstarted (graceful shutdown); the attempt is not charged."""


class Enqueued(NamedTuple):
    """What ``enqueue`` returns: the job's id and whether this call created it."""

    id: int
    created: bool


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job to enqueue in a batch (``Ledger.enqueue_many``)."""

    payload: dict[str, Any]
    key: str | None = None
    delay: float | None = None
    run_at: datetime | None = None
    priority: int = 0
    correlation_id: str | None = None
    group: str | None = None


@dataclass(frozen=True, slots=True)
class JobRow:
    """A job as stored in the ledger."""

    id: int
    queue: str
    key: str
    task: str
    payload: dict[str, Any]
    state: JobState
    priority: int
    run_at: datetime
    attempts: int
    max_attempts: int
    attempt_limit: int
    lease_seconds: float
    lease_until: datetime | None
    lease_token: str | None
    leased_by: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    last_error: str | None
    last_error_class: str | None
    last_traceback: str | None
    correlation_id: str | None
    group: str | None = None
    """The job's group (tenant, customer, downstream host), or None."""

    @property
    def budget_left(self) -> int:
        """Attempts this job may still make before a failure sends it to dead."""
        return max(0, self.attempt_limit - self.attempts)


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A job just claimed by a worker: what the worker needs to run it, and its lease."""

    id: int
    queue: str
    key: str
    task: str
    payload: dict[str, Any]
    attempt: int
    lease_token: str
    lease_until: datetime
    lease_seconds: float
    run_at: datetime
    priority: int
    correlation_id: str | None
    budget_left: int = field(default=0)
    group: str | None = None


@dataclass(frozen=True, slots=True)
class Attempt:
    """One claim of a job, from its start to its outcome. Attempt rows are append-only."""

    job_id: int
    attempt: int
    lease_token: str
    worker: str
    started_at: datetime
    finished_at: datetime | None
    outcome: AttemptOutcome | None
    error_class: str | None
    error_message: str | None
    traceback: str | None


@dataclass(frozen=True, slots=True)
class Event:
    """Something that happened to a job outside a worker's normal attempt: an operator's redrive,
    resolve or cancel, or a late write refused because its lease token was stale."""

    job_id: int
    at: datetime
    kind: str
    actor: str | None
    note: str | None
    detail: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class Tombstone:
    """What is left of a pruned job: its key keeps blocking duplicates until ``expires_at``."""

    queue: str
    key: str
    job_id: int
    task: str
    state: JobState
    finished_at: datetime | None
    pruned_at: datetime
    expires_at: datetime
