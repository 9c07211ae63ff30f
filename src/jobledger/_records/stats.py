"""What the ledger reports about its queues: counts, live depths and per-minute rollups."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime

__all__ = ["Counts", "MinuteStats", "QueueDepth", "QueueStats"]


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counts for one queue at one moment."""

    queue: str
    counts: dict[str, int] = field(default_factory=dict)
    oldest_due_pending_seconds: float | None = None
    """Age of the oldest pending job whose run time has passed; None when there is none."""
    late_pending: int = 0
    """Pending jobs due longer ago than the objective given to ``Stats.queues``."""
    lease_expiries_last_hour: int = 0
    attempts: dict[str, int] = field(default_factory=dict)
    """Attempts made so far by the jobs in each state (``attempts["done"] / counts["done"]`` is
    the attempts per completed job)."""


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """The live jobs of one queue, read without touching finished ones (``Stats.depths``)."""

    queue: str
    pending: int = 0
    due: int = 0
    """Pending jobs whose run time has passed: a worker could take them now."""
    leased: int = 0
    expired_leases: int = 0
    """Leased jobs whose lease has run out: the holder is gone or stalled; a rescuer will act."""
    dead: int = 0
    oldest_due_pending_seconds: float | None = None
    """Age of the oldest due pending job (now minus its run time); None when none is due."""


@dataclass(frozen=True, slots=True)
class MinuteStats:
    """What the workers and consumers of one queue and task did in one minute (rolled up)."""

    minute: datetime
    queue: str
    task: str
    claimed: int = 0
    wait_sum: float = 0.0
    """Seconds from due (run time) to claim, summed over ``claimed`` claims."""
    wait_max: float = 0.0
    done: int = 0
    retried: int = 0
    dead: int = 0
    run_count: int = 0
    """Outcomes whose run time was measured (Python workers'; a pull consumer's is unknown)."""
    run_sum: float = 0.0
    """Seconds the handlers ran, summed over ``run_count`` attempts."""
    run_max: float = 0.0


@dataclass
class Counts:
    """A set of counters that several threads add to (a worker's, a consumer's, a relay's
    stats): subclasses declare the counters as ``int`` fields."""

    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)
