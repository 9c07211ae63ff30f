"""The Backend protocol: the only way the rest of jobledger reaches a database.

Methods are noun-first (``job_claim``, ``effect_record``) and take plain values. Every method
that depends on time takes ``now``; ``None`` means the database's own clock (PostgreSQL) or the
process clock (SQLite). Tests pass an explicit ``now`` instead of sleeping.

Backends translate driver errors into jobledger's own (``BackendUnavailable``, ``KeyConflict``,
…); callers never see psycopg or sqlite3 exceptions.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from ..scheduling.records import LeaderLease, ScheduleDefinition, ScheduleRow, TickRow, TickState
from ..types import Attempt, ClaimedJob, Enqueued, Event, JobRow, JobState, Tombstone
from .url import DatabaseURL

if TYPE_CHECKING:
    from ..apikeys import ApiKey
    from ..queues import QueueInfo, QueueSettings

__all__ = [
    "Backend",
    "Failure",
    "FailResult",
    "JobFilter",
    "Lease",
    "Listener",
    "NewJob",
    "PruneResult",
    "PublishItem",
    "PublishOutcome",
    "QueueStats",
    "RescueResult",
]

OnConflict = Literal["raise", "report"]


@dataclass(frozen=True, slots=True)
class NewJob:
    """A job ready to insert: validated, its payload already encoded as canonical JSON."""

    queue: str
    key: str
    task: str
    payload_json: str
    priority: int
    run_at: datetime | None
    """None: due now (by the clock the insert uses)."""
    max_attempts: int
    lease_seconds: float
    correlation_id: str | None = None


@dataclass(frozen=True, slots=True)
class InsertResult:
    """What inserting one ``NewJob`` did."""

    id: int
    created: bool
    conflict: bool = False
    """True when the key exists with another task or payload (only with ``on_conflict="report"``)."""
    pruned: bool = False
    """True when the key belongs to a finished job that was pruned and whose tombstone still
    blocks the key: nothing was created, and ``id`` names the pruned job (it no longer loads)."""

    def enqueued(self) -> Enqueued:
        return Enqueued(self.id, self.created)


@dataclass(frozen=True, slots=True)
class Lease:
    """A worker's hold on one job: the job, its lease token, and the attempt it opened."""

    job_id: int
    token: str
    attempt: int


@dataclass(frozen=True, slots=True)
class Failure:
    """A failed attempt to record: back to pending at ``run_at`` if ``retry`` and budget is left,
    otherwise dead."""

    lease: Lease
    retry: bool
    run_at: datetime | None
    error_class: str
    message: str
    traceback: str | None = None


@dataclass(frozen=True, slots=True)
class FailResult:
    job_id: int
    state: JobState | None
    """The job's new state, or None when the lease was stale and nothing changed."""


@dataclass(frozen=True, slots=True)
class RescueResult:
    job_id: int
    queue: str
    key: str
    state: JobState
    attempt: int


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which jobs an operator means. Every field narrows the selection; None means any."""

    queue: str | None = None
    states: tuple[JobState, ...] | None = None
    task: str | None = None
    key_prefix: str | None = None
    error_contains: str | None = None
    since: datetime | None = None
    """Last changed at or after this time."""
    until: datetime | None = None
    """Last changed before this time."""
    ids: tuple[int, ...] | None = None
    limit: int | None = None
    after_id: int | None = None
    """Only jobs with a larger id (paging through a listing ordered by id)."""


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counts for one queue at one moment."""

    queue: str
    counts: dict[str, int] = field(default_factory=dict)
    oldest_due_pending_seconds: float | None = None
    """Age of the oldest pending job whose run time has passed; None when there is none."""
    late_pending: int = 0
    """Pending jobs due longer ago than the objective given to ``queue_stats``."""
    lease_expiries_last_hour: int = 0
    attempts: dict[str, int] = field(default_factory=dict)
    """Attempts made so far by the jobs in each state (``attempts["done"] / counts["done"]`` is
    the attempts per completed job)."""


