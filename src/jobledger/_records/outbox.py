"""What the backends store for broker delivery: routes, outbox records, and claims by key.

A leaf module (the standard library and the job records only), so that the backends can
return these rows without depending on the relay, the consumers or any broker client.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from .jobs import ClaimedJob, JobRow

__all__ = ["KeyClaim", "OutboxQueueStats", "OutboxReason", "OutboxRecord", "Route"]


class OutboxReason(enum.StrEnum):
    """Why an outbox record was written: how its job became pending."""

    ENQUEUE = "enqueue"
    """The job was created in a routed queue."""
    RETRY = "retry"
    """It was leased and went back to pending: a transient failure, an expired lease that was
    rescued, or a worker giving it back unstarted."""
    REDRIVE = "redrive"
    """An operator moved it from dead or cancelled back to pending (redrive, resolve)."""
    RESCHEDULE = "reschedule"
    """Its run time changed while it was pending (``resolve --pending``)."""
    ROUTE = "route"
    """It was already pending when its queue was routed to a broker."""
    REPUBLISH = "republish"
    """An operator republished pending jobs whose messages the broker lost."""


@dataclass(frozen=True, slots=True)
class Route:
    """A queue whose jobs are delivered through a broker."""

    queue: str
    routed_at: datetime
    routed_by: str
    note: str | None


@dataclass(frozen=True, slots=True)
class OutboxRecord:
    """One publication a relay owes the broker: "job ``key`` of ``queue`` is pending, due at
    ``available_at``". Records are published in ``(available_at, id)`` order."""

    id: int
    job_id: int
    queue: str
    key: str
    reason: OutboxReason
    available_at: datetime
    created_at: datetime
    published_at: datetime | None
    superseded_at: datetime | None = None
    """Set when the job became pending again before this record was published: the newer
    record is published instead (this one too, if the relay had it in hand already)."""


@dataclass(frozen=True, slots=True)
class OutboxQueueStats:
    """The outbox of one queue at one moment."""

    queue: str
    unpublished: int
    """Records waiting to be published, due or not."""
    due: int
    """Unpublished records whose time has come: the relay's backlog."""
    oldest_due_seconds: float | None
    """How long the oldest due record has waited; None when nothing is due."""
    last_published_at: datetime | None


@dataclass(frozen=True, slots=True)
class KeyClaim:
    """What claiming a job by its key did: the claimed job, or why there was none to claim."""

    job: ClaimedJob | None
    """The job, now leased to the caller under a new token, with an attempt opened."""
    current: JobRow | None = None
    """When nothing was claimed: the job as it is (finished, leased elsewhere, not due yet), or
    None when no job has that key in that queue."""
    paused_until: datetime | None = None
    """When nothing was claimed because the job's group is paused: until when."""
