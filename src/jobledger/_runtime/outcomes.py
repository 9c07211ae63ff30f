"""What an attempt came to, and the one place where that gets its meaning and is written.

Every transport ends an attempt the same way: a **finished** item names the lease and says
``done``, ``failed`` (with the ``Failure`` that ``failure`` built by the one retry policy) or
``released`` (given back unstarted, not charged). The ``Recorder`` writes a batch of them,
fenced by their lease tokens, and says what each became — ``done``, ``retry``, ``dead``,
``timed_out`` (a failure of its own kind: retried or dead by the budget), ``released`` or
``lease_lost`` — in one line of log, one call to the observers, and one count. A write the
fence refused is recorded in the job's history as a ``lease_lost`` event.
"""

from __future__ import annotations

import contextlib
import logging
import traceback as _traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from .._records import ClaimedJob, Failure, JobState, Lease, encode_result, time_after
from ..errors import BackendUnavailable, LeaseLost
from ..policy import Backoff, Decision, classify

if TYPE_CHECKING:
    from ..backends.base import Backend
    from .leases import LeaseHold

__all__ = ["Finished", "Recorder", "failure", "returned", "timed_out"]

log = logging.getLogger("jobledger.worker")

#: A failure's attempt, found closed under its own token (``Recorder._own_writes``): the job's
#: state that this failure (retried, or dead) or the handler's own transaction (done) left.
_FAILURE_CAME_TO = {"retry": JobState.PENDING, "dead": JobState.DEAD, "done": JobState.DONE}

MAX_MESSAGE = 4000
#: An error's class as recorded (a class's name, ``HTTP 429``, or what a ``Retry`` or
#: ``Permanent`` names): longer ones are cut here, as a message is at ``MAX_MESSAGE``.
MAX_ERROR_CLASS = 255
MAX_TRACEBACK = 16000


def failure(
    job: ClaimedJob,
    lease: Lease,
    cause: BaseException | Decision,
    backoff: Backoff,
    now: datetime | None = None,
    rng: Callable[[], float] | None = None,
) -> Failure:
    """The failure of one attempt, by the one retry policy (SPEC §3), whatever the transport.

    ``cause`` is what went wrong: a handler's exception (classified by ``policy.classify``:
    ``Retry``, ``Permanent``, an HTTP status carried by the exception, or anything else,
    transient) or a ``Decision`` already made from an HTTP answer, a consumer's nack or a
    timeout. A retry runs after the decision's delay, else after ``backoff`` for this attempt,
    its jitter drawn from ``rng`` (None: ``random.random``), and never later than the latest
    time the ledger keeps (``LATEST_TIME``: a ``Retry-After`` of 10**20 seconds is recorded as
    a wait until then); a decision to pause the group pauses it until then.
    """
    now = now or datetime.now(UTC)
    if isinstance(cause, Decision):
        decision, trace = cause, None
    else:
        decision = _classified(cause, now)
        trace = "".join(_traceback.format_exception(cause))[-MAX_TRACEBACK:]
    run_at = None
    if decision.retry:
        delay = decision.delay if decision.delay is not None else backoff.delay(job.attempt, rng)
        run_at = time_after(now, delay)
    return Failure(
        lease=lease,
        retry=decision.retry,
        run_at=run_at,
        error_class=decision.error_class[:MAX_ERROR_CLASS],
        message=decision.message[:MAX_MESSAGE],
        traceback=trace,
        pause_group_until=run_at if decision.pause_group and job.group is not None else None,
        timed_out=decision.timed_out,
    )


def _classified(cause: BaseException, now: datetime) -> Decision:
    """``classify(cause)``, or, when what the handler raised cannot be read as an outcome (an
    outcome made around its own checks, an exception whose response cannot be read), a
    transient failure that says so: the attempt's outcome is always written, never left to a
    lease that its worker keeps renewing."""
    try:
        return classify(cause, now)
    except Exception as exc:
        log.warning("the outcome %r could not be read: %r; a transient failure", cause, exc)
        name = type(cause).__qualname__
        return Decision(True, None, name, f"{name} (its outcome could not be read: {exc!r})")