@dataclass(frozen=True, slots=True)
class PruneResult:
    """What one prune removed."""

    jobs: int = 0
    attempts: int = 0
    events: int = 0
    effects: int = 0
    tombstones: int = 0
    """Tombstones written: keys that keep blocking duplicates after their job is gone."""
    expired_tombstones: int = 0
    """Tombstones past their horizon that were deleted (their keys are free again)."""
    by_state: dict[str, int] = field(default_factory=dict)
    """Jobs removed (or, for a dry run, that would be) per state."""

    def __add__(self, other: PruneResult) -> PruneResult:
        states = dict(self.by_state)
        for state, n in other.by_state.items():
            states[state] = states.get(state, 0) + n
        return PruneResult(
            self.jobs + other.jobs,
            self.attempts + other.attempts,
            self.events + other.events,
            self.effects + other.effects,
            self.tombstones + other.tombstones,
            self.expired_tombstones + other.expired_tombstones,
            states,
        )


@dataclass(frozen=True, slots=True)
class PublishItem:
    """One message published over HTTP: the job to insert, and a fingerprint of the request that
    tells a replay (same fingerprint) from a reuse of its key with another request."""

    job: NewJob
    fingerprint: str
    api_key_id: str | None = None


PublishStatus = Literal["created", "replayed", "conflict", "in_flight"]


@dataclass(frozen=True, slots=True)
class PublishOutcome:
    """What publishing one ``PublishItem`` did.

    ``created``: a new job. ``replayed``: the key names a job made by the same request.
    ``conflict``: the key names a job made by another request; nothing changed. ``in_flight``:
    another request with the key is being published right now; nothing changed (``job_id`` None).
    """

    status: PublishStatus
    job_id: int | None = None
    state: JobState | None = None
    run_at: datetime | None = None


class Listener(Protocol):
    """A wake-up channel: ``wait`` returns True when work may have arrived."""

    def wait(self, timeout: float) -> bool: ...

    def close(self) -> None: ...


