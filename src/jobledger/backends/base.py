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
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from .._records import (
    ApiKey,
    Attempt,
    ClaimedJob,
    Event,
    FailResult,
    Failure,
    GroupLimits,
    GroupStatus,
    InsertResult,
    JobFilter,
    JobRow,
    JobState,
    KeyClaim,
    LeaderLease,
    Lease,
    MinuteStats,
    NewJob,
    OnConflict,
    OutboxQueueStats,
    OutboxRecord,
    PruneResult,
    PublishItem,
    PublishOutcome,
    QueueDepth,
    QueueInfo,
    QueueSettings,
    QueueStats,
    RescueResult,
    Route,
    ScheduleDefinition,
    ScheduleRow,
    Subscription,
    SubscriptionState,
    TickRow,
    TickState,
    Tombstone,
)
from .url import DatabaseURL

__all__ = ["Backend", "Listener", "chunks"]


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

    def migrate(self, conn: Any = None) -> list[str]:
        """Apply the migrations this database lacks, in order; return their names. Reads what
        is applied without taking a write lock, so a migrated database is never locked for it.
        ``conn``: the application's connection of the enqueue that is the ledger's first use
        (see docs/backends.md, "The schema on first use")."""
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
        """Lease up to ``limit`` due pending jobs, highest priority first, then oldest run time.
        Each gets a new lease token and an open attempt record.

        Jobs with a group are taken round the groups with due jobs, least recently served
        first, one per group per round, each group within its ``GroupLimits`` (counted and
        spent under the group's lock) and never while it is paused. A claim over queues that
        have both takes about half its batch from jobs without a group, half from groups,
        alternating which half goes first (docs/groups.md)."""
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

    def schedule_tick_prune(self, before: datetime, limit: int = 1000) -> int:
        """Delete up to ``limit`` finished ticks with a tick time before ``before`` and behind
        their schedule's cursor; return how many."""
        ...

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

    # -- broker delivery: routes, the outbox, claims by key (jobledger.brokers) ---------------

    def route_add(
        self, queue: str, actor: str, note: str | None = None, now: datetime | None = None
    ) -> tuple[Route, int]:
        """Route a queue to a broker: from now on every job of it that becomes pending gets an
        outbox record (database triggers write them). Jobs already pending get one now. Returns
        the route and how many records that backfill wrote (0 when it was routed already)."""
        ...

    def route_remove(self, queue: str) -> int:
        """Stop routing a queue (``NotFound`` if it is not routed); its unpublished records are
        discarded. Returns how many. Polling workers then see its jobs as before."""
        ...

    def route_list(self) -> list[Route]: ...

    def outbox_due(
        self, limit: int, now: datetime | None = None, queues: Sequence[str] | None = None
    ) -> list[OutboxRecord]:
        """Unpublished records whose time has come, in ``(available_at, id)`` order."""
        ...

    def outbox_mark(
        self, ids: Sequence[int], lease: LeaderLease, now: datetime | None = None
    ) -> int:
        """Mark records published, fenced by the relay's leader lease (``LeadershipLost`` and
        nothing marked when it is no longer held). Returns how many were marked."""
        ...

    def outbox_list(
        self,
        job_id: int | None = None,
        queue: str | None = None,
        unpublished: bool = False,
        limit: int = 100,
    ) -> list[OutboxRecord]:
        """Records, newest first: of one job, of one queue, only the unpublished ones."""
        ...

    def outbox_stats(self, now: datetime | None = None) -> list[OutboxQueueStats]: ...

    def outbox_prune(self, published_before: datetime, limit: int = 10000) -> int:
        """Delete up to ``limit`` records published before a time; return how many."""
        ...

    def outbox_republish(
        self,
        queue: str,
        due_before: datetime,
        now: datetime | None = None,
        limit: int = 10000,
    ) -> int:
        """Write a new record for each pending job of a routed queue, due before ``due_before``,
        that has no unpublished record (its message was lost by the broker). Returns how many."""
        ...

    def job_claim_keys(
        self,
        wanted: Sequence[tuple[str, str]],
        worker: str,
        now: datetime | None = None,
        lease_seconds: float | None = None,
    ) -> list[KeyClaim]:
        """Lease the jobs named by ``(queue, key)`` that are pending and due, in one
        transaction, exactly as ``job_claim`` would (new token, attempt opened); a job another
        transaction is claiming right now is skipped, not waited for. Returns one ``KeyClaim``
        per item, in order: the claimed job, or the job as it is (or None when there is none).
        A pair named twice is claimed once."""

    # -- groups: limits, state and pauses (008) -------------------------------------------------

    def group_limits_put(
        self, queue: str, limits: GroupLimits, now: datetime | None = None
    ) -> None:
        """Set the limits of every group of a queue (no limits at all removes the row)."""
        ...

    def group_limits_get(self, queue: str) -> GroupLimits:
        """The limits of the groups of a queue; no limits when none were set."""
        ...

    def group_list(self, queue: str, now: datetime | None = None) -> list[GroupStatus]:
        """Groups of a queue with pending or leased jobs, or paused, by name. Counts are read
        through the grouped partial indexes."""
        ...

    def group_pause(
        self, queue: str, name: str, until: datetime, reason: str, now: datetime | None = None
    ) -> datetime:
        """Pause a group until ``until`` unless it is paused longer already; return its pause."""
        ...

    def group_resume(self, queue: str, name: str, now: datetime | None = None) -> bool:
        """Lift a group's pause; False when it had none in force."""
        ...

    # -- observability: queue depths, per-minute rollups, dashboard sessions (007) --------------

    def queue_depths(self, now: datetime | None = None) -> list[QueueDepth]:
        """Pending (and due), leased (and expired) and dead jobs per queue, with the age of the
        oldest due pending job; read through the partial indexes, never the whole table."""
        ...

    def queue_finished_counts(self) -> dict[str, dict[str, int]]:
        """Done and cancelled jobs per queue (``{queue: {state: n}}``). This reads the table:
        cache it."""
        ...

    def minute_stats_add(self, rows: Sequence[MinuteStats]) -> None:
        """Add these counts to the stored rollups (one transaction)."""
        ...

    def minute_stats_list(self, since: datetime) -> list[MinuteStats]:
        """Rollups of minutes at or after ``since``, oldest first."""
        ...

    def minute_stats_prune(self, before: datetime) -> int:
        """Delete rollups of minutes before ``before``; return how many rows."""
        ...

    def session_insert(
        self, digest: str, api_key_id: str, ttl_seconds: float, now: datetime | None = None
    ) -> datetime:
        """Store a dashboard session by the digest of its token; return when it expires."""
        ...

    def session_get(self, digest: str, now: datetime | None = None) -> ApiKey | None:
        """The API key of an unexpired session (revoked or not: the caller checks), or None."""
        ...

    def session_delete(self, digest: str) -> None: ...

    def session_prune(self, now: datetime | None = None) -> int:
        """Delete expired sessions; return how many."""

    # -- push subscriptions (jobledger.subscriptions, the delivery loop) -----------------------

    def subscription_insert(self, sub: Subscription, now: datetime | None = None) -> Subscription:
        """Store a new subscription; ``SubscriptionExists`` when its queue already has one."""
        ...

    def subscription_get(self, subscription_id: str) -> Subscription:
        """The subscription with this id, or ``NotFound``."""
        ...

    def subscription_list(self) -> list[Subscription]:
        """Every subscription, by queue, with its secrets (the delivery loop signs with them)."""
        ...

    def subscription_set_state(
        self,
        subscription_id: str,
        state: SubscriptionState,
        actor: str | None,
        reason: str | None,
        now: datetime | None = None,
    ) -> Subscription:
        """Pause, resume (``active``) or disable a subscription, recording who and why."""
        ...

    def subscription_delete(self, subscription_id: str) -> Subscription:
        """Delete a subscription (its queue's jobs stay); return what was deleted."""
        ...

    def subscription_rotate(
        self,
        subscription_id: str,
        secret: str,
        overlap_seconds: float,
        now: datetime | None = None,
    ) -> Subscription:
        """Make ``secret`` the signing secret; the old one keeps signing for the overlap."""
        ...

    def subscription_record(
        self,
        subscription_id: str,
        ok: bool,
        status: int | None,
        error: str | None,
        now: datetime | None = None,
    ) -> None:
        """Note a delivery's outcome on the subscription's health (last status and error,
        consecutive failures, counts). An unknown id changes nothing."""
        ...


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
