"""The outbox role: queues routed to a broker, and the outbox records that database triggers
write for their jobs, in the transaction that makes a job pending (jobledger.brokers). A relay
reads the due records and marks them published, fenced by its leader lease."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from .._records import LeaderLease, OutboxQueueStats, OutboxRecord, Route

__all__ = ["Outbox"]


class Outbox(Protocol):
    """Routes and outbox records (``backend.outbox``)."""

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

    def routes(self) -> list[Route]:
        """Every routed queue, by name."""
        ...

    def due(
        self, limit: int, now: datetime | None = None, queues: Sequence[str] | None = None
    ) -> list[OutboxRecord]:
        """Unpublished records whose time has come, in ``(available_at, id)`` order."""
        ...

    def mark(self, ids: Sequence[int], lease: LeaderLease, now: datetime | None = None) -> int:
        """Mark records published, fenced by the relay's leader lease (``LeadershipLost`` and
        nothing marked when it is no longer held). Returns how many were marked."""
        ...

    def records(
        self,
        job_id: int | None = None,
        queue: str | None = None,
        unpublished: bool = False,
        limit: int = 100,
    ) -> list[OutboxRecord]:
        """Records, newest first: of one job, of one queue, only the unpublished ones."""
        ...

    def stats(self, now: datetime | None = None) -> list[OutboxQueueStats]:
        """Unpublished and due records per queue, with the age of the oldest due one."""
        ...

    def prune(self, published_before: datetime, limit: int = 10000) -> int:
        """Delete up to ``limit`` records published before a time; return how many."""
        ...

    def republish(
        self,
        queue: str,
        due_before: datetime,
        now: datetime | None = None,
        limit: int = 10000,
    ) -> int:
        """Write a new record for each pending job of a routed queue, due before ``due_before``,
        that has no unpublished record (its message was lost by the broker). Returns how many."""
        ...