@runtime_checkable
class Backend(Protocol):
    """What a database must do for jobledger. SQLite and PostgreSQL implement it."""

    url: DatabaseURL
    dialect: str

    # -- lifecycle ---------------------------------------------------------------------------

    def migrate(self) -> list[str]:
        """Apply the migrations this database lacks, in order; return their names."""
        ...

    def schema_version(self) -> int:
        """The highest migration applied, 0 for an empty database."""
        ...

    def applied_migrations(self) -> set[int]:
        """The versions of the migrations applied to this database."""
        ...

    def check_schema(self) -> None:
        """Raise ``SchemaMismatch`` unless the schema is exactly the one this code knows."""
        ...

    def close(self) -> None: ...

    def transaction(self) -> AbstractContextManager[Any]:
        """An open transaction on a connection of this backend's own; commits on success."""
        ...

    @property
    def supports_listen(self) -> bool:
        """True when the database can push wake-ups (PostgreSQL LISTEN/NOTIFY)."""
        ...

    def listener(self, queues: Sequence[str]) -> Listener | None: ...

    # -- jobs: the worker's path --------------------------------------------------------------

    def job_insert(
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

    def job_claim(
        self,
        queues: Sequence[str],
        worker: str,
        limit: int,
        now: datetime | None = None,
        lease_seconds: float | None = None,
    ) -> list[ClaimedJob]:
        """Lease up to ``limit`` due pending jobs in one statement, highest priority first, then
        oldest run time. Each gets a new lease token and an open attempt record."""
        ...

    def job_heartbeat(
        self,
        leases: Sequence[Lease],
        now: datetime | None = None,
        lease_seconds: float | None = None,
    ) -> dict[int, datetime]:
        """Extend the leases still held; return their new expiry by job id. A stale lease is
        absent from the result and nothing about its job changes."""
        ...

    def job_complete(
        self, leases: Sequence[Lease], now: datetime | None = None, conn: Any = None
    ) -> list[int]:
        """Mark jobs done for the leases still held; return the ids whose lease was stale.
        With ``conn`` the completion joins that open transaction."""
        ...

    def job_fail(
        self, failures: Sequence[Failure], now: datetime | None = None
    ) -> list[FailResult]:
        """Record failed attempts: pending again (retry, budget left) or dead."""
        ...

    def job_release(self, leases: Sequence[Lease], now: datetime | None = None) -> list[int]:
        """Give back claimed jobs that never started, without charging the attempt. Returns the
        ids whose lease was stale."""
        ...

    def job_rescue(self, now: datetime | None = None, limit: int = 1000) -> list[RescueResult]:
        """Close attempts whose lease expired: pending again with budget left, dead without."""
        ...

    # -- jobs: reading ------------------------------------------------------------------------

    def job_get(self, job_id: int) -> JobRow:
        """The job with this id, or ``NotFound``."""
        ...

    def job_get_by_key(self, queue: str, key: str) -> JobRow:
        """The job with this key in this queue, or ``NotFound``."""
        ...

    def job_find_key(self, key: str) -> list[JobRow]:
        """Jobs with this key in any queue."""
        ...

    def job_list(self, where: JobFilter, order: str = "id") -> list[JobRow]: ...

    def attempt_list(self, job_id: int) -> list[Attempt]: ...

    def event_list(self, job_id: int) -> list[Event]: ...

    def queue_stats(
        self, now: datetime | None = None, late_after_seconds: float = 300.0
    ) -> list[QueueStats]: ...

    # -- jobs: operators ----------------------------------------------------------------------

    def job_redrive(
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

    def job_resolve(
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

    def job_cancel(
        self, job_id: int, actor: str, reason: str, now: datetime | None = None
    ) -> JobRow:
        """A pending job becomes cancelled. Raises ``InvalidTransition`` otherwise."""
        ...

    def event_record(
        self,
        job_id: int,
        kind: str,
        actor: str | None,
        note: str | None,
        detail: dict[str, Any] | None = None,
        now: datetime | None = None,
    ) -> None: ...

    # -- effects ------------------------------------------------------------------------------

    def effect_record(
        self,
        queue: str,
        key: str,
        effect: str,
        lease: Lease,
        detail: dict[str, Any] | None = None,
        now: datetime | None = None,
        conn: Any = None,
    ) -> bool:
        """Record that ``effect`` happened for this key, fenced by the lease. Returns True when
        recorded now, False when it was already recorded. Raises ``LeaseLost`` when stale."""
        ...

    def effect_get(self, queue: str, key: str, effect: str) -> dict[str, Any] | None:
        """The recorded effect (with its ``detail``), or None."""
        ...

    def effect_list(self, queue: str, key: str) -> list[dict[str, Any]]: ...

    # -- scheduling: leader leases (jobledger.scheduling) --------------------------------------

    def leader_acquire(
        self, name: str, holder: str, ttl: float, now: datetime | None = None
    ) -> LeaderLease | None:
        """Take the lease ``name`` if nobody holds it or its lease expired: a new token, the
        term plus one. None while another holder's lease is valid."""
        ...

    def leader_renew(
        self, lease: LeaderLease, ttl: float, now: datetime | None = None
    ) -> LeaderLease | None:
        """Extend a lease still held under its token; None when it expired or was taken."""
        ...

    def leader_release(self, lease: LeaderLease, now: datetime | None = None) -> bool:
        """End a lease held under its token now, so another holder can take it at once."""
        ...

    def leader_list(self, now: datetime | None = None) -> list[LeaderLease]:
        """Every leader lease, valid or expired, with the clock the read used as ``now``."""
        ...

    def leader_fence(
        self, lease: LeaderLease, now: datetime | None = None, conn: Any = None
    ) -> None:
        """Raise ``LeadershipLost`` unless ``lease`` is still held. With ``conn`` (a transaction
        of this backend), hold the lease row until that transaction ends, so that no takeover
        commits before the writes fenced by it."""
        ...

    # -- scheduling: schedules and ticks -------------------------------------------------------

    def schedule_declare(
        self,
        definitions: Sequence[ScheduleDefinition],
        lease: LeaderLease,
        now: datetime | None = None,
    ) -> None:
        """Record the schedules a leader declares. A new one starts at ``now`` (its first tick
        is the first after); an existing one keeps its cursor and pause state."""
        ...

    def schedule_list(self) -> list[ScheduleRow]: ...

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
        """Pause or resume a schedule (``NotFound`` if unknown). ``cursor`` moves it forward,
        counting ``skipped`` ticks, when a resume skips what it missed."""
        ...

    def schedule_advance(
        self,
        name: str,
        cursor: datetime,
        skipped: int,
        lease: LeaderLease,
        now: datetime | None = None,
    ) -> None:
        """Move a schedule's cursor forward to ``cursor`` (never back), counting ``skipped``."""
        ...

    def schedule_tick_start(
        self, name: str, tick_time: datetime, lease: LeaderLease, now: datetime | None = None
    ) -> TickRow:
        """Record that a tick starts (or, if it was left running, starts again); return its row,
        which is ``done`` when the tick was already finished."""
        ...

    def schedule_tick_progress(
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

    def schedule_tick_finish(
        self, name: str, tick_time: datetime, lease: LeaderLease, now: datetime | None = None
    ) -> TickRow:
        """Mark a tick done and move its schedule's cursor to it, in one transaction."""
        ...

    def schedule_tick_error(
        self, name: str, tick_time: datetime, error: str, now: datetime | None = None
    ) -> None:
        """Note why a running tick could not finish (it is tried again)."""
        ...

    def schedule_tick_list(
        self,
        name: str | None = None,
        limit: int = 20,
        state: TickState | None = None,
        after: datetime | None = None,
    ) -> list[TickRow]:
        """Ticks, most recent first: of one schedule or all, in one state, after a time."""

    # -- pruning -------------------------------------------------------------------------------

    def job_prune(
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

    def tombstone_prune(self, now: datetime | None = None, limit: int = 1000) -> int:
        """Delete up to ``limit`` tombstones whose horizon has passed; return how many."""
        ...

    def tombstone_find(self, key: str, queue: str | None = None) -> list[Tombstone]:
        """The tombstones of pruned jobs with this key (in ``queue``, or in any queue)."""
        ...

    def schema_drop(self) -> None:
        """Drop every jobledger table of this database — and, on PostgreSQL, its schema unless
        that is ``public``. For throw-away databases (the demo); never called by operators'
        commands."""
        ...

    def job_purge(self, job_ids: Sequence[int]) -> int:
        """Delete these jobs whatever their state, with their attempts, events and effects, and
        leave no tombstone. For a drill cleaning up after itself; operators use prune."""
        ...

    # -- the HTTP API: declared queues, API keys, rate limits, publishing ----------------------

    def queue_put(
        self, settings: QueueSettings, now: datetime | None = None
    ) -> tuple[QueueInfo, bool]:
        """Declare a queue or replace its settings; return it and whether it was created."""
        ...

    def queue_get(self, name: str) -> QueueInfo:
        """The declared queue, or ``NotFound``."""
        ...

    def queue_list(self) -> list[QueueInfo]:
        """Every declared queue, by name."""
        ...

    def apikey_insert(self, key: ApiKey, digest: str, now: datetime | None = None) -> ApiKey:
        """Store a new key by its digest; return it as stored (with ``created_at``)."""
        ...

    def apikey_get(self, digest: str) -> ApiKey | None:
        """The key with this digest (revoked or not), or None."""
        ...

    def apikey_list(self) -> list[ApiKey]:
        """Every key, oldest first, revoked ones included."""
        ...

    def apikey_revoke(self, key_id: str, now: datetime | None = None) -> ApiKey:
        """Revoke a key (it stops working at once); ``NotFound`` for an unknown id. Revoking a
        revoked key changes nothing."""
        ...

    def ratelimit_take(
        self, bucket: str, rate: float, burst: float, cost: float = 1.0, now: datetime | None = None
    ) -> float:
        """Take ``cost`` tokens from a bucket refilled at ``rate`` per second up to ``burst``.

        Returns 0.0 when taken, else the seconds until they would be (and takes nothing). The
        bucket lives in the database, so every server process shares it. ``cost <= burst``.
        """
        ...

    def job_publish(
        self, items: Sequence[PublishItem], now: datetime | None = None
    ) -> list[PublishOutcome]:
        """Insert published jobs whose keys are new, in one transaction; tell replays, conflicts
        and keys whose publish is in flight in another transaction (PostgreSQL) apart."""
        ...


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
