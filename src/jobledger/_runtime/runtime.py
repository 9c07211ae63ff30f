"""``Runtime``: what every transport shares between a claim and a written outcome.

A runtime claims (by queue, or by key for a broker's messages), holds each claimed job under a
``LeaseHold`` until its outcome is written, renews the leases it holds (the keeper), ends
attempts that run past their timeout, writes outcomes in batches (the completer, through the
one ``Recorder``), tells observers, counts, and stops cleanly: what was claimed and never
started is given back uncharged, what runs gets a grace period.

Adapters decide *how a job is delivered* — a handler on a runner thread (``Worker``), an HTTP
POST (push), a message acknowledged to a broker (``BrokerConsumer``) — and hand the result back
as a ``Finished`` item. They never decide what an outcome means.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .._faults import fault_point
from .._records import ClaimedJob, Counts, KeyClaim, waiting_seconds
from ..errors import BackendUnavailable
from ..policy import DEFAULT_BACKOFF, Backoff
from .completer import Completer
from .leases import LeaseHold, LeaseKeeper
from .outcomes import Finished, Recorder, failure, timed_out

if TYPE_CHECKING:
    from ..backends.base import Backend
    from .hooks import AttemptTracer, WorkerObserver

__all__ = ["Runtime", "WorkerStats"]

log = logging.getLogger("jobledger.worker")


@dataclass
class WorkerStats(Counts):
    """What one worker did, counted as outcomes were written."""

    claimed: int = 0
    completed: int = 0
    retried: int = 0
    dead: int = 0
    released: int = 0
    lease_lost: int = 0
    """Writes refused because the lease token was stale (heartbeats and outcomes)."""
    rescued: int = 0
    """Expired leases (of any worker) that this worker's rescuer closed."""
    timed_out: int = 0
    """Attempts that ran past their timeout and were abandoned."""


