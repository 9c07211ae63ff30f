"""Schemas shared by several routes, and how ledger objects are shown as JSON."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ..queues import QueueInfo
from ..types import Attempt, ClaimedJob, Event, JobRow, JobState
from .schema import AnyObject, Array, Boolean, Integer, Number, Object, String

QUEUE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
#: Keys: 1-512 characters without control characters (as for keys given from Python).
KEY_PATTERN = r"^[^\u0000-\u001f\u007f]{1,512}$"
MAX_ID = 2**63 - 1
STATES = tuple(s.value for s in JobState)

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
MESSAGE_ID = String(
    pattern=r"^[1-9][0-9]{0,18}$",
    description="The job's id (digits). Opaque to clients: compare, do not compute.",
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
        "outcome": String(
            enum=("done", "retry", "dead", "lease_expired", "released"), nullable=True
        ),
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


def iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def receipt_of(job: ClaimedJob) -> str:
    return f"{job.id}.{job.lease_token}"


def queue_json(info: QueueInfo, counts: dict[str, int], oldest: float | None) -> dict[str, Any]:
    s = info.settings
    return {
        "name": s.name,
        "task": s.task,
        "max_attempts": s.max_attempts,
        "lease_seconds": s.lease_seconds,
        "backoff": {"base_seconds": s.backoff_base, "cap_seconds": s.backoff_cap},
        "retention_seconds": s.retention_seconds,
        "require_idempotency_key": s.require_key,
        "created_at": iso(info.created_at),
        "updated_at": iso(info.updated_at),
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
    }
