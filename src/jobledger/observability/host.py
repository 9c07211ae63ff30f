"""The ledger as observability sees it: observers to add, services to run beside its workers,
its storage and schedules to read (``jobledger.Ledger`` is one). A protocol, so that this layer
does not import the ledger that installs it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .._runtime.hooks import WorkerObserver, WorkerService
    from .._services.stats import MinuteStatsBook
    from ..backends.base import Backend
    from ..scheduling.schedule import ScheduleBook

__all__ = ["ObservedLedger"]


class ObservedLedger(Protocol):
    observers: list[WorkerObserver]
    worker_services: list[Callable[[Any], WorkerService | None]]

    @property
    def schedules(self) -> ScheduleBook: ...

    minute_stats: MinuteStatsBook

    @property
    def backend(self) -> Backend: ...
