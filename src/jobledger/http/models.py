"""Schemas shared by several routes, and how ledger objects are shown as JSON."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from .._records import (
    MAX_GROUP_LENGTH,
    MAX_JOB_ID,
    MIN_RATE,
    Attempt,
    AttemptOutcome,
    ClaimedJob,
    Event,
    GroupStatus,
    JobRow,
    JobState,
    QueueInfo,
)
from .problems import invalid
from .schema import AnyObject, AnyValue, Array, Boolean, Integer, Number, Object, String

QUEUE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
#: Keys: 1-512 characters without control characters (as for keys given from Python).
KEY_PATTERN = r"^[^\u0000-\u001f\u007f]{1,512}$"
#: Groups: 1-200 characters without control characters (as for groups given from Python).
GROUP_PATTERN = r"^[^\u0000-\u001f\u007f]{1,200}$"
#: A group named in a path cannot hold "/" (Starlette matches paths decoded), nor be "." or "..".
GROUP_PATH_PATTERN = r"^(?!\.\.?$)[^\u0000-\u001f\u007f/]{1,200}$"
MAX_ID = MAX_JOB_ID
"""The largest job id: PostgreSQL's bigint (SQLite's INTEGER holds the same)."""
STATES = tuple(s.value for s in JobState)


def _decimals_up_to(limit: int) -> str:
    """A regular expression (a group, unanchored) matching exactly the decimal numbers 1 to
    ``limit``, without leading zeros: the shorter numbers, then for each digit of ``limit`` the
    numbers that share its prefix and are smaller at that digit, then ``limit`` itself."""
    digits = str(limit)
    alternatives = [f"[1-9][0-9]{{0,{len(digits) - 2}}}"] if len(digits) > 1 else []
    for i, digit in enumerate(digits):
        low, high = (1 if i == 0 else 0), int(digit) - 1
        if high >= low:
            rest = len(digits) - i - 1
            alternatives.append(
                digits[:i]
                + (f"[{low}-{high}]" if high > low else str(low))
                + (f"[0-9]{{{rest}}}" if rest else "")
            )
    alternatives.append(digits)
    return "(?:" + "|".join(alternatives) + ")"


#: A message id as text: 1 to ``MAX_ID``, digits only.
ID_DIGITS = _decimals_up_to(MAX_ID)


def parse_id(text: str) -> int | None:
    """A message id from text (a form field, a path segment), or None when the text is not one
    (not digits, or beyond the id range)."""
    if not text.isascii() or not text.isdigit() or not 0 < int(text) <= MAX_ID:
        return None
    return int(text)


QUEUE_NAME = String(
    min_length=1,
    max_length=128,
    pattern=QUEUE_PATTERN,
    description="A queue name: letters, digits and _ . : -, starting with a letter or digit.",
    example="weekly-digests",
)
KEY = String(
    min_length=1,
    max_length=512,
    pattern=KEY_PATTERN,
    description="A job key: the business identity of the job, unique per queue.",
    example="4187:2026-W33",
)
GROUP = String(
    min_length=1,
    max_length=MAX_GROUP_LENGTH,
    pattern=GROUP_PATTERN,
    description="The message's group: a tenant, customer or downstream host. Groups share a "
    "queue fairly and the queue's group limits apply to each; see docs/groups.md.",
    example="customer-4187",
)
GROUP_NAME = String(
    min_length=1,
    max_length=MAX_GROUP_LENGTH,
    pattern=GROUP_PATH_PATTERN,
    description="A group's name (URL-encoded). A group whose name holds '/' is reached with "
    "the CLI (jobledger groups …), not over HTTP.",
    example="customer-4187",
)
MESSAGE_ID = String(
    pattern=f"^{ID_DIGITS}$",
    description="The job's id: digits, 1 to 9223372036854775807. Opaque to clients: compare, "
    "do not compute.",
    example="42",
)
MESSAGE_ID_PARAM = Integer(minimum=1, maximum=MAX_ID, description="The message (job) id.")
TIME = String(format="date-time", description="RFC 3339, UTC.", example="2026-08-10T06:00:00Z")
OPTIONAL_TIME = String(format="date-time", description="RFC 3339, UTC.", nullable=True)
STATE = String(enum=STATES, description="pending, leased, done, dead or cancelled.")
PAYLOAD = AnyObject(
    description="A JSON object of at most 256 KiB encoded, nesting at most 64 levels; strings "
    "may not contain U+0000. Carry ids, not snapshots."
)


def text(max_length: int, description: str, *, min_length: int = 1) -> String:
    """Free text (no U+0000)."""
    return String(min_length=min_length, max_length=max_length, description=description)


COUNTS = Object(
    {s: Integer(minimum=0) for s in STATES},
    required=STATES,
    additional=True,
    description="Jobs in the queue by state.",
)

QUEUE = Object(
    {
        "name": QUEUE_NAME,
        "task": String(description="The task name stored in each published job."),
        "max_attempts": Integer(minimum=1, maximum=1000),
        "lease_seconds": Number(exclusive_minimum=0),
        "backoff": Object(
            {
                "base_seconds": Number(exclusive_minimum=0),
                "cap_seconds": Number(exclusive_minimum=0),
            },
            required=("base_seconds", "cap_seconds"),
            additional=True,
        ),
        "retention_seconds": Number(minimum=86400),
        "require_idempotency_key": Boolean(),
        "timeout_seconds": Number(exclusive_minimum=0, nullable=True),
        "created_at": TIME,
        "updated_at": TIME,
        "counts": COUNTS,
        "oldest_due_pending_seconds": Number(
            minimum=0,
            nullable=True,
            description="Age of the oldest pending job whose run time has passed; null if none.",
        ),
    },
    required=(
        "name",
        "task",
        "max_attempts",
        "lease_seconds",
        "backoff",
        "retention_seconds",
        "require_idempotency_key",
        "created_at",
        "updated_at",
        "counts",
        "oldest_due_pending_seconds",
    ),
    additional=True,
    name="Queue",
)

ATTEMPT = Object(
    {
        "attempt": Integer(minimum=1),
        "worker": String(description="Who held the lease: a worker name, or http:<consumer>."),
        "started_at": TIME,
        "finished_at": OPTIONAL_TIME,
        "outcome": String(enum=tuple(o.value for o in AttemptOutcome), nullable=True),
        "error_class": String(nullable=True),
        "error": String(nullable=True),
    },
    required=("attempt", "worker", "started_at", "finished_at", "outcome", "error_class", "error"),
    additional=True,
    name="Attempt",
)

EVENT = Object(
    {
        "at": TIME,
        "kind": String(description="redrive, resolve, cancel, lease_lost, …"),
        "actor": String(nullable=True),
        "note": String(nullable=True),
    },
    required=("at", "kind", "actor", "note"),
    additional=True,
    name="Event",
)

MESSAGE = Object(
    {
        "message_id": MESSAGE_ID,
        "queue": QUEUE_NAME,
        "key": String(),
        "task": String(),
        "state": STATE,
        "payload": AnyObject(),
        "priority": Integer(),
        "run_at": TIME,
        "attempts": Integer(minimum=0, description="Attempts made so far."),
        "attempts_left": Integer(minimum=0),
        "max_attempts": Integer(minimum=1),
        "lease_until": OPTIONAL_TIME,
        "leased_by": String(nullable=True),
        "created_at": TIME,
        "updated_at": TIME,
        "finished_at": OPTIONAL_TIME,
        "last_error": String(nullable=True),
        "last_error_class": String(nullable=True),
        "correlation_id": String(nullable=True),
        "group": String(nullable=True, description="The message's group, or null."),
        "result": AnyValue(
            description="What the handler returned when the message was done (any JSON "
            "value); null until then, when it returned nothing, or when its value could not "
            "be stored (the history's `result_dropped` event says why)."
        ),
        "history": Object(
            {"attempts": Array(ATTEMPT), "events": Array(EVENT)},
            required=("attempts", "events"),
            additional=True,
        ),
    },
    required=(
        "message_id",
        "queue",
        "key",
        "task",
        "state",
        "payload",
        "priority",
        "run_at",
        "attempts",
        "attempts_left",
        "max_attempts",
        "created_at",
        "updated_at",
        "result",
        "history",
    ),
    additional=True,
    name="Message",
)

RECEIVED = Object(
    {
        "message_id": MESSAGE_ID,
        "queue": QUEUE_NAME,
        "key": String(),
        "task": String(),
        "payload": AnyObject(),
        "attempt": Integer(minimum=1, description="1 on the first delivery."),
        "attempts_left": Integer(minimum=0, description="Deliveries left after this one."),
        "receipt": String(description="Names this delivery's lease: pass it to ack, nack, extend."),
        "lease_until": TIME,
        "correlation_id": String(nullable=True),
        "group": String(nullable=True, description="The message's group, or null."),
    },
    required=(
        "message_id",
        "queue",
        "key",
        "task",
        "payload",
        "attempt",
        "attempts_left",
        "receipt",
        "lease_until",
    ),
    additional=True,
    name="ReceivedMessage",
)


GROUP_STATUS = Object(
    {
        "queue": QUEUE_NAME,
        "group": String(description="The group's name."),
        "pending": Integer(minimum=0, description="Pending jobs, due or not."),
        "due": Integer(minimum=0, description="Pending jobs whose run time has passed."),
        "leased": Integer(minimum=0, description="Jobs being run now."),
        "paused_until": String(
            format="date-time",
            nullable=True,
            description="No job of the group is claimed before this time; null: not paused.",
        ),
        "paused_reason": String(nullable=True, description="Why it is paused (null if not)."),
        "served_at": String(
            format="date-time",
            nullable=True,
            description="When a claim last took one of the group's jobs; null: never.",
        ),
        "tokens": Number(
            minimum=0,
            nullable=True,
            description="What the group's rate bucket holds now; null when the queue sets no rate.",
        ),
    },
    required=(
        "queue",
        "group",
        "pending",
        "due",
        "leased",
        "paused_until",
        "paused_reason",
        "served_at",
        "tokens",
    ),
    additional=True,
    name="GroupStatus",
)

GROUP_LIMITS = Object(
    {
        "queue": QUEUE_NAME,
        "max_leased": Integer(
            minimum=1,
            nullable=True,
            description="At most this many of one group's jobs leased at once; null: no limit.",
        ),
        "rate": Number(
            minimum=MIN_RATE,
            nullable=True,
            description="One group's jobs start at most this often per second; null: no limit.",
        ),
        "burst": Number(
            minimum=1,
            nullable=True,
            description="The rate's bucket as set; null: the default (one second's worth).",
        ),
        "bucket_size": Number(
            minimum=1,
            nullable=True,
            description="The bucket in force: burst, or its default; null when there is no rate.",
        ),
    },
    required=("queue", "max_leased", "rate", "burst", "bucket_size"),
    additional=True,
    name="GroupLimits",
)


def iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_time(value: str | None, field: str) -> datetime | None:
    """An RFC 3339 time from a request body; 422 when it is not one (or has no offset)."""
    if value is None:
        return None
    text = value.upper()  # RFC 3339 allows "t" and "z"
    if text[17:19] == "60":  # a leap second: the instant just after :59
        text = text[:17] + "59.999999" + text[19:].lstrip("0123456789.")
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise invalid(
            f"{field} must be an RFC 3339 time with an offset, e.g. 2026-08-10T06:00:00Z",
            f"/{field}",
            "not an RFC 3339 date-time",
        )
    return parsed


def receipt_of(job: ClaimedJob) -> str:
    return f"{job.id}.{job.lease_token}"


def queue_json(info: QueueInfo, counts: dict[str, int], oldest: float | None) -> dict[str, Any]:
    return info.as_dict(iso) | {
        "counts": {state: counts.get(state, 0) for state in STATES},
        "oldest_due_pending_seconds": oldest,
    }


def attempt_json(a: Attempt) -> dict[str, Any]:
    return {
        "attempt": a.attempt,
        "worker": a.worker,
        "started_at": iso(a.started_at),
        "finished_at": iso(a.finished_at),
        "outcome": None if a.outcome is None else a.outcome.value,
        "error_class": a.error_class,
        "error": a.error_message,
    }


def event_json(e: Event) -> dict[str, Any]:
    return {"at": iso(e.at), "kind": e.kind, "actor": e.actor, "note": e.note}


def message_json(job: JobRow, attempts: list[Attempt], events: list[Event]) -> dict[str, Any]:
    """A job for operators. The lease token is left out: it is the consumer's secret."""
    return {
        "message_id": str(job.id),
        "queue": job.queue,
        "key": job.key,
        "task": job.task,
        "state": job.state.value,
        "payload": job.payload,
        "priority": job.priority,
        "run_at": iso(job.run_at),
        "attempts": job.attempts,
        "attempts_left": job.budget_left,
        "max_attempts": job.max_attempts,
        "lease_until": iso(job.lease_until),
        "leased_by": job.leased_by,
        "created_at": iso(job.created_at),
        "updated_at": iso(job.updated_at),
        "finished_at": iso(job.finished_at),
        "last_error": job.last_error,
        "last_error_class": job.last_error_class,
        "correlation_id": job.correlation_id,
        "group": job.group,
        "result": job.result,
        "history": {
            "attempts": [attempt_json(a) for a in attempts],
            "events": [event_json(e) for e in events],
        },
    }


def received_json(job: ClaimedJob) -> dict[str, Any]:
    return {
        "message_id": str(job.id),
        "queue": job.queue,
        "key": job.key,
        "task": job.task,
        "payload": job.payload,
        "attempt": job.attempt,
        "attempts_left": max(0, job.budget_left),
        "receipt": receipt_of(job),
        "lease_until": iso(job.lease_until),
        "correlation_id": job.correlation_id,
        "group": job.group,
    }


def group_status_json(status: GroupStatus) -> dict[str, Any]:
    """A group for operators; times in UTC whatever the database session's time zone."""
    return status.as_dict() | {
        "paused_until": iso(status.paused_until),
        "served_at": iso(status.served_at),
    }
