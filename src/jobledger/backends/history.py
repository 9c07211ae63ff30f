"""The history role: reading jobs and what happened to them, and what operators do to them —
redrive, resolve, cancel, prune, purge."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from .._records import (
    Attempt,
    Event,
    JobFilter,
    JobRow,
    JobState,
    PruneResult,
    Tombstone,
)

__all__ = ["History"]


class History(Protocol):
    """Jobs as they are and were, and the operators' repairs (``backend.history``)."""

    def get(self, job_id: int) -> JobRow:
        """The job with this id, or ``NotFound``."""
        ...

    def get_by_key(self, queue: str, key: str) -> JobRow:
        """The job with this key in this queue, or ``NotFound``."""
        ...

    def find_key(self, key: str) -> list[JobRow]:
        """Jobs with this key in any queue."""
        ...

    def find(self, where: JobFilter, order: str = "id") -> list[JobRow]:
        """Jobs that match a filter, in one of the orders ``id``, ``-id``, ``updated``,
        ``run_at``."""
        ...

    def attempts(self, job_id: int) -> list[Attempt]:
        """A job's attempts, oldest first."""
        ...

    def events(self, job_id: int) -> list[Event]:
        """What operators (and the ledger) did to a job, oldest first."""
        ...

    def record_event(
        self,
        job_id: int,
        kind: str,
        actor: str | None,
        note: str | None,
        detail: dict[str, Any] | None = None,
        now: datetime | None = None,
    ) -> None:
        """Note an event in a job's history."""
        ...

    def redrive(
        self,
        job_ids: Sequence[int],
        actor: str,
        reason: str,
        now: datetime | None = None,
        budget: int | None = None,
    ) -> list[int]:
        """Move dead or cancelled jobs back to pending with a fresh budget (``budget`` attempts,
        default the job's ``max_attempts``). Returns the ids moved; others are left alone."""
        ...

    def resolve(
        self,
        job_id: int,
        state: JobState,
        actor: str,
        note: str,
        now: datetime | None = None,
    ) -> JobRow:
        """An operator's repair: a dead or pending job becomes done (or pending, with a fresh
        budget). Raises ``InvalidTransition`` for other states."""
        ...

    def cancel(self, job_id: int, actor: str, reason: str, now: datetime | None = None) -> JobRow:
        """A pending job becomes cancelled. Raises ``InvalidTransition`` otherwise."""
        ...

    def prune(
        self,
        before: datetime,
        states: Sequence[JobState],
        keep_keys_seconds: float | None,
        queue: str | None = None,
        limit: int = 1000,
        after_id: int = 0,
        now: datetime | None = None,
        dry_run: bool = False,
    ) -> tuple[PruneResult, int | None]:
        """One batch of a prune, in one transaction: look at the next ``limit`` jobs by id after
        ``after_id`` and delete those in ``states`` that finished before ``before``, with their
        attempts, events and effects. With ``keep_keys_seconds`` each pruned key gets a
        tombstone that blocks enqueue until that long after its job finished. ``dry_run``
        counts instead of deleting.

        Returns what was removed and the id to continue after, or None when the walk is over:
        the window was empty, or held only jobs created at or after ``before`` (a job cannot
        finish before it was created). Walking the primary key needs no index on the jobs table;
        a walk reads the jobs created before the cut-off that are kept (dead, long-delayed)."""
        ...

    def prune_tombstones(self, now: datetime | None = None, limit: int = 1000) -> int:
        """Delete up to ``limit`` tombstones whose horizon has passed; return how many."""
        ...

    def tombstones(self, key: str, queue: str | None = None) -> list[Tombstone]:
        """The tombstones of pruned jobs with this key (in ``queue``, or in any queue)."""
        ...

    def purge(self, job_ids: Sequence[int]) -> int:
        """Delete these jobs whatever their state, with their attempts, events and effects, and
        leave no tombstone. For a drill cleaning up after itself; operators use prune."""
        ...
