"""The worker: claim a batch → run each job → write its outcome, under leases it keeps renewed.

Threads of one worker, and what each one touches:

- the **fetch loop** (the thread that calls ``run``) claims batches up to the free capacity
  (with ``prefetch``, runner threads whose handler has returned are free at once, even while
  their outcome waits for the completer, and up to ``prefetch`` more jobs may wait claimed for a
  runner; without, a runner is free once its job's outcome is written), runs the
  rescuer every ``rescue_interval``, and sleeps on a wake-up (LISTEN/NOTIFY, an enqueue in this
  process) or a poll timeout;
- ``concurrency`` **runner** threads run handlers (async handlers on one shared event loop);
- the **completer** writes outcomes in batches: whatever finished while the previous batch was
  being written goes in the next one, so there is no added delay when idle and large batches
  under load. Every write is fenced by the lease token;
- the **heartbeat** thread renews leases that are a third through, in one statement (jobs
  claimed and waiting for a runner included).

Work never happens inside a database transaction of the claim: the claim commits first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue as queue_mod
import random
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from .._faults import fault_point
from .._records import ClaimedJob, Failure, JobState
from ..backends.base import Backend, Listener
from ..errors import (
    BackendUnavailable,
    LeaseLost,
    PayloadError,
    Permanent,
)
from ..policy import classify
from .context import JobContext, LeaseHold
from .hooks import WorkerObserver, WorkerService

if TYPE_CHECKING:
    from .._ledger import Ledger
    from .._task import Task

__all__ = ["Worker", "WorkerStats", "default_worker_name"]

log = logging.getLogger("jobledger.worker")


def default_worker_name() -> str:
    """``host:pid:random`` — unique per worker, readable in a job's attempt history."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class WorkerStats:
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
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)


@dataclass(slots=True)
class _Outcome:
    hold: LeaseHold
    done: bool
    failure: Failure | None
    duration: float


class UnknownTask(Exception):
    """A job names a task this worker does not know (not imported, or renamed)."""


class _Completer:
    """Writes outcomes in batches on its own thread ("group commit")."""

    def __init__(self, worker: Worker, max_batch: int = 1000):
        self._worker = worker
        self._max_batch = max_batch
        self._items: list[_Outcome] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._busy = False
        self._thread = threading.Thread(target=self._loop, name="jobledger-completer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, outcome: _Outcome) -> None:
        with self._cond:
            self._items.append(outcome)
            self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._items) + (1 if self._busy else 0)

    def stop(self, deadline: float) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(max(0.0, deadline - time.monotonic()))

    def _loop(self) -> None:
        backoff = 0.05
        while True:
            with self._cond:
                while not self._items and not self._stopping:
                    self._cond.wait()
                if not self._items and self._stopping:
                    return
                batch = self._items[: self._max_batch]
                del self._items[: self._max_batch]
                self._busy = True
            try:
                self._worker._write_outcomes(batch)
                backoff = 0.05
            except BackendUnavailable as exc:
                log.warning("could not write %d outcomes, will retry: %s", len(batch), exc)
                with self._cond:
                    self._items[:0] = batch
                time.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
            except Exception:  # a bug: keep the worker alive, say so loudly
                log.exception("unexpected error writing %d outcomes", len(batch))
                with self._cond:
                    self._items[:0] = batch
                time.sleep(1.0)
            finally:
                with self._cond:
                    self._busy = False


