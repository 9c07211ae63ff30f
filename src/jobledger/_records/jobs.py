"""The nouns of the ledger: states, job rows, attempts, events, and what the runtime hands the
storage (new jobs, leases, failures) and gets back (claims, inserts, rescues, prunes).

A leaf module: it imports nothing from the rest of jobledger but the checks beside it (which
import only the errors), so every layer may depend on it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NamedTuple

from .checks import operator_text, visible_nul, whole_number

__all__ = [
    "MAX_JOB_ID",
    "Attempt",
    "AttemptOutcome",
    "ClaimedJob",
    "Enqueued",
    "Event",
    "FailResult",
    "Failure",
    "InsertResult",
    "JobFilter",
    "JobRow",
    "JobSpec",
    "JobState",
    "Lease",
    "NewJob",
    "OnConflict",
    "PruneResult",
    "Pruned",
    "PublishItem",
    "PublishOutcome",
    "PublishStatus",
    "RescueResult",
    "Tombstone",
    "created_results",
]

#: The largest job id either backend can hold (a signed 64-bit integer): no job has a larger one.
MAX_JOB_ID = 2**63 - 1


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
    TIMED_OUT = "timed_out"
    """The attempt ran past its task's timeout and was abandoned: lease renewal stopped, and the
    job went back to pending (budget left) or to dead (budget spent). Whatever the abandoned
    handler writes afterwards is refused by the fence."""


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
    result: Any = None
    """What the handler returned (JSON: an object, list, string, number or bool), stored when
    its attempt completed; None while the job is not done, when the handler returned None, or
    when what it returned could not be stored (its history then has a ``result_dropped``
    event). ``Ledger.result`` reads it, and waits for it."""

    @property
    def budget_left(self) -> int:
        """Attempts this job may still make before a failure sends it to dead."""
        return max(0, self.attempt_limit - self.attempts)


# Not frozen: a claim builds one per job, and a frozen init (one ``object.__setattr__`` per
# field) costs several times a plain one. Equality and hashing are those of a frozen dataclass.
@dataclass(slots=True, unsafe_hash=True)
class ClaimedJob:
    """A job just claimed by a worker: what the worker needs to run it, and its lease. Treat it
    as read-only: the runtime's records of the attempt are built from it."""

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
    trace_context: str | None = None
    """The trace context of the enqueue (W3C ``traceparent`` and ``tracestate`` as a JSON
    object), or None: what each attempt's span links to (see docs/integrations.md)."""


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


OnConflict = Literal["raise", "report"]


@dataclass(slots=True)  # not frozen: a batch builds thousands, and a frozen init costs 3x
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
    group: str | None = None
    trace_context: str | None = None
    """The enqueue's W3C trace context (``traceparent``, ``tracestate``) as a JSON object, or
    None: the common case, and the only one without OpenTelemetry."""


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


# The slots of InsertResult, written directly: what its frozen __init__ does, without the
# checks of object.__setattr__ for each field (a third of the cost, per job of a batch).
_new_result = object.__new__
_set_id = InsertResult.__dict__["id"].__set__
_set_created = InsertResult.__dict__["created"].__set__
_set_conflict = InsertResult.__dict__["conflict"].__set__
_set_pruned = InsertResult.__dict__["pruned"].__set__


def created_results(ids: Iterable[int]) -> list[InsertResult]:
    """``InsertResult(id, True)`` for each id, in order: what an insert that created every job
    of its batch returns (``tests/test_insert_results.py`` checks that they are the same)."""
    results = []
    for job_id in ids:
        result = _new_result(InsertResult)
        _set_id(result, job_id)
        _set_created(result, True)
        _set_conflict(result, False)
        _set_pruned(result, False)
        results.append(result)
    return results


@dataclass(slots=True, unsafe_hash=True)  # not frozen, as ClaimedJob: one per claimed job
class Lease:
    """A worker's hold on one job: the job, its lease token, and the attempt it opened. Treat
    it as read-only."""

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
    pause_group_until: datetime | None = None
    """Set by ``Retry(scope="group")``: the job's whole group is not claimed before then."""
    timed_out: bool = False
    """The attempt ran past its timeout: it is closed as ``timed_out`` (retried or dead by the
    budget like any transient failure)."""

    def __post_init__(self) -> None:
        # A handler's exception or an endpoint's answer may hold U+0000, which PostgreSQL
        # cannot store, or half of a surrogate pair, which neither backend can encode: the
        # outcome was never written and the job stayed leased.
        for name in ("error_class", "message", "traceback"):
            text = getattr(self, name)
            if text is not None and ("\x00" in text or not text.isascii()):
                object.__setattr__(self, name, visible_nul(text))


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
    group: str | None = None
    """Only jobs of this group (see docs/groups.md)."""
    error_contains: str | None = None
    """Only jobs whose last error contains this text, the case of any letter ignored (on
    every backend: SQLite's own LIKE ignores the case of ASCII letters only)."""
    since: datetime | None = None
    """Last changed at or after this time."""
    until: datetime | None = None
    """Last changed before this time."""
    ids: tuple[int, ...] | None = None
    limit: int | None = None
    """At most this many jobs: a whole number from 1 (``ConfigError`` otherwise)."""
    after_id: int | None = None
    """Only jobs with a larger id (paging through a listing ordered by id)."""

    def __post_init__(self) -> None:
        # Checked here, for every backend alike: PostgreSQL refuses a number past its bigint,
        # and SQLite's driver one past its integer as if the database could not be used.
        if self.limit is not None:
            whole_number(self.limit, 1, MAX_JOB_ID, "limit")
        if self.after_id is not None:
            whole_number(self.after_id, 0, MAX_JOB_ID, "after_id")
        for name in ("queue", "task", "key_prefix", "group", "error_contains"):
            operator_text(getattr(self, name), name, optional=True)


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
    ticks: int = 0
    """Schedule ticks finished before the cut-off that were deleted (see docs/scheduling.md)."""
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
            self.ticks + other.ticks,
            states,
        )


@dataclass(frozen=True, slots=True)
class Pruned:
    """What one pass of the maintenance pruner deleted from the small tables."""

    rollups: int = 0
    sessions: int = 0
    tombstones: int = 0
    groups: int = 0


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
