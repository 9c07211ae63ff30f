"""The jobs role: what a worker, a consumer or a publisher does to jobs — insert them, lease them,
renew their leases and record what became of them. The hot path: every call here is one short
transaction, batched where a batch makes sense."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from .._records import (
    ClaimedJob,
    FailResult,
    Failure,
    InsertResult,
    KeyClaim,
    Lease,
    NewJob,
    OnConflict,
    PublishItem,
    PublishOutcome,
    RescueResult,
)

__all__ = ["AsyncJobs", "Jobs"]


class Jobs(Protocol):
    """Inserting, claiming and finishing jobs (``backend.jobs``)."""

    def insert(
        self,
        jobs: Sequence[NewJob],
        now: datetime | None = None,
        conn: Any = None,
        on_conflict: OnConflict = "raise",
    ) -> list[InsertResult]:
        """Insert jobs whose keys are new; return the existing job for keys that are not.

        With ``conn`` the insert joins the caller's open transaction. A key that exists with
        another task or payload raises ``KeyConflict`` and inserts nothing (``"raise"``), or is
        reported with ``conflict=True`` while the others are inserted (``"report"``).
        """
        ...

    def publish(
        self, items: Sequence[PublishItem], now: datetime | None = None
    ) -> list[PublishOutcome]:
        """Insert published jobs whose keys are new, in one transaction; tell replays, conflicts
        and keys whose publish is in flight in another transaction (PostgreSQL) apart."""
        ...

    def claim(
        self,
        queues: Sequence[str],
        worker: str,
        limit: int,
        now: datetime | None = None,
        lease_seconds: float | None = None,
    ) -> list[ClaimedJob]:
        """Lease up to ``limit`` due pending jobs, highest priority first, then oldest run time.
        Each gets a new lease token and an open attempt record.

        Jobs with a group are taken round the groups with due jobs, least recently served
        first, one per group per round, each group within its ``GroupLimits`` (counted and
        spent under the group's lock) and never while it is paused. A claim over queues that
        have both takes about half its batch from jobs without a group, half from groups,
        alternating which half goes first (docs/groups.md)."""
        ...

    def claim_keys(
        self,
        wanted: Sequence[tuple[str, str]],
        worker: str,
        now: datetime | None = None,
        lease_seconds: float | None = None,
    ) -> list[KeyClaim]:
        """Lease the jobs named by ``(queue, key)`` that are pending and due, in one
        transaction, exactly as ``claim`` would (new token, attempt opened); a job another
        transaction is claiming right now is skipped, not waited for. Returns one ``KeyClaim``
        per item, in order: the claimed job, or the job as it is (or None when there is none).
        A pair named twice is claimed once."""
        ...

    def heartbeat(
        self,
        leases: Sequence[Lease],
        now: datetime | None = None,
        lease_seconds: float | None = None,
    ) -> dict[int, datetime]:
        """Extend the leases still held; return their new expiry by job id. A stale lease is
        absent from the result and nothing about its job changes."""
        ...

    def complete(
        self,
        leases: Sequence[Lease],
        now: datetime | None = None,
        conn: Any = None,
        results: Mapping[int, str] | None = None,
    ) -> list[int]:
        """Mark jobs done for the leases still held; return the ids whose lease was stale.
        With ``conn`` the completion joins that open transaction.

        ``results`` holds, by job id, the JSON text of what each handler that returned a value
        returned (``encode_result``); it is stored with the job. Jobs without one keep a NULL
        result. On PostgreSQL the batch tells waiters for results (one NOTIFY, unless ``conn``:
        then ``store_result`` tells, once the handler has returned)."""
        ...

    def store_result(self, lease: Lease, result: str | None) -> bool:
        """Store the result of a job that ``lease`` completed in the handler's own transaction
        (``ctx.transaction()``), once the handler returned (None: it returned nothing, or what
        it returned could not be stored), and tell waiters. Fenced by the lease: False, and
        nothing written, when the job is not done under this lease."""
        ...

    def fail(self, failures: Sequence[Failure], now: datetime | None = None) -> list[FailResult]:
        """Record failed attempts: pending again (retry, budget left) or dead."""
        ...

    def release(self, leases: Sequence[Lease], now: datetime | None = None) -> list[int]:
        """Give back claimed jobs that never started, without charging the attempt. Returns the
        ids whose lease was stale."""
        ...

    def rescue(self, now: datetime | None = None, limit: int = 1000) -> list[RescueResult]:
        """Close attempts whose lease expired: pending again with budget left, dead without."""
        ...


class AsyncJobs(Protocol):
    """The enqueue awaited on the running event loop, on a backend whose driver has an asyncio
    API (``Backend.async_jobs``). It belongs to the loop it is first used on."""

    async def insert(
        self,
        jobs: Sequence[NewJob],
        now: datetime | None = None,
        conn: Any = None,
        on_conflict: OnConflict = "raise",
    ) -> list[InsertResult]:
        """As ``Jobs.insert``; ``conn`` is the caller's async connection (its transaction)."""
        ...

    async def open(self) -> None:
        """Open its connections now rather than on first use (their first connect loads what
        the driver loads lazily); wait until one is ready."""
        ...

    async def close(self) -> None:
        """Close what it opened (its connections)."""
        ...