class Worker:
    """Runs the jobs of some queues until stopped (or, in burst mode, until nothing is due).

    Build one with ``ledger.worker(...)`` or run one with ``ledger.run_worker(...)``.
    """

    def __init__(
        self,
        ledger: Ledger,
        queues: Sequence[str] | None = None,
        *,
        concurrency: int = 4,
        batch_size: int = 10,
        prefetch: int = 0,
        burst: bool = False,
        name: str | None = None,
        poll_interval: float | None = None,
        rescue_interval: float | None = None,
        grace_seconds: float = 30.0,
        clock: Callable[[], datetime] | None = None,
    ):
        from .._task import validate_queue_name

        if not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be a whole number >= 1, got {concurrency!r}")
        if not isinstance(batch_size, int) or not 1 <= batch_size <= 1000:
            raise ValueError(
                f"batch_size must be a whole number from 1 to 1000, got {batch_size!r}"
            )
        if not isinstance(prefetch, int) or not 0 <= prefetch <= 10_000:
            raise ValueError(f"prefetch must be a whole number from 0 to 10000, got {prefetch!r}")
        self.ledger = ledger
        self.backend: Backend = ledger.backend
        self.queues = sorted({validate_queue_name(q) for q in (queues or ledger.queues())})
        if not self.queues:
            raise ValueError("no queues to work on: register a task or pass queues=[...]")
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.prefetch = prefetch
        self._claim_at_least = max(1, min(batch_size, concurrency + prefetch) // 2)
        self.burst = burst
        self.name = name or default_worker_name()
        listen = self.backend.supports_listen
        self.poll_interval = (
            poll_interval if poll_interval is not None else (1.0 if listen else 0.25)
        )
        self.min_poll = min(0.005, self.poll_interval)
        leases = [t.lease_seconds for t in ledger.tasks() if t.queue in self.queues] or [60.0]
        self.rescue_interval = (
            rescue_interval if rescue_interval is not None else max(0.05, min(5.0, min(leases) / 2))
        )
        self.grace_seconds = grace_seconds
        self.clock = clock
        self.stats = WorkerStats()

        self._running: dict[int, LeaseHold] = {}
        self._running_lock = threading.Lock()
        # Claimed jobs whose handler has not returned yet (waiting for a runner or running).
        # ``_running`` also holds those whose outcome the completer has not written yet.
        self._busy = 0
        self._slot_free = threading.Event()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._hard_stop = threading.Event()
        self._runnable: queue_mod.SimpleQueue[LeaseHold | None] = queue_mod.SimpleQueue()
        self._completer = _Completer(self)
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_lock = threading.Lock()
        self._listener: Listener | None = None
        self._observers: list[WorkerObserver] = list(ledger.observers)
        self._services: list[WorkerService] = []

    # -- observers -------------------------------------------------------------------------------

    def _notify(self, event: str, *args: Any) -> None:
        for observer in self._observers:
            try:
                getattr(observer, event)(self, *args)
            except Exception:  # an observer must never break the worker
                log.exception("observer %r failed in %s", observer, event)

    # -- control -----------------------------------------------------------------------------------

    def stop(self, graceful: bool = True) -> None:
        """Stop claiming. Graceful: running jobs get ``grace_seconds`` to finish. Not graceful:
        stop waiting for them (their leases expire and the rescuer hands them out again).
        Safe to call from a signal handler or another thread."""
        if not graceful:
            self._hard_stop.set()
        self._stopping.set()
        self._wake.set()
        self._slot_free.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def _now(self) -> datetime | None:
        return self.clock() if self.clock is not None else None

    def _py_now(self) -> datetime:
        return self.clock() if self.clock is not None else datetime.now(UTC)

    # -- main loop ---------------------------------------------------------------------------------

    def run(self) -> WorkerStats:
        """Run until ``stop()`` (or, with ``burst``, until nothing is due). Returns the stats."""
        self._start()
        try:
            self._fetch_loop()
        finally:
            self._shutdown()
        return self.stats

    def _start(self) -> None:
        self.ledger._register_wake(self._wake)
        # A burst worker stops once nothing is due: it has no use for wake-ups.
        self._listener = None if self.burst else self.backend.listener(self.queues)
        self._completer.start()
        for i in range(self.concurrency):
            t = threading.Thread(target=self._runner, name=f"jobledger-runner-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        hb = threading.Thread(target=self._heartbeat_loop, name="jobledger-heartbeat", daemon=True)
        hb.start()
        self._threads.append(hb)
        if self._listener is not None:
            lt = threading.Thread(target=self._listen_loop, name="jobledger-listener", daemon=True)
            lt.start()
            self._threads.append(lt)
        for factory in self.ledger.worker_services:
            service = factory(self)
            if service is not None:
                service.start()
                self._services.append(service)
        log.info(
            "worker %s started on queues %s (concurrency %d)",
            self.name,
            ",".join(self.queues),
            self.concurrency,
        )

    def _in_flight(self) -> int:
        with self._running_lock:
            return len(self._running)

    def _free(self) -> int:
        """How many jobs to claim now: runner slots (plus ``prefetch``) not taken by a handler,
        bounded so that outcomes waiting for the completer cannot pile up without limit.

        While claimed jobs still wait for a runner, a claim waits until it can take at least
        half a batch: many small claims cost the database more than a few large ones."""
        room = self.concurrency + self.prefetch
        with self._running_lock:
            if not self.prefetch:
                # Without prefetch a thread is free once its job's outcome is written: the
                # claim never overtakes the completer (a crash loses at most one job's outcome).
                return self.concurrency - len(self._running)
            free = min(room - self._busy, 2 * room - len(self._running))
            waiting = self._busy - self.concurrency
        if waiting > 0 and free < self._claim_at_least:
            return 0
        return free

    def _fetch_loop(self) -> None:
        next_rescue = 0.0
        idle_wait = self.min_poll
        failures = 0
        while not self._stopping.is_set():
            if time.monotonic() >= next_rescue:
                self._rescue()
                next_rescue = time.monotonic() + self.rescue_interval
            free = self._free()
            if free <= 0:
                self._slot_free.wait(0.5)
                self._slot_free.clear()
                continue
            want = min(self.batch_size, free)
            try:
                jobs = self.backend.jobs.claim(self.queues, self.name, want, self._now())
                failures = 0
            except BackendUnavailable as exc:
                failures += 1
                delay = min(30.0, 0.1 * 2 ** min(failures, 8)) * (0.5 + random.random() / 2)
                log.warning("claim failed (%s); retrying in %.1f s", exc, delay)
                self._stopping.wait(delay)
                continue
            self._dispatch(jobs)
            if len(jobs) == want:
                idle_wait = self.min_poll
                continue
            if self.burst:
                if jobs or self._in_flight():
                    # A job still running may yet schedule a retry that is due at once.
                    self._slot_free.wait(0.05)
                    self._slot_free.clear()
                    continue
                break
            if jobs:
                idle_wait = self.min_poll
            if self._wake.wait(idle_wait):
                self._wake.clear()
                idle_wait = self.min_poll
            else:
                idle_wait = min(idle_wait * 2, self.poll_interval)

    def _dispatch(self, jobs: list[ClaimedJob]) -> None:
        if not jobs:
            return
        self.stats.add(claimed=len(jobs))
        if self._observers:
            self._notify("on_claim", jobs)
        with self._running_lock:
            holds = []
            for job in jobs:
                hold = LeaseHold(job)
                self._running[job.id] = hold
                holds.append(hold)
            self._busy += len(holds)
        for hold in holds:
            self._runnable.put(hold)

    def _rescue(self) -> None:
        try:
            rescued = self.backend.jobs.rescue(self._now())
        except BackendUnavailable as exc:
            log.warning("rescue failed: %s", exc)
            return
        if rescued:
            self.stats.add(rescued=len(rescued))
            self._notify("on_rescue", rescued)
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

    def _listen_loop(self) -> None:
        listener = self._listener
        assert listener is not None
        try:
            while not self._stopping.is_set():
                if listener.wait(0.5):
                    self._wake.set()
        finally:
            listener.close()

    # -- running handlers --------------------------------------------------------------------------

    def _runner(self) -> None:
        while True:
            hold = self._runnable.get()
            if hold is None:
                return
            try:
                with hold.lock:
                    if hold.released:
                        continue
                    hold.started = True
                    hold.started_at = time.perf_counter()
                self._execute(hold)
            except Exception:  # never lose a runner thread to a bug
                log.exception("unexpected error running job %d", hold.job.id)
            finally:
                with self._running_lock:
                    self._busy -= 1
                    # Wake the fetch loop only when it may claim (see ``_free``), not once per
                    # job: at thousands of jobs a second the wake-ups themselves would cost.
                    wake = self.prefetch > 0 and (
                        self._busy <= self.concurrency
                        or self.concurrency + self.prefetch - self._busy >= self._claim_at_least
                    )
                if wake:
                    self._slot_free.set()

    def _execute(self, hold: LeaseHold) -> None:
        job = hold.job
        fault_point("worker.after_claim")
        ctx = JobContext(hold, self.backend, self._renew_one, self._now)
        started = hold.started_at
        failure: Failure | None = None
        try:
            task = self.ledger.get_task(job.task)
            if task is None:
                raise UnknownTask(f"no task named {job.task!r} is registered in this worker")
            try:
                task.check_payload(job.payload)
            except PayloadError as exc:
                raise Permanent(str(exc), error_class="PayloadError") from None
            if task.is_async:
                self._run_async(task, ctx, job.payload)
            else:
                task.fn(ctx, **job.payload)
        except BaseException as exc:  # noqa: BLE001 - every handler outcome is recorded
            failure = self._failure(hold, exc, task=self.ledger.get_task(job.task))
        duration = time.perf_counter() - started
        if ctx.completed and failure is None:
            self._finished([hold])
            self.stats.add(completed=1)
            self._log_outcome(hold, "done", duration, None)
            return
        if ctx.completed:
            # The transaction committed, then the handler raised: the job is done.
            self._finished([hold])
            self.stats.add(completed=1)
            self._log_outcome(hold, "done", duration, failure)
            return
        fault_point("worker.before_finish")
        self._completer.submit(_Outcome(hold, failure is None, failure, duration))

    def _run_async(self, task: Task, ctx: JobContext, payload: dict[str, Any]) -> None:
        with self._loop_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=loop.run_forever, name="jobledger-async", daemon=True
                ).start()
                self._loop = loop
        future = asyncio.run_coroutine_threadsafe(task.fn(ctx, **payload), self._loop)
        future.result()

    def _failure(self, hold: LeaseHold, exc: BaseException, task: Task | None) -> Failure:
        now = self._py_now()
        decision = classify(exc, now)
        delay = decision.delay
        if delay is None and decision.retry:
            backoff = task.backoff if task is not None else self.ledger.default_backoff
            delay = backoff.delay(hold.job.attempt)
        run_at = now + timedelta(seconds=delay or 0.0) if decision.retry else None
        grouped = decision.pause_group and hold.job.group is not None
        return Failure(
            lease=hold.lease,
            retry=decision.retry,
            run_at=run_at,
            error_class=decision.error_class,
            message=decision.message[:4000],
            traceback="".join(traceback.format_exception(exc))[-16000:],
            pause_group_until=run_at if grouped else None,
        )

    # -- writing outcomes (completer thread) ---------------------------------------------------------

    def _write_outcomes(self, batch: list[_Outcome]) -> None:
        now = self._now()
        done = [o for o in batch if o.done]
        failed = [o for o in batch if not o.done]
        stale: set[int] = set()
        if done:
            stale.update(self.backend.jobs.complete([o.hold.lease for o in done], now))
        results = (
            self.backend.jobs.fail([o.failure for o in failed if o.failure], now) if failed else []
        )
        states = {r.job_id: r.state for r in results}
        counts = {"completed": 0, "dead": 0, "retried": 0}
        # Outcome lines are built only when someone will read them, and observers hear of the
        # batch at once: at 30k jobs/s per-job records would cost more than the database writes.
        lines = log.isEnabledFor(logging.INFO)
        observed: list[tuple[ClaimedJob, str, float, str | None]] = []
        for o in batch:
            job_id = o.hold.job.id
            if o.done and job_id not in stale:
                counts["completed"] += 1
                if self._observers:
                    observed.append((o.hold.job, "done", o.duration, None))
                if lines:
                    self._outcome_line(o.hold, "done", o.duration, None)
            elif not o.done and states.get(job_id) is not None:
                outcome = "dead" if states[job_id] is JobState.DEAD else "retry"
                counts["dead" if outcome == "dead" else "retried"] += 1
                if self._observers:
                    error_class = o.failure.error_class if o.failure else None
                    observed.append((o.hold.job, outcome, o.duration, error_class))
                self._outcome_line(o.hold, outcome, o.duration, o.failure)
            else:
                self._lease_lost(o.hold, "complete" if o.done else "fail")
        if observed:
            self._notify_outcomes(observed)
        self.stats.add(**counts)
        fault_point("worker.after_finish")
        self._finished([o.hold for o in batch])

    def _lease_lost(self, hold: LeaseHold, action: str) -> None:
        """Record a refused write in the job's history, count it, and say so."""
        hold.lost = True
        self.stats.add(lease_lost=1)
        self._notify("on_lease_lost", hold.job, action)
        exc = LeaseLost(hold.job.id, hold.lease.token, action)
        log.warning(
            "%s",
            exc,
            extra={
                "job_id": hold.job.id,
                "key": hold.job.key,
                "queue": hold.job.queue,
                "attempt": hold.job.attempt,
                "outcome": "lease_lost",
            },
        )
        with contextlib.suppress(BackendUnavailable):
            self.backend.history.record_event(
                hold.job.id,
                "lease_lost",
                self.name,
                f"{action} refused: lease token of attempt {hold.job.attempt} is no longer current",
                {"attempt": hold.job.attempt, "token": hold.lease.token, "action": action},
                self._now(),
            )

    def _finished(self, holds: list[LeaseHold]) -> None:
        with self._running_lock:
            for hold in holds:
                hold.finished = True
                self._running.pop(hold.job.id, None)
        self._slot_free.set()

    def _notify_outcomes(self, outcomes: list[tuple[ClaimedJob, str, float, str | None]]) -> None:
        for observer in self._observers:
            try:
                batch = getattr(observer, "on_outcomes", None)
                if batch is not None:
                    batch(self, outcomes)
                else:  # an observer that does not subclass WorkerObserver
                    for job, outcome, duration, error_class in outcomes:
                        observer.on_outcome(self, job, outcome, duration, error_class)
            except Exception:  # an observer must never break the worker
                log.exception("observer %r failed in on_outcomes", observer)

    def _log_outcome(
        self, hold: LeaseHold, outcome: str, duration: float, failure: Failure | None
    ) -> None:
        if self._observers:
            error_class = failure.error_class if failure else None
            self._notify_outcomes([(hold.job, outcome, duration, error_class)])
        self._outcome_line(hold, outcome, duration, failure)

    def _outcome_line(
        self, hold: LeaseHold, outcome: str, duration: float, failure: Failure | None
    ) -> None:
        job = hold.job
        extra = {
            "job_id": job.id,
            "key": job.key,
            "queue": job.queue,
            "task": job.task,
            "attempt": job.attempt,
            "outcome": outcome,
            "duration": round(duration, 6),
            "error_class": failure.error_class if failure else None,
            "correlation_id": job.correlation_id,
            "worker": self.name,
        }
        if failure is None:
            log.info(
                "job %d %s/%s attempt %d: %s",
                job.id,
                job.queue,
                job.key,
                job.attempt,
                outcome,
                extra=extra,
            )
        else:
            log.warning(
                "job %d %s/%s attempt %d: %s (%s: %s)",
                job.id,
                job.queue,
                job.key,
                job.attempt,
                outcome,
                failure.error_class,
                failure.message,
                extra=extra,
            )

    # -- leases ----------------------------------------------------------------------------------

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
            elif not (hold.lost or hold.finished or hold.released):
                self._lease_lost(hold, "heartbeat")
        if renewed and self._observers:
            self._notify("on_heartbeat", renewed)

    def _renew_one(self, hold: LeaseHold) -> None:
        self._renew([hold])

    def _heartbeat_loop(self) -> None:
        # Check six times per lease period, so a lease is renewed between 1/3 and 1/2 of it.
        base = (
            min([t.lease_seconds for t in self.ledger.tasks() if t.queue in self.queues] + [6.0])
            / 6
        )
        tick = max(0.02, min(1.0, base))
        while not self._hard_stop.wait(tick):
            with self._running_lock:
                holds = list(self._running.values())
            if holds:
                tick = max(0.02, min(1.0, base, min(h.job.lease_seconds for h in holds) / 6))
            now = time.monotonic()
            # Jobs claimed and still waiting for a runner (prefetch) are renewed too: the
            # worker holds them, and their leases must not run out in the queue.
            due = [
                h
                for h in holds
                if not h.lost
                and not h.finished
                and not h.released
                and now - h.renewed_at >= h.job.lease_seconds / 3
            ]
            if not due:
                continue
            try:
                self._renew(due)
            except BackendUnavailable as exc:
                log.warning("lease renewal failed: %s", exc)

    # -- shutdown ----------------------------------------------------------------------------------

    def _shutdown(self) -> None:
        deadline = time.monotonic() + self.grace_seconds
        self.ledger._unregister_wake(self._wake)
        for service in reversed(self._services):
            try:
                service.stop()
            except Exception:
                log.exception("stopping %r failed", service)
        # Give back what was claimed but never started.
        unstarted = []
        with self._running_lock:
            for hold in self._running.values():
                with hold.lock:
                    if not hold.started:
                        hold.released = True
                        unstarted.append(hold)
        if unstarted:
            try:
                self.backend.jobs.release([h.lease for h in unstarted], self._now())
                self.stats.add(released=len(unstarted))
            except BackendUnavailable as exc:
                log.warning(
                    "could not release %d unstarted jobs (their leases will expire): %s",
                    len(unstarted),
                    exc,
                )
            self._finished(unstarted)
        # Let running handlers finish within the grace period.
        while self._in_flight() and not self._hard_stop.is_set() and time.monotonic() < deadline:
            self._slot_free.wait(0.05)
            self._slot_free.clear()
        left = self._in_flight()
        if left:
            log.warning(
                "%d jobs still running at shutdown; their leases will expire and be rescued", left
            )
        self._completer.stop(deadline=max(deadline, time.monotonic() + 5.0))
        self._hard_stop.set()
        for _ in range(self.concurrency):
            self._runnable.put(None)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        log.info("worker %s stopped: %s", self.name, self.stats)
