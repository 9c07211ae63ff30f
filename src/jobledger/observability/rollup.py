"""Per-minute rollups of what workers and consumers did, for the dashboard's charts.

A ``MinuteStatsRecorder`` is a worker observer that adds up, in memory, per minute, queue and
task: claims and their wait (seconds from a job's run time to its claim), and outcomes (done,
retried, dead) with their run time. A flusher thread writes what accumulated every few seconds
in one upsert per row (``ledger.minute_stats.add``), so neither the claim nor the completion
path gains a statement, and the dashboard reads an hour of throughput from at most 60 rows per
queue and task. Every worker and server writes its own share; the rows add up.

Workers built by ``ledger.worker()`` and ``ledger.run_worker()`` get one (``install_rollups``).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .._records import MinuteStats
from .._runtime.hooks import WorkerObserver
from ..errors import JobledgerError
from ..maintenance.rollups import RollupFlusher

if TYPE_CHECKING:
    from .._records import ClaimedJob
    from .._runtime.runtime import Runtime
    from .._services.stats import MinuteStatsBook
    from .host import ObservedLedger

__all__ = ["MinuteStatsRecorder", "install_rollups", "rollups_of"]

log = logging.getLogger("jobledger.observability")

#: How long rollups are kept; older rows are deleted by the writers.
#: Counts not written after this long (the database was down) are dropped, not kept forever.
MAX_BACKLOG_MINUTES = 120


def claim_wait(job: ClaimedJob) -> float:
    """Seconds from when ``job`` was due to its claim, both by the database's clock (the claim
    set ``lease_until`` to its time plus the lease)."""
    wait = (job.lease_until - job.run_at).total_seconds() - job.lease_seconds
    return wait if wait > 0.0 else 0.0  # (not max(): this runs once per claimed job)


_ZEROS = {f.name: f.default for f in dataclasses.fields(MinuteStats)}


class _Sums:
    """One minute, queue and task, being added up (mutable, unlike ``MinuteStats``)."""

    __slots__ = FIELDS = (
        "claimed",
        "wait_sum",
        "wait_max",
        "done",
        "retried",
        "dead",
        "run_count",
        "run_sum",
        "run_max",
    )

    def __init__(self) -> None:
        # Each starts at the record's zero, of its type (counts int, seconds float): a flush
        # writes many rows in one statement, whose columns PostgreSQL takes as arrays of one
        # type each.
        for name in self.FIELDS:
            setattr(self, name, _ZEROS[name])

    def add(self, values: dict[str, Any]) -> None:
        for name, value in values.items():
            if name.endswith("_max"):
                setattr(self, name, max(getattr(self, name), value))
            else:
                setattr(self, name, getattr(self, name) + value)


class MinuteStatsRecorder(WorkerObserver):
    """Adds up claims and outcomes per minute, queue and task until a flusher writes them."""

    def __init__(self, clock: Callable[[], float] = time.time):
        self._clock = clock
        self._lock = threading.Lock()
        self._rows: dict[tuple[int, str, str], _Sums] = {}

    def _add(self, minute: int, queue: str, task: str, values: dict[str, Any]) -> None:
        ident = (minute, queue, task)
        with self._lock:
            sums = self._rows.get(ident)
            if sums is None:
                sums = self._rows[ident] = _Sums()
            sums.add(values)

    def _minute(self) -> int:
        return int(self._clock() // 60) * 60

    # -- what workers and consumers tell it ----------------------------------------------------

    def claimed(self, jobs: Sequence[ClaimedJob]) -> None:
        # Added up per queue and task first: one row update per batch, not one per job. A
        # batch shares its claim time, and jobs enqueued together their run time: a wait is
        # worked out again only where the job before had other times (or queue, or task).
        minute = self._minute()
        waits: dict[tuple[str, str], list[float]] = {}
        queue = task = run_at = until = lease = None
        values: list[float] = []
        wait = 0.0
        for job in jobs:
            if job.queue != queue or job.task != task:
                queue, task = job.queue, job.task
                values = waits.setdefault((queue, task), [])
            if job.run_at != run_at or job.lease_until != until or job.lease_seconds != lease:
                run_at, until, lease = job.run_at, job.lease_until, job.lease_seconds
                wait = claim_wait(job)
            values.append(wait)
        for (queue, task), values in waits.items():
            self._add(
                minute,
                queue,
                task,
                {"claimed": len(values), "wait_sum": sum(values), "wait_max": max(values)},
            )

    def finished(self, queue: str, task: str, outcome: str, duration: float | None) -> None:
        self._finished(queue, task, outcome, 1, [] if duration is None else [duration])

    def _finished(
        self, queue: str, task: str, outcome: str, count: int, durations: list[float]
    ) -> None:
        field = {"done": "done", "retry": "retried", "dead": "dead"}.get(outcome)
        if field is None:
            return
        values: dict[str, Any] = {field: count}
        if durations:
            runs = [d if d > 0.0 else 0.0 for d in durations]
            values.update(run_count=len(runs), run_sum=sum(runs), run_max=max(runs))
        self._add(self._minute(), queue, task, values)

    def on_claim(self, worker: Runtime, jobs: Sequence[ClaimedJob]) -> None:
        self.claimed(jobs)

    def on_outcomes(
        self, worker: Runtime, outcomes: Sequence[tuple[ClaimedJob, str, float, str | None]]
    ) -> None:
        durations: dict[tuple[str, str, str], list[float]] = {}
        for job, outcome, duration, _ in outcomes:
            durations.setdefault((job.queue, job.task, outcome), []).append(duration)
        for (queue, task, outcome), values in durations.items():
            self._finished(queue, task, outcome, len(values), values)

    # -- writing ---------------------------------------------------------------------------------

    def take(self) -> list[MinuteStats]:
        """What accumulated since the last take, as rows; the recorder starts again from zero."""
        with self._lock:
            taken, self._rows = self._rows, {}
        return [
            MinuteStats(
                datetime.fromtimestamp(minute, UTC),
                queue,
                task,
                **{name: getattr(sums, name) for name in _Sums.FIELDS},
            )
            for (minute, queue, task), sums in taken.items()
        ]

    def put_back(self, rows: Sequence[MinuteStats]) -> None:
        """Rows a flush could not write: merged back, those older than the backlog dropped."""
        horizon = self._clock() - MAX_BACKLOG_MINUTES * 60
        for row in rows:
            minute = int(row.minute.timestamp())
            if minute >= horizon:
                values = {name: getattr(row, name) for name in _Sums.FIELDS}
                self._add(minute, row.queue, row.task, values)

    def flush(self, store: MinuteStatsBook) -> int:
        """Write what accumulated; keep it for the next flush if the database is unavailable.
        Returns the rows written, or -1 when the write failed. (Old rollups are deleted by the
        pruner, ``jobledger.maintenance.pruner``.)"""
        rows = self.take()
        if rows:
            try:
                store.add(rows)
            except JobledgerError as exc:
                self.put_back(rows)
                log.warning("could not write %d per-minute stats rows: %s", len(rows), exc)
                return -1
        return len(rows)


def install_rollups(ledger: ObservedLedger, interval: float = 5.0) -> MinuteStatsRecorder:
    """Give ``ledger``'s workers a recorder (an observer) and a flusher (a worker service).
    Idempotent: a ledger has at most one recorder."""
    existing = rollups_of(ledger)
    if existing is not None:
        return existing
    recorder = MinuteStatsRecorder()
    ledger.observers.append(recorder)

    def flusher(worker: Runtime) -> RollupFlusher:
        return RollupFlusher(recorder, ledger.minute_stats, interval)

    flusher.recorder = recorder  # type: ignore[attr-defined]
    ledger.worker_services.append(flusher)
    return recorder


def rollups_of(ledger: ObservedLedger) -> MinuteStatsRecorder | None:
    """The recorder installed on ``ledger``, if any."""
    for observer in ledger.observers:
        if isinstance(observer, MinuteStatsRecorder):
            return observer
    return None
