"""The rescuer: expired leases back to pending with budget left, to dead without (SPEC §2).

One rescuer for every transport: a polling worker runs a pass in its own loop, ``jobledger
serve`` and push delivery run it on a thread. Cheap and idempotent, so any number of processes
may run it at once. Each pass closes at most ``limit`` expired leases.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from .._records import RescueResult
from .looper import Looper

if TYPE_CHECKING:
    from ..backends.base import Backend

__all__ = ["Rescuer"]

log = logging.getLogger("jobledger.worker")


class Rescuer(Looper):
    """Closes expired leases every ``interval`` seconds (``start()``), or once (``run_once``).

    ``on_rescue(results)`` is told of every pass that closed some (metrics, a worker's
    observers); ``clock`` gives the ``now`` for the database (None: its own clock)."""

    name = "rescuer"

    def __init__(
        self,
        backend: Callable[[], Backend] | Backend,
        interval: float = 5.0,
        on_rescue: Callable[[list[RescueResult]], None] | None = None,
        clock: Callable[[], datetime | None] = lambda: None,
        limit: int = 1000,
    ):
        super().__init__(interval)
        self._backend = backend
        self._on_rescue = on_rescue
        self._clock = clock
        self._limit = limit

    @property
    def backend(self) -> Backend:
        b = self._backend
        return b() if callable(b) else b

    def run_once(self, now: datetime | None = None) -> list[RescueResult]:
        rescued = self.backend.jobs.rescue(now or self._clock(), self._limit)
        if not rescued:
            return rescued
        if self._on_rescue is not None:
            try:
                self._on_rescue(rescued)
            except Exception:  # an observer must never stop the rescue
                log.exception("rescue observer failed")
        for r in rescued:
            log.warning(
                "lease expired: job %d (%s/%s) attempt %d -> %s",
                r.job_id,
                r.queue,
                r.key,
                r.attempt,
                r.state.value,
                extra={
                    "job_id": r.job_id,
                    "key": r.key,
                    "queue": r.queue,
                    "attempt": r.attempt,
                    "outcome": "lease_expired",
                },
            )
        return rescued
