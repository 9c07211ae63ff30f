"""Extension points for what runs beside the core: observers of workers, a tracer of attempts,
and services that a worker starts and stops with itself (the scheduler, a metrics endpoint)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from datetime import datetime

    from .._records import ClaimedJob, RescueResult
    from .leases import LeaseHold
    from .outcomes import Finished
    from .runtime import Runtime

__all__ = ["AttemptTracer", "WorkerObserver", "WorkerService"]


class WorkerObserver:
    """Told what workers do. Subclass and override what you need; the defaults do nothing.

    Called on worker threads, outside any database transaction: keep it quick and never raise
    (an exception is logged and swallowed). An object in ``ledger.observers`` that does not
    subclass it (a push observer, say) is told only what it has methods for.
    """

    def on_claim(self, worker: Runtime, jobs: Sequence[ClaimedJob]) -> None:
        """Jobs were just claimed by ``worker``."""

    def on_outcome(
        self,
        worker: Runtime,
        job: ClaimedJob,
        outcome: str,
        duration: float,
        error_class: str | None,
    ) -> None:
        """An attempt's outcome was written: ``done``, ``retry`` or ``dead``."""

    def on_outcomes(
        self, worker: Runtime, outcomes: Sequence[tuple[ClaimedJob, str, float, str | None]]
    ) -> None:
        """Outcomes written together (one batch of the worker's completer), each as
        ``(job, outcome, duration, error_class)``. By default ``on_outcome`` for each one;
        override it to add a batch up at once."""
        for job, outcome, duration, error_class in outcomes:
            self.on_outcome(worker, job, outcome, duration, error_class)

    def on_heartbeat(self, worker: Runtime, renewed: Sequence[tuple[ClaimedJob, datetime]]) -> None:
        """Leases were renewed: each job with its new ``lease_until``."""

    def on_lease_lost(self, worker: Runtime, job: ClaimedJob, action: str) -> None:
        """A write (``heartbeat``, ``complete``, ``fail``, ``release``) was refused: the token
        was stale."""

    def on_rescue(self, worker: Runtime, rescued: Sequence[RescueResult]) -> None:
        """The worker's rescuer closed expired leases."""


class AttemptTracer(Protocol):
    """Follows each attempt from its start to its written outcome (one span per attempt:
    ``jobledger.observability.tracing``, when the process uses OpenTelemetry). A runtime
    without one (the common case) pays nothing for it. Never raises."""

    def start(self, hold: LeaseHold, holder: str, target: str | None = None) -> object:
        """An attempt starts on this thread (or asyncio task): its span begins and is the
        current one until ``returned`` (so that what the handler does is part of it).
        ``target``: the host a push delivery POSTs to (None: a handler runs it). Returns what
        ``returned`` needs."""
        ...

    def returned(self, hold: LeaseHold, token: object, error: BaseException | None) -> None:
        """The handler returned (or raised ``error``), on the thread that called ``start``."""
        ...

    def ended(self, item: Finished) -> None:
        """The attempt's outcome (``item.outcome``) is written: its span ends."""
        ...

    def given_up(self, item: Finished) -> None:
        """The attempt's outcome will not be written (the storage refused it, alone, again and
        again): its span ends as an error that says so; the lease expires and the job is
        handed out again."""
        ...


class WorkerService(Protocol):
    """Something a worker runs beside itself, started after it and stopped before it ends."""

    def start(self) -> None: ...

    def stop(self) -> None: ...
