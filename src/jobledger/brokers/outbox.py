"""``Outbox``: route queues to a broker and see what the relay still owes it.

Routing is stored in the ledger (``jobledger_routes``), not in a process's configuration, so
that every writer — an application's transactional enqueue, a polling worker's retry, an
operator's redrive — writes the outbox record in its own transaction, through the database's
triggers, whichever process it is.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

from .._ledger import Ledger
from .._records import (
    MAX_JOB_ID,
    OutboxQueueStats,
    OutboxRecord,
    Route,
    explicit_now,
    job_id_number,
    operator_text,
    time_after,
    whole_number,
)
from .._task import validate_queue_name
from ..backends.base import Backend
from ..errors import ConfigError

__all__ = ["Outbox", "RouteResult", "outbox_json"]


@dataclass(frozen=True)
class RouteResult:
    """What routing a queue did."""

    route: Route
    backfilled: int
    """Jobs already pending in the queue that got an outbox record now (0 when the queue was
    routed already)."""
    created: bool


class Outbox:
    """The outbox of a ledger: ``Outbox(ledger).route("digests", actor="ops")``."""

    def __init__(self, ledger: Ledger | Backend):
        self.backend: Backend = ledger.backend if isinstance(ledger, Ledger) else ledger

    def route(
        self, queue: str, *, actor: str, note: str | None = None, now: datetime | None = None
    ) -> RouteResult:
        """Deliver the jobs of ``queue`` through a broker from now on.

        Every job of the queue that becomes pending from now on gets an outbox record in the
        same transaction; jobs pending already get one now. Run a relay to publish them and
        consumers to run them. Routing a routed queue changes nothing.
        """
        explicit_now(now)
        validate_queue_name(queue)
        if not actor:
            raise ConfigError("routing a queue needs an actor; it is recorded with the route")
        operator_text(actor, "actor"), operator_text(note, "note", optional=True)
        before = {r.queue for r in self.backend.outbox.routes()}
        route, backfilled = self.backend.outbox.route_add(queue, actor, note, now)
        return RouteResult(route, backfilled, queue not in before)

    def unroute(self, queue: str) -> int:
        """Stop delivering ``queue`` through a broker; its unpublished records are discarded
        (returns how many). Polling workers see its pending jobs as before; messages already
        published are still safe to consume (consumers skip what is no longer pending)."""
        return self.backend.outbox.route_remove(validate_queue_name(queue))

    def routes(self) -> list[Route]:
        return self.backend.outbox.routes()

    def routed(self, queue: str) -> bool:
        return any(r.queue == queue for r in self.backend.outbox.routes())

    def status(self, now: datetime | None = None) -> list[OutboxQueueStats]:
        """Per queue: records not yet published, how many are due, how long the oldest due one
        has waited (the relay's lag), when the last one was published."""
        explicit_now(now)
        return self.backend.outbox.stats(now)

    def records(
        self,
        job_id: int | str | None = None,
        queue: str | None = None,
        unpublished: bool = False,
        limit: int = 100,
    ) -> list[OutboxRecord]:
        """Records, newest first: of one job, of one queue, only the unpublished ones; at most
        ``limit`` (1 to 10,000). Anything else is a ``ConfigError``, on both backends."""
        if job_id is not None:
            job_id = job_id_number(job_id)
            if not 0 < job_id <= MAX_JOB_ID:
                return []  # no job has it (and SQLite could not even be sent it)
        if queue is not None:
            validate_queue_name(queue)
        if not isinstance(unpublished, bool):
            raise ConfigError(f"unpublished must be True or False, got {unpublished!r}")
        whole_number(limit, 1, 10_000, "limit")
        return self.backend.outbox.records(job_id, queue, unpublished, limit)

    def republish(
        self,
        queue: str,
        *,
        due_for: float | timedelta = 300.0,
        now: datetime | None = None,
        limit: int = 10000,
    ) -> int:
        """Publish again the pending jobs of ``queue`` that have been due for ``due_for`` or
        longer and have no unpublished record — after a broker lost messages (a Redis
        without an append-only file restarted, a queue purged by hand). Consumers skip any
        that turn out to be delivered twice. Returns how many records were written."""
        explicit_now(now)
        seconds = due_for.total_seconds() if isinstance(due_for, timedelta) else due_for
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
            raise ConfigError(f"due_for must be >= 0 seconds, got {due_for!r}")
        if not self.routed(queue):
            raise ConfigError(f"queue {queue!r} is not routed to a broker")
        clock = now or datetime.now(UTC)
        return self.backend.outbox.republish(queue, time_after(clock, -seconds), now, limit)

    def prune(self, older_than: timedelta, now: datetime | None = None) -> int:
        """Delete records published more than ``older_than`` ago; return how many."""
        clock = explicit_now(now) or datetime.now(UTC)
        total = 0
        while True:
            n = self.backend.outbox.prune(time_after(clock, -older_than.total_seconds()))
            total += n
            if n == 0:
                return total


def outbox_json(record: Route | OutboxRecord | OutboxQueueStats) -> dict[str, Any]:
    """A route, an outbox record or a queue's outbox figures as ``--json`` prints them: every
    field by name, times in ISO 8601, a record's reason by its value."""
    return {f.name: _json_value(getattr(record, f.name)) for f in fields(record)}


def _json_value(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    return value