def timed_out(seconds: float) -> Decision:
    """The decision for an attempt that ran past its task's timeout: a transient failure of its
    own kind (the attempt's outcome is ``timed_out``), retried by the backoff."""
    return Decision(
        True,
        None,
        "Timeout",
        f"the attempt ran past its timeout of {seconds:g} s and was abandoned",
        timed_out=True,
    )


@dataclass(slots=True)
class Finished:
    """One attempt's end, as a transport hands it to the recorder.

    ``failure`` None and ``released`` False: done, with ``result`` (the JSON text of what the
    handler returned, None for None: see ``returned``). ``released``: given back unstarted, not
    charged. ``on_recorded(item, outcome)`` is told what it became (on the thread that wrote
    it), for a transport that acts on it (a broker consumer acks, push reports the delivery).
    """

    hold: LeaseHold
    failure: Failure | None = None
    duration: float | None = None
    released: bool = False
    on_recorded: Callable[[Finished, str], None] | None = None
    result: str | None = None
    result_dropped: str | None = None
    """Why the handler's return value is not stored (it is not JSON, or too large): the job is
    done all the same, with a null result, and its history says why."""
    action: str | None = None
    """What a refused write is called in the history and the stale-token count, when the
    transport names it (a pull consumer's ``ack`` or ``nack``); else ``complete``, ``fail`` or
    ``release``."""
    outcome: str = field(default="", init=False)
    """What the recorder made of it: ``done``, ``retry``, ``dead``, ``timed_out``,
    ``released`` or ``lease_lost``."""
    refusals: int = field(default=0, init=False)
    """Writes of this item alone that failed with an error that is no outage (the
    completer's count: past ``TRIES_ALONE`` it gives the item up)."""

    @property
    def job(self) -> ClaimedJob:
        return self.hold.job


def returned(hold: LeaseHold, value: Any, duration: float | None = None) -> Finished:
    """The ``Finished`` item of an attempt whose handler returned ``value``: done, with the
    value to store as its result. A value that cannot be stored (``encode_result``) does not
    fail the attempt — its effect happened, it must not run again — it is dropped, and the
    recorder says so (a warning naming the task, and a ``result_dropped`` event)."""
    item = Finished(hold, None, duration)
    if value is not None:
        try:
            item.result = encode_result(value)
        except ValueError as exc:
            item.result_dropped = f"the handler's return value was not stored: {exc}"
    return item


class Observers(Protocol):
    """Who hears of outcomes: the runtime's observers (``WorkerObserver``) and its counts."""

    def outcomes(self, observed: list[tuple[ClaimedJob, str, float, str | None]]) -> None: ...

    def lease_lost(self, job: ClaimedJob, action: str) -> None: ...

    def count(self, **counts: int) -> None: ...