class Runtime:
    """The claim → deliver → record core of one worker, consumer or delivery loop.

    - ``backend``: the storage (a callable returning it is accepted, for a ledger that opens on
      first use);
    - ``name``: how the holder is named in attempts and leases;
    - ``observers``: ``WorkerObserver``s told of claims, outcomes, renewals and lost leases;
    - ``clock``: the ``now`` for the database (None: its own clock); tests pass one;
    - ``backoff_for(job)``: the retry backoff of a job's task or queue;
    - ``lease_seconds``: the leases this runtime expects, to pace the keeper;
    - ``grace_seconds``: how long a graceful stop waits for what is running;
    - ``tracer``: follows each attempt as a span (None: no tracing, the common case).
    """

    def __init__(
        self,
        backend: Callable[[], Backend],
        name: str,
        *,
        observers: Sequence[WorkerObserver] = (),
        clock: Callable[[], datetime] | None = None,
        backoff_for: Callable[[ClaimedJob], Backoff] = lambda job: DEFAULT_BACKOFF,
        lease_seconds: Sequence[float] = (),
        grace_seconds: float = 30.0,
        tracer: AttemptTracer | None = None,
    ):
        self._backend_of = backend
        self._backend: Backend | None = None
        self.name = name
        self.clock = clock
        self.grace_seconds = waiting_seconds(grace_seconds, "grace_seconds")
        self.tracer = tracer
        self.stats = WorkerStats()
        self._observers: list[WorkerObserver] = list(observers)
        self._backoff_for = backoff_for
        self._running: dict[int, LeaseHold] = {}
        self._running_lock = threading.Lock()
        self._stopping = threading.Event()
        self._hard_stop = threading.Event()
        self._deadline: float | None = None
        """When a graceful stop stops waiting for what runs (a ``time.monotonic()``)."""
        self._slot_free = threading.Event()
        self.recorder = Recorder(backend, name, self, self._now)
        self._completer = Completer(self._write, self._written, self._gave_up)
        self._keeper = LeaseKeeper(
            self._held, self._renew, self.time_out, self._hard_stop, lease_seconds
        )

    @property
    def backend(self) -> Backend:
        """The storage, opened on first use (and kept: a runtime runs on one backend)."""
        backend = self._backend
        if backend is None:
            backend = self._backend = self._backend_of()
        return backend

    # -- time -------------------------------------------------------------------------------------

    def _now(self) -> datetime | None:
        return self.clock() if self.clock is not None else None

    def _py_now(self) -> datetime:
        return self.clock() if self.clock is not None else datetime.now(UTC)

    # -- control ----------------------------------------------------------------------------------

    def stop(self, graceful: bool = True, *, timeout: float | None = None) -> WorkerStats:
        """Stop claiming. Graceful: what runs gets ``timeout`` seconds (default
        ``grace_seconds``) from now to finish; a later call with a shorter ``timeout`` brings the
        deadline forward. Not graceful: stop waiting for it (its leases expire and a rescuer
        hands the jobs out again). Safe to call from a signal handler or another thread."""
        if timeout is not None:
            waiting_seconds(timeout, "timeout")
        if not graceful:
            self._hard_stop.set()
        deadline = time.monotonic() + (self.grace_seconds if timeout is None else timeout)
        if self._deadline is None or deadline < self._deadline:
            self._deadline = deadline
        self._stopping.set()
        self._slot_free.set()
        return self.stats

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def start_runtime(self, renew: bool = True) -> None:
        """Start the completer and (unless ``renew`` is off: leases that outlast their
        delivery) the keeper."""
        self._completer.start()
        if renew:
            self._keeper.start()

    # -- observers (the recorder's ``Observers``) -------------------------------------------------

    def notify(self, event: str, *args: Any) -> None:
        for observer in self._observers:
            # ``ledger.observers`` also holds observers of other things (push deliveries: see
            # docs/push.md), and one need not subclass WorkerObserver: what it lacks, it skips.
            told = getattr(observer, event, None)
            if told is None:
                continue
            try:
                told(self, *args)
            except Exception:  # an observer must never break the runtime
                log.exception("observer %r failed in %s", observer, event)

    def outcomes(self, observed: list[tuple[ClaimedJob, str, float, str | None]]) -> None:
        for observer in self._observers:
            try:
                batch = getattr(observer, "on_outcomes", None)
                if batch is not None:
                    batch(self, observed)
                    continue
                # An observer that does not subclass WorkerObserver (or of push deliveries only).
                one = getattr(observer, "on_outcome", None)
                if one is not None:
                    for job, outcome, duration, error_class in observed:
                        one(self, job, outcome, duration, error_class)
            except Exception:  # an observer must never break the runtime
                log.exception("observer %r failed in on_outcomes", observer)

    def lease_lost(self, job: ClaimedJob, action: str) -> None:
        if self._observers:
            self.notify("on_lease_lost", job, action)

    def count(self, **counts: int) -> None:
        self.stats.add(**counts)

    # -- claiming ---------------------------------------------------------------------------------

    def claim(
        self,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float | None = None,
        holder: str | None = None,
    ) -> list[LeaseHold]:
        """Lease up to ``limit`` due jobs of ``queues`` and hold them (``holder`` names the
        claimant in the attempts, default the runtime's name)."""
        jobs = self.backend.jobs.claim(
            queues, holder or self.name, limit, self._now(), lease_seconds
        )
        return self.hold(jobs)

    def claim_keys(
        self, wanted: Sequence[tuple[str, str]], lease_seconds: float | None = None
    ) -> tuple[list[KeyClaim], list[LeaseHold]]:
        """Lease the jobs named by ``(queue, key)`` (a broker's messages) and hold those
        claimed; the claims say what became of each."""
        claims = self.backend.jobs.claim_keys(wanted, self.name, self._now(), lease_seconds)
        holds = self.hold([c.job for c in claims if c.job is not None])
        return claims, holds

    def hold(self, jobs: Sequence[ClaimedJob]) -> list[LeaseHold]:
        """Hold jobs this runtime claimed until their outcomes are written."""
        if not jobs:
            return []
        self.stats.add(claimed=len(jobs))
        if self._observers:
            self.notify("on_claim", jobs)
        holds = [LeaseHold(job) for job in jobs]
        with self._running_lock:
            for hold in holds:
                self._running[hold.job.id] = hold
        return holds

    def in_flight(self) -> int:
        with self._running_lock:
            return len(self._running)

    def _held(self) -> list[LeaseHold]:
        with self._running_lock:
            return list(self._running.values())

    # -- finishing --------------------------------------------------------------------------------

    def finish(self, item: Finished) -> None:
        """Hand one attempt's end to the completer (written in the next batch). The hold is
        ended from now on: a renewal refused meanwhile is the outcome's write to judge (it may
        find the job done by its own completion), not a lost lease."""
        item.hold.ended = True
        self._completer.submit(item)

    def fail(self, hold: LeaseHold, cause: BaseException | Any, duration: float) -> Finished:
        """The ``Finished`` item of a failed attempt, by the one retry policy."""
        backoff = self._backoff_for(hold.job)
        return Finished(
            hold, failure(hold.job, hold.lease, cause, backoff, self._py_now()), duration
        )

    def time_out(self, hold: LeaseHold) -> None:
        """End an attempt that ran past its timeout: no more renewals, recorded as
        ``timed_out`` (retried or dead by the budget); the fence refuses whatever its handler
        writes later."""
        with hold.lock:
            if not hold.active or hold.timeout is None:
                return
            hold.timed_out = True
            # A sync handler's thread cannot be stopped: it is given up on, in the same step
            # (its runner reads this when the handler returns, whenever that is).
            hold.orphaned = hold.future is None
        elapsed = time.monotonic() - hold.started_at
        self.stats.add(timed_out=1)
        log.error(
            "job %d %s/%s attempt %d ran past its timeout of %g s; abandoning it",
            hold.job.id,
            hold.job.queue,
            hold.job.key,
            hold.job.attempt,
            hold.timeout,
            extra={"job_id": hold.job.id, "key": hold.job.key, "queue": hold.job.queue},
        )
        self.abandon(hold)
        self.finish(self.fail(hold, timed_out(hold.timeout), elapsed))

    def abandon(self, hold: LeaseHold) -> None:
        """What a transport does with a delivery it gives up on (cancel it, free its slot)."""

    def _write(self, batch: Sequence[Finished]) -> None:
        self.recorder.write(batch)
        fault_point("worker.after_finish")

    def _written(self, batch: list[Finished]) -> None:
        if self.tracer is not None:
            for item in batch:
                if item.hold.span is not None:
                    self.tracer.ended(item)
        self.finished([item.hold for item in batch])

    def _gave_up(self, batch: list[Finished]) -> None:
        """Outcomes the completer will not write (the storage refused each, alone, again and
        again): their leases are no longer renewed, and expire; the rescuer hands the jobs out
        again, each attempt charged, as after a crashed worker."""
        if self.tracer is not None:
            for item in batch:
                if item.hold.span is not None:
                    self.tracer.given_up(item)
        self.finished([item.hold for item in batch])

    def finished(self, holds: list[LeaseHold]) -> None:
        """The outcomes of ``holds`` are written (or they were given back): let them go."""
        with self._running_lock:
            for hold in holds:
                hold.finished = True
                self._running.pop(hold.job.id, None)
        self._slot_free.set()

    # -- leases -----------------------------------------------------------------------------------

    def _renew(self, holds: list[LeaseHold]) -> None:
        if not holds:
            return
        started = time.monotonic()
        held = self.backend.jobs.heartbeat([h.lease for h in holds], self._now())
        renewed = []
        for hold in holds:
            until = held.get(hold.job.id)
            if until is not None:
                hold.lease_until = until
                hold.renewed_at = started
                renewed.append((hold.job, until))
            elif hold.active and not hold.ended:
                # (Once the outcome is handed on, a refusal may be that outcome's own write,
                # committed with its answer lost: the recorder, writing it again, tells.)
                self.recorder.lease_lost(hold, "heartbeat")
        if renewed and self._observers:
            self.notify("on_heartbeat", renewed)

    def renew_one(self, hold: LeaseHold) -> None:
        """Renew one lease now (a handler's ``ctx.heartbeat()``)."""
        self._renew([hold])

    # -- stopping ---------------------------------------------------------------------------------

    def give_back_unstarted(self) -> None:
        """Give back what was claimed and never started, uncharged."""
        unstarted = []
        with self._running_lock:
            for hold in self._running.values():
                with hold.lock:
                    if not hold.started:
                        hold.released = True
                        unstarted.append(hold)
        if unstarted:
            self.give_back(unstarted)

    def give_back(self, holds: list[LeaseHold]) -> None:
        """Give claimed jobs back at once, uncharged (never started, or not to be delivered
        now); if the database is unavailable their leases expire instead. Written by the
        recorder, as every outcome is: a give-back the fence refuses (the job was rescued and
        taken meanwhile) is a lost lease, not a release, unless it was this give-back's own
        write sent again after its answer was lost."""
        try:
            self.recorder.write([Finished(hold, released=True) for hold in holds])
        except BackendUnavailable as exc:
            log.warning(
                "could not release %d unstarted jobs (their leases will expire): %s",
                len(holds),
                exc,
            )
        self.finished(holds)

    def drain(self, deadline: float) -> None:
        """Wait until what runs has finished and its outcomes are written (or ``deadline``, a
        ``time.monotonic()``, or the deadline of ``stop(timeout=...)``, passes, or a hard stop),
        then stop the completer and the keeper."""
        while (
            self.in_flight()
            and not self._hard_stop.is_set()
            and time.monotonic() < min(deadline, self._deadline or deadline)
        ):
            self._slot_free.wait(0.05)
            self._slot_free.clear()
        left = self.in_flight()
        if left:
            log.warning(
                "%d jobs still running at shutdown; their leases will expire and be rescued", left
            )
        self._completer.stop(deadline=max(deadline, time.monotonic() + 5.0))
        self._hard_stop.set()
