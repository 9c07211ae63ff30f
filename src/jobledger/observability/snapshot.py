"""What the ledger looks like right now, read cheaply and cached briefly.

``/metrics`` and the dashboard both read the ledger's state through one ``SnapshotCache`` per
server (or worker with ``--metrics-port``): however many scrapers and browsers ask, the
database answers at most one set of queries per ``live_seconds``. Live states (pending, leased,
dead, and the oldest due pending job) come from the partial indexes of the jobs table. The
finished states (done, cancelled) can only be counted by reading the table, so their count is
refreshed as often as costs at most 1% of the database's time: a count that took 2 ms is
repeated with every live read, one that took 1 s every 100 s — never less often than every
``finished_seconds`` (default 5 minutes).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from .._records import JobState, LeaderLease
from ..errors import JobledgerError

if TYPE_CHECKING:
    from ..scheduling.schedule import ScheduleStatus
    from .host import ObservedLedger

__all__ = ["LedgerSnapshot", "QueueView", "SnapshotCache"]

log = logging.getLogger("jobledger.observability")

STATES = tuple(s.value for s in JobState)

#: Finished jobs are counted again after this many times the last count took (1% of the time).
COST_FACTOR = 100.0


@dataclass(frozen=True)
class QueueView:
    """One queue at the moment of a snapshot."""

    name: str
    counts: dict[str, int]
    """Jobs per state, every state present. Done and cancelled may be minutes older than the
    rest (see ``LedgerSnapshot.finished_at``)."""
    due: int = 0
    """Pending jobs whose run time has passed."""
    expired_leases: int = 0
    """Leased jobs whose lease has run out (their holder died or stalled)."""
    oldest_due_pending_seconds: float | None = None
    declared: bool = False
    """Declared for the HTTP API (``jobledger queues create``)."""

    @property
    def dead(self) -> int:
        return self.counts.get("dead", 0)


@dataclass(frozen=True)
class LedgerSnapshot:
    """Queues, schedules and scheduling leaders, read together."""

    queues: list[QueueView] = field(default_factory=list)
    schedules: list[ScheduleStatus] = field(default_factory=list)
    leaders: list[LeaderLease] = field(default_factory=list)
    taken_at: datetime | None = None
    """When the live part was read; None before the first successful read."""
    finished_at: datetime | None = None
    """When done and cancelled were last counted."""
    error: str | None = None
    """Why the last read failed (the rest is then from the read before); None when it worked."""

    def queue(self, name: str) -> QueueView | None:
        return next((q for q in self.queues if q.name == name), None)


class SnapshotCache:
    """Reads a ``LedgerSnapshot`` at most once per ``live_seconds`` (finished counts once per
    ``finished_seconds``); callers in between get the last one. One read at a time: callers
    that arrive during a read wait for it rather than start another."""

    def __init__(
        self,
        ledger: ObservedLedger,
        live_seconds: float = 5.0,
        finished_seconds: float = 300.0,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        if live_seconds < 0 or finished_seconds < 0:
            raise ValueError("cache lifetimes must be >= 0 seconds")
        self.ledger = ledger
        self.live_seconds = live_seconds
        self.finished_seconds = finished_seconds
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._snapshot = LedgerSnapshot()
        self._live_read = float("-inf")
        self._finished_read = float("-inf")
        self._finished: dict[str, dict[str, int]] = {}
        self._finished_every = 0.0
        self.reads = 0
        """How many times the live part was read from the database (for tests and curiosity)."""

    def get(self) -> LedgerSnapshot:
        with self._lock:
            now = self._monotonic()
            if now - self._live_read < self.live_seconds:
                return self._snapshot
            self._live_read = now
            try:
                self._snapshot = self._read(now)
            except JobledgerError as exc:
                log.warning("could not read the ledger's state: %s", exc)
                self._snapshot = _with_error(self._snapshot, str(exc))
            return self._snapshot

    def invalidate(self) -> None:
        """Read afresh next time (after an operator's action, say)."""
        with self._lock:
            self._live_read = float("-inf")

    def _read(self, now: float) -> LedgerSnapshot:
        backend = self.ledger.backend
        self.reads += 1
        depths = {d.queue: d for d in backend.stats.depths()}
        finished_at = self._snapshot.finished_at
        if now - self._finished_read >= self._finished_every:
            started = self._monotonic()
            self._finished = backend.stats.finished_counts()
            took = self._monotonic() - started
            self._finished_read = now
            self._finished_every = min(self.finished_seconds, took * COST_FACTOR)
            finished_at = datetime.now(UTC)
        declared = {q.name for q in backend.api.queues()}
        names = sorted(set(depths) | set(self._finished) | declared)
        queues = []
        for name in names:
            depth = depths.get(name)
            counts = dict.fromkeys(STATES, 0)
            counts.update(self._finished.get(name, {}))
            if depth is not None:
                counts.update(pending=depth.pending, leased=depth.leased, dead=depth.dead)
            queues.append(
                QueueView(
                    name=name,
                    counts=counts,
                    due=depth.due if depth else 0,
                    expired_leases=depth.expired_leases if depth else 0,
                    oldest_due_pending_seconds=depth.oldest_due_pending_seconds if depth else None,
                    declared=name in declared,
                )
            )
        schedules = self.ledger.schedules.status()
        leaders = self.ledger.schedules.leaders()
        return LedgerSnapshot(
            queues=queues,
            schedules=schedules,
            leaders=leaders,
            taken_at=datetime.now(UTC),
            finished_at=finished_at,
        )


def _with_error(snapshot: LedgerSnapshot, error: str) -> LedgerSnapshot:
    return LedgerSnapshot(
        queues=snapshot.queues,
        schedules=snapshot.schedules,
        leaders=snapshot.leaders,
        taken_at=snapshot.taken_at,
        finished_at=snapshot.finished_at,
        error=error,
    )