class Recorder:
    """Writes finished attempts, fenced by their tokens, and tells everyone what they became.

    ``holder`` names the worker, consumer or delivery loop in the history; ``clock`` gives the
    ``now`` for the database (None: its own clock).
    """

    def __init__(
        self,
        backend: Callable[[], Backend],
        holder: str,
        observers: Observers,
        clock: Callable[[], datetime | None] = lambda: None,
    ):
        self._backend_of = backend
        self.holder = holder
        self.observers = observers
        self.clock = clock

    @property
    def backend(self) -> Backend:
        return self._backend_of()

    def write(self, batch: Sequence[Finished]) -> None:
        """Write one batch in as few statements as the storage allows (``BackendUnavailable``
        leaves every item to be written again)."""
        now = self.clock()
        backend = self.backend
        done = [f for f in batch if f.failure is None and not f.released]
        failed = [f for f in batch if f.failure is not None]
        released = [f for f in batch if f.released]
        stale: set[int] = set()
        if done:
            stale.update(self._complete(backend, done, now))
        states: dict[int, JobState | None] = {}
        if failed:
            results = backend.jobs.fail([f.failure for f in failed if f.failure is not None], now)
            states = {r.job_id: r.state for r in results}
        if released:
            stale.update(backend.jobs.release([f.hold.lease for f in released], now))
        refused = [
            f
            for f in batch
            if (f.hold.job.id in stale if f.failure is None else states.get(f.hold.job.id) is None)
        ]
        if refused:
            self._own_writes(backend, refused, stale, states)
        counts = {"completed": 0, "dead": 0, "retried": 0, "released": 0}
        # Outcome lines are built only when someone reads them, and observers hear of the
        # batch at once: at 30k jobs/s per-job records would cost more than the writes.
        lines = log.isEnabledFor(logging.INFO)
        observed: list[tuple[ClaimedJob, str, float, str | None]] = []
        for item in batch:
            job_id = item.hold.job.id
            if item.released:
                item.outcome = "lease_lost" if job_id in stale else "released"
                if item.outcome == "released":
                    counts["released"] += 1
            elif item.failure is None or states.get(job_id) is JobState.DONE:
                # Done; or a failure whose attempt its handler's own transaction completed
                # (ctx.transaction), the commit's answer lost: done by this attempt all the same.
                item.outcome = "lease_lost" if job_id in stale else "done"
                if item.outcome == "done":
                    counts["completed"] += 1
                    observed.append((item.hold.job, "done", item.duration or 0.0, None))
                    if lines:
                        self._line(item, None)
                    if item.result_dropped is not None:
                        self.result_dropped(item.hold, item.result_dropped)
            else:
                state = states.get(job_id)
                if state is None:
                    item.outcome = "lease_lost"
                else:
                    dead = state is JobState.DEAD
                    outcome = "dead" if dead else "retry"
                    counts["dead" if dead else "retried"] += 1
                    observed.append(
                        (item.hold.job, outcome, item.duration or 0.0, item.failure.error_class)
                    )
                    item.outcome = "timed_out" if item.failure.timed_out else outcome
                    self._line(item, item.failure, outcome)
            if item.outcome == "lease_lost":
                action = item.action or (
                    "release" if item.released else "complete" if item.failure is None else "fail"
                )
                self.lease_lost(item.hold, action)
        if observed:
            self.observers.outcomes(observed)
        self.observers.count(**counts)
        for item in batch:
            if item.on_recorded is not None:
                try:
                    item.on_recorded(item, item.outcome)
                except Exception:  # a transport's callback must never lose the others
                    log.exception("handling the outcome of job %d failed", item.hold.job.id)

    @staticmethod
    def _own_writes(
        backend: Backend,
        refused: list[Finished],
        stale: set[int],
        states: dict[int, JobState | None],
    ) -> None:
        """Take back the refusals of writes that were these leases' own.

        A batch whose commit lost its answer (the server went away at the commit, or failed
        over to a replica that had it) is written again, and the fence refuses each write of
        it: its job is no longer leased — because this write is already there. An attempt
        closed under its own token, as this item would have closed it, was closed by this
        write: it counts as written (nobody else holds the token; the rescuer closes an
        attempt as ``lease_expired``), not as a lost lease. A failure whose attempt is closed
        ``done`` under its token is a handler whose own transaction completed the job
        (``ctx.transaction``) and lost the commit's answer, then raised it: done."""
        settled = backend.jobs.settled([f.hold.lease for f in refused])
        for item in refused:
            job_id = item.hold.job.id
            came_to = settled.get(job_id)
            if item.released or item.failure is None:
                if came_to == ("released" if item.released else "done"):
                    stale.discard(job_id)
            elif came_to in _FAILURE_CAME_TO:
                states[job_id] = _FAILURE_CAME_TO[came_to]

    def _complete(self, backend: Backend, done: list[Finished], now: datetime | None) -> list[int]:
        """Complete the done items (with their results); the ids whose lease was stale.

        Results cost nothing when no handler of the batch returned one. Should the database
        refuse the results (it never should: ``encode_result`` checks them), the jobs are
        completed without: a batch that kept failing would run their handlers again."""
        leases = [f.hold.lease for f in done]
        results = {f.hold.lease.job_id: f.result for f in done if f.result is not None}
        if not results:
            return backend.jobs.complete(leases, now)
        try:
            return backend.jobs.complete(leases, now, results=results)
        except BackendUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - the jobs are done whatever their results
            log.exception("the database refused the results of %d jobs", len(results))
            for f in done:
                if f.result is not None:
                    f.result = None
                    f.result_dropped = (
                        f"the handler's return value was not stored: the database refused "
                        f"it ({type(exc).__name__})"
                    )
            return backend.jobs.complete(leases, now)

    def completed_in_transaction(
        self, hold: LeaseHold, duration: float, item: Finished | None = None
    ) -> None:
        """A handler completed its job in the ledger's transaction (``ctx.transaction()``):
        store what it returned (``item``, from ``returned``: the completion committed before the
        handler returned), count it, tell the observers and log it as any completion."""
        item = item or Finished(hold, None, duration)
        backend = self.backend
        try:
            # Also for no result where waiters are told: the telling waited for this write.
            if item.result is not None or backend.supports_listen:
                backend.jobs.store_result(hold.lease, item.result)
        except BackendUnavailable as exc:
            if item.result is not None:
                item.result_dropped = (
                    f"the handler's return value was not stored: the database was "
                    f"unavailable ({exc})"
                )
        self.observers.count(completed=1)
        self.observers.outcomes([(hold.job, "done", duration, None)])
        if log.isEnabledFor(logging.INFO):
            self._line(item, None)
        if item.result_dropped is not None:
            self.result_dropped(hold, item.result_dropped)

    def result_dropped(self, hold: LeaseHold, why: str) -> None:
        """A job is done but what its handler returned is not stored: say so in the log and in
        its history (a ``result_dropped`` event)."""
        job = hold.job
        log.warning(
            "job %d %s/%s (task %s) is done, and its result is null: %s",
            job.id,
            job.queue,
            job.key,
            job.task,
            why,
            extra={"job_id": job.id, "key": job.key, "queue": job.queue, "task": job.task},
        )
        with contextlib.suppress(BackendUnavailable):
            self.backend.history.record_event(
                job.id,
                "result_dropped",
                self.holder,
                why,
                {"attempt": job.attempt},
                self.clock(),
            )

    def lease_lost(self, hold: LeaseHold, action: str, actor: str | None = None) -> None:
        """Record a refused write in the job's history, count it, and say so."""
        hold.lost = True
        job = hold.job
        self.observers.count(lease_lost=1)
        self.observers.lease_lost(job, action)
        exc = LeaseLost(job.id, hold.lease.token, action)
        log.warning(
            "%s",
            exc,
            extra={
                "job_id": job.id,
                "key": job.key,
                "queue": job.queue,
                "attempt": job.attempt,
                "outcome": "lease_lost",
            },
        )
        with contextlib.suppress(BackendUnavailable):
            self.backend.history.record_event(
                job.id,
                "lease_lost",
                actor or self.holder,
                f"{action} refused: lease token of attempt {job.attempt} is no longer current",
                {"attempt": job.attempt, "token": hold.lease.token, "action": action},
                self.clock(),
            )

    def _line(self, item: Finished, failure: Failure | None, outcome: str = "done") -> None:
        job = item.hold.job
        shown = "timed_out" if failure is not None and failure.timed_out else outcome
        extra: dict[str, Any] = {
            "job_id": job.id,
            "key": job.key,
            "queue": job.queue,
            "task": job.task,
            "attempt": job.attempt,
            "outcome": shown,
            "duration": round(item.duration or 0.0, 6),
            "error_class": failure.error_class if failure else None,
            "correlation_id": job.correlation_id,
            "worker": self.holder,
        }
        head = f"job {job.id} {job.queue}/{job.key} attempt {job.attempt}: {shown}"
        if failure is None:
            log.info("%s", head, extra=extra)
        else:
            detail = f"{failure.error_class}: {failure.message}"
            if failure.timed_out:
                detail += f" -> {outcome}"
            log.warning("%s (%s)", head, detail, extra=extra)
