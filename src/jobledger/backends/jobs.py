"""The jobs role: what a worker, a consumer or a publisher does to jobs — insert them, lease them,
renew their leases and record what became of them. The hot path: every call here is one short
transaction, batched where a batch makes sense."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from .. import _records as records

__all__ = ["AsyncJobs", "Jobs", "LeaseSeconds", "Now"]

#: The time a call acts at: None for the database's own clock.
Now = datetime | None
#: A lease's length: None for the queue's own.
LeaseSeconds = float | None


class Jobs(abc.ABC):
    """Inserting, claiming and finishing jobs (``backend.jobs``).

    The public methods are written here once: their signatures, what an empty batch answers,
    the order of a claim and which leases were stale. Each dialect writes the statements, in the
    underscored methods it must provide."""

    #: From this many jobs, ``insert`` (without the caller's transaction) reads a batch a piece
    #: at a time while it writes it, so the ledger may build the jobs as they are read (None:
    #: it reads every job before it writes any).
    stream_from: int | None = None

    def insert(
        self,
        jobs: Sequence[records.NewJob],
        now: datetime | None = None,
        conn: Any = None,
        on_conflict: records.OnConflict = "raise",
    ) -> list[records.InsertResult]:
        """Insert jobs whose keys are new; return the existing job for keys that are not.

        With ``conn`` the insert joins the caller's open transaction. A key that exists with
        another task or payload raises ``KeyConflict`` and inserts nothing (``"raise"``), or is
        reported with ``conflict=True`` while the others are inserted (``"report"``).
        """
        return self._insert(jobs, now, conn, on_conflict) if jobs else []

    def publish(
        self, items: Sequence[records.PublishItem], now: datetime | None = None
    ) -> list[records.PublishOutcome]:
        """Insert published jobs whose keys are new, in one transaction; tell replays, conflicts
        and keys whose publish is in flight in another transaction (PostgreSQL) apart."""
        return self._publish(items, now) if items else []

    def claim(
        self,
        queues: Sequence[str],
        worker: str,
        limit: int,
        now: datetime | None = None,
        lease_seconds: float | None = None,
    ) -> list[records.ClaimedJob]:
        """Lease up to ``limit`` due pending jobs, highest priority first, then oldest run time.
        Each gets a new lease token and begins an attempt (shown by the history from now on;
        its record is complete when the attempt ends).

        Jobs with a group are taken round the groups with due jobs, least recently served
        first, one per group per round, each group within its ``GroupLimits`` (counted and
        spent under the group's lock) and never while it is paused. A claim over queues that
        have both takes about half its batch from jobs without a group, half from groups,
        alternating which half goes first (docs/groups.md)."""
        claimed = self._claim(queues, worker, max(1, int(limit)), now, lease_seconds)
        claimed.sort(key=lambda j: (-j.priority, j.run_at, j.id))
        return claimed

    def claim_keys(
        self,
        wanted: Sequence[tuple[str, str]],
        worker: str,
        now: datetime | None = None,
        lease_seconds: float | None = None,
    ) -> list[records.KeyClaim]:
        """Lease the jobs named by ``(queue, key)`` that are pending and due, in one
        transaction, exactly as ``claim`` would (new token, attempt opened); a job another
        transaction is claiming right now is skipped, not waited for. Returns one ``KeyClaim``
        per item, in order: the claimed job, or the job as it is (or None when there is none).
        A pair named twice is claimed once."""
        return self._claim_keys(wanted, worker, now, lease_seconds) if wanted else []

    def heartbeat(
        self,
        leases: Sequence[records.Lease],
        now: datetime | None = None,
        lease_seconds: float | None = None,
    ) -> dict[int, datetime]:
        """Extend the leases still held; return their new expiry by job id. A stale lease is
        absent from the result and nothing about its job changes."""
        return self._heartbeat(leases, now, lease_seconds) if leases else {}

    def complete(
        self,
        leases: Sequence[records.Lease],
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
        if not leases:
            return []
        return _stale(leases, self._complete(leases, now, conn, results or None))

    @abc.abstractmethod
    def store_result(self, lease: records.Lease, result: str | None) -> bool:
        """Store the result of a job that ``lease`` completed in the handler's own transaction
        (``ctx.transaction()``), once the handler returned (None: it returned nothing, or what
        it returned could not be stored), and tell waiters. Fenced by the lease: False, and
        nothing written, when the job is not done under this lease."""

    def fail(
        self, failures: Sequence[records.Failure], now: datetime | None = None
    ) -> list[records.FailResult]:
        """Record failed attempts: pending again (retry, budget left) or dead."""
        return self._fail(failures, now) if failures else []

    def release(self, leases: Sequence[records.Lease], now: datetime | None = None) -> list[int]:
        """Give back claimed jobs that never started, without charging the attempt. Returns the
        ids whose lease was stale."""
        return _stale(leases, self._release(leases, now)) if leases else []

    def settled(self, leases: Sequence[records.Lease]) -> dict[int, str]:
        """What the attempts of ``leases`` came to, for those closed under their own tokens: job
        id to ``done``, ``retry``, ``dead``, ``released`` or ``lease_expired`` (a timed-out
        attempt as ``retry`` or ``dead``, as its job went). An attempt still open is absent.

        A write that the fence refused may have been the lease's own: an earlier try committed
        it and lost the answer (the server went away at the commit, or failed over), and the
        write, tried again, finds its job no longer leased. The recorder asks here before it
        calls such a write refused."""
        return self._settled(leases) if leases else {}

    def rewind(self) -> bool:
        """Make the next claim look at every due job from the start of each queue's order.
        A dialect whose claims start where the last one got to (PostgreSQL's claim from a
        position) forgets the position. True when the last claim did not look from the start
        (so the next one looks where it did not); a burst worker calls it before it decides
        that nothing is due."""
        return False  # SQLite's claim always scans from the start: nothing to forget

    def rescue(self, now: datetime | None = None, limit: int = 1000) -> list[records.RescueResult]:
        """Close attempts whose lease expired: pending again with budget left, dead without."""
        return self._rescue(now, max(1, int(limit)))

    # -- what each dialect writes (never called with an empty batch) -----------------------------

    @abc.abstractmethod
    def _insert(
        self,
        jobs: Sequence[records.NewJob],
        now: datetime | None,
        conn: Any,
        on_conflict: records.OnConflict,
    ) -> list[records.InsertResult]: ...

    @abc.abstractmethod
    def _publish(
        self, items: Sequence[records.PublishItem], now: datetime | None
    ) -> list[records.PublishOutcome]: ...

    @abc.abstractmethod
    def _claim(
        self, queues: Sequence[str], worker: str, limit: int, now: Now, lease_seconds: LeaseSeconds
    ) -> list[records.ClaimedJob]:
        """The claimed jobs in any order (``claim`` sorts them); ``limit`` is at least 1."""

    @abc.abstractmethod
    def _claim_keys(
        self, wanted: Sequence[tuple[str, str]], worker: str, now: Now, lease_seconds: LeaseSeconds
    ) -> list[records.KeyClaim]: ...

    @abc.abstractmethod
    def _heartbeat(
        self, leases: Sequence[records.Lease], now: Now, lease_seconds: LeaseSeconds
    ) -> dict[int, datetime]: ...

    @abc.abstractmethod
    def _complete(
        self,
        leases: Sequence[records.Lease],
        now: Now,
        conn: Any,
        results: Mapping[int, str] | None,
    ) -> set[int]:
        """The ids of the jobs it completed (the others' leases were stale)."""

    @abc.abstractmethod
    def _fail(self, failures: Sequence[records.Failure], now: Now) -> list[records.FailResult]: ...

    @abc.abstractmethod
    def _release(self, leases: Sequence[records.Lease], now: Now) -> set[int]:
        """The ids of the jobs it released."""

    @abc.abstractmethod
    def _rescue(self, now: Now, limit: int) -> list[records.RescueResult]: ...

    @abc.abstractmethod
    def _settled(self, leases: Sequence[records.Lease]) -> dict[int, str]: ...


def _stale(leases: Sequence[records.Lease], done: set[int]) -> list[int]:
    """The ids of ``leases`` whose job is not in ``done``."""
    return [lease.job_id for lease in leases if lease.job_id not in done]


class AsyncJobs(abc.ABC):
    """The enqueue awaited on the running event loop, on a backend whose driver has an asyncio
    API (``Backend.async_jobs``). It belongs to the loop it is first used on."""

    async def insert(
        self,
        jobs: Sequence[records.NewJob],
        now: datetime | None = None,
        conn: Any = None,
        on_conflict: records.OnConflict = "raise",
    ) -> list[records.InsertResult]:
        """As ``Jobs.insert``; ``conn`` is the caller's async connection (its transaction)."""
        return await self._insert(jobs, now, conn, on_conflict) if jobs else []

    @abc.abstractmethod
    async def open(self) -> None:
        """Open its connections now rather than on first use (their first connect loads what
        the driver loads lazily); wait until one is ready."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Close what it opened (its connections)."""

    @abc.abstractmethod
    async def _insert(
        self, jobs: Sequence[records.NewJob], now: Now, conn: Any, on_conflict: records.OnConflict
    ) -> list[records.InsertResult]: ...
