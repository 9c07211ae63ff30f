"""The polling worker: the runtime's adapter that claims by queue and runs task handlers.

Threads of one worker, and what each one touches:

- the **fetch loop** (the thread that calls ``run``) claims batches up to the free capacity
  (with ``prefetch``, runner threads whose handler has returned are free at once, even while
  their outcome waits for the completer, and up to ``prefetch`` more jobs may wait claimed for a
  runner; without, a runner is free once its job's outcome is written), runs the rescuer every
  ``rescue_interval``, and sleeps on a wake-up (LISTEN/NOTIFY, an enqueue in this process) or a
  poll timeout;
- ``concurrency`` **runner** threads run sync handlers;
- async handlers run on one event loop (the worker's own, or the application's when the worker
  was started from a running event loop): the fetch loop hands each claim's async jobs to the
  loop in one call and they run there as tasks, with no thread in between. In a worker that has
  async tasks, a handler of either kind holds one of ``concurrency`` slots (counted under the
  runtime's lock) while it runs, so that the bound holds for both kinds together;
- the runtime's **completer** writes outcomes in batches and its **keeper** renews leases and
  ends attempts that run past their task's timeout (see ``jobledger._runtime.runtime``).

A sync handler that runs past its timeout cannot be stopped: its thread is abandoned (its
outcome, whenever it returns, is thrown away, and the fence refuses whatever it writes) and a
new runner takes its place. At most ``concurrency`` abandoned threads are tolerated; while that
many are still running, the worker claims nothing and says so. Async handlers are cancelled.

Work never happens inside a database transaction of the claim: the claim commits first.

A worker runs once: in the calling thread (``run``, which blocks), or in threads of its own
(``start`` / ``stop``, ``with``, ``async with``: a worker embedded in an application).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import queue as queue_mod
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import suppress
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from .._faults import fault_point
from .._host import default_worker_name
from .._records import (
    ClaimedJob,
    positive_seconds,
    validate_name,
    validate_queue_name,
    whole_number,
)
from ..errors import BackendUnavailable, ConfigError, NotFound, PayloadError, Permanent
from ..maintenance.rescuer import Rescuer
from ..policy import Backoff
from .context import JobContext
from .hooks import WorkerObserver, WorkerService
from .leases import LeaseHold
from .outcomes import returned
from .runtime import Runtime, WorkerStats

#: The most jobs one worker runs at once: each is a thread (the CLI's --concurrency too).
MAX_CONCURRENCY = 1000

if TYPE_CHECKING:
    import threading as _threading

    from .._services.queues import QueueSettingsBook
    from .._task import Task
    from ..backends.base import Backend, Listener
    from .hooks import AttemptTracer

__all__ = ["LedgerView", "UnknownTask", "Worker", "WorkerStats", "default_worker_name"]

log = logging.getLogger("jobledger.worker")

CLAIM_RETRY_CAP = 2.0
"""The longest a worker waits before it tries to claim again while the database is unavailable."""


class LedgerView(Protocol):
    """What a worker needs of its ledger (``jobledger.Ledger`` is one)."""

    @property
    def backend(self) -> Backend: ...

    default_backoff: Backoff
    observers: list[WorkerObserver]
    queue_settings: QueueSettingsBook
    worker_services: list[Callable[[Any], WorkerService | None]]

    def get_task(self, name: str) -> Task | None: ...

    def tasks(self) -> list[Task]: ...

    def queues(self) -> list[str]: ...

    def _register_wake(self, event: _threading.Event) -> None: ...

    def _unregister_wake(self, event: _threading.Event) -> None: ...

    def attempt_tracer(self) -> AttemptTracer | None: ...


class UnknownTask(Exception):
    """A job names a task this worker does not know (not imported, or renamed)."""


class Worker(Runtime):
    """Runs the jobs of some queues until stopped (or, in burst mode, until nothing is due).

    Build one with ``ledger.worker(...)`` or run one with ``ledger.run_worker(...)``. A worker
    runs once, either in the calling thread (``run()``, which blocks) or in threads of its own:

        worker = ledger.worker(["emails"], concurrency=8)
        worker.start()                      # returns once it runs
        ...
        stats = worker.stop(timeout=10)     # stop claiming, wait up to 10 s for what runs

    ``with ledger.worker(...) as worker:`` starts and stops it; so does
    ``async with ledger.worker(...) as worker:`` without blocking the event loop. A worker
    started from a running event loop (``async with``, ``await start_async()``, or ``start()``
    called in a coroutine) runs its async handlers on that loop, the application's; sync
    handlers stay on the worker's runner threads.
    """

    def __init__(
        self,
        ledger: LedgerView,
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
        # As the CLI's --concurrency: each is a thread, started when the worker starts (10**12
        # of them ran the process out of threads and memory).
        whole_number(concurrency, 1, MAX_CONCURRENCY, "concurrency")
        if name is not None:
            # Written into every job it leases and every attempt (PostgreSQL refused U+0000).
            try:
                validate_name(name, "a worker's name", 512)
            except PayloadError as exc:
                raise ConfigError(str(exc)) from None
        whole_number(batch_size, 1, 1000, "batch_size")
        whole_number(prefetch, 0, 10_000, "prefetch")
        if poll_interval is not None:
            positive_seconds(poll_interval, "poll_interval")
        self.ledger = ledger
        queues = sorted({validate_queue_name(q) for q in (queues or ledger.queues())})
        if not queues:
            raise ValueError("no queues to work on: register a task or pass queues=[...]")
        leases = [t.lease_seconds for t in ledger.tasks() if t.queue in queues] or [60.0]
        super().__init__(
            lambda: ledger.backend,
            name or default_worker_name(),
            observers=ledger.observers,
            clock=clock,
            backoff_for=self._backoff,
            lease_seconds=leases,
            grace_seconds=grace_seconds,
            tracer=ledger.attempt_tracer(),
        )
        self.queues = queues
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.prefetch = prefetch
        self._claim_at_least = max(1, min(batch_size, concurrency + prefetch) // 2)
        self.burst = burst
        listen = self.backend.supports_listen
        self.poll_interval = (
            poll_interval if poll_interval is not None else (1.0 if listen else 0.25)
        )
        self.min_poll = min(0.005, self.poll_interval)
        self.rescue_interval = (
            rescue_interval if rescue_interval is not None else max(0.05, min(5.0, min(leases) / 2))
        )
        self.rescuer = Rescuer(
            lambda: ledger.backend, self.rescue_interval, self._rescued, self._now
        )
        # Claimed jobs whose handler has not returned yet (waiting for a runner or running).
        # ``_running`` (the runtime's) also holds those whose outcome is not written yet.
        self._busy = 0
        self._abandoned = 0
        """Runner threads still inside a handler that ran past its timeout."""
        self._wake = threading.Event()
        self._runnable: queue_mod.SimpleQueue[LeaseHold | None] = queue_mod.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._runners = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_lock = threading.Lock()
        # Async handlers run as tasks of the loop, with no runner thread in between. In a worker
        # that has async tasks, a handler of either kind holds one of ``concurrency`` slots
        # while it runs, so that the bound holds for both kinds together; a worker of sync tasks
        # only needs none (its runner threads are the bound).
        self._direct_async = any(t.is_async for t in ledger.tasks() if t.queue in queues)
        # The slots are counted under the runtime's lock, which a handler's end takes anyway
        # (``_returned``): a semaphore of its own cost the sync jobs of such a worker a third
        # more CPU at 32 threads, from contention on its lock.
        self._slots_free = concurrency
        self._sync_waiting = 0
        """Runner threads waiting for a slot (both under ``_running_lock``)."""
        self._slot_taken = threading.Condition(self._running_lock)
        self._loop_waiting: deque[LeaseHold] = deque()
        """Async jobs handed to the loop that wait for a slot (only the loop's thread takes)."""
        self._listener: Listener | None = None
        self._owns_loop = True
        """Whether ``_loop`` is the worker's own (stopped with it) or the application's."""
        self._services: list[WorkerService] = []
        self._queue_timeouts: dict[str, float | None] = {}
        self._control = threading.Lock()
        self._began = False
        self._run_thread: threading.Thread | None = None
        """The thread of the fetch loop: the caller's (``run``) or the worker's (``start``)."""
        self._background: threading.Thread | None = None
        self._started: Future[None] = Future()
        self._finished: Future[WorkerStats] = Future()
        # Running futures cannot be cancelled: an awaiting task that is cancelled (an
        # ``asyncio.wrap_future`` of them) must not cancel the worker's own record of its run.
        self._started.set_running_or_notify_cancel()
        self._finished.set_running_or_notify_cancel()
        self._ended = threading.Event()
        self._stop_events: list[threading.Event] = []

    def _backoff(self, job: ClaimedJob) -> Backoff:
        task = self.ledger.get_task(job.task)
        return task.backoff if task is not None else self.ledger.default_backoff

    def _timeout_of(self, task: Task, queue: str) -> float | None:
        """The task's ``timeout``, else its declared queue's ``timeout_seconds``, else none."""
        if task.timeout is not None:
            return task.timeout
        return self._queue_timeouts.get(queue)

    def _read_queue_timeouts(self) -> None:
        """The declared queues' timeouts (a default for tasks without their own), read at most
        every 30 s by the fetch loop."""
        timeouts = {}
        for queue in self.queues:
            try:
                timeouts[queue] = self.ledger.queue_settings.get(queue).settings.timeout_seconds
            except NotFound:
                continue
            except BackendUnavailable:
                return  # kept as they were; looked at again next time
        self._queue_timeouts = timeouts

    # -- control -----------------------------------------------------------------------------------

    def stop(self, graceful: bool = True, *, timeout: float | None = None) -> WorkerStats:
        """Stop claiming, give back what was claimed and has not started, and let what runs
        finish until ``timeout`` seconds from now (default ``grace_seconds``). Not graceful:
        stop waiting for what runs. What still runs after the deadline is left to its lease:
        not renewed, it expires and the rescuer hands the job out again (an async handler on
        the application's event loop is cancelled).

        For a worker started with ``start()`` this waits until the worker has stopped and
        returns its stats (raising what ended it, if it failed); otherwise (``run()`` in another
        thread, or a call from one of the worker's own threads or from the event loop its async
        handlers run on, which it must not block) it returns at once. Safe to call from a signal
        handler or any thread, and more than once (a shorter ``timeout`` brings the deadline
        forward)."""
        super().stop(graceful, timeout=timeout)
        self._wake.set()
        if self._background is None or not self._may_wait():
            return self.stats
        return self._finished.result()

    async def stop_async(
        self, graceful: bool = True, *, timeout: float | None = None
    ) -> WorkerStats:
        """``stop()`` for async code: waits for a worker started with ``start()`` or
        ``start_async()`` without blocking the event loop."""
        Runtime.stop(self, graceful, timeout=timeout)
        self._wake.set()
        if self._background is None:
            return self.stats
        return await asyncio.wrap_future(self._finished)

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> Worker:
        """Run in threads of the worker's own; return once it runs (raising what stopped it from
        starting). Stop it with ``stop()``.

        Async handlers run on ``loop`` (a running event loop of the application's, in another
        thread), by default on the loop running in the calling thread (``start()`` called in a
        coroutine; there ``await start_async()`` does not block the loop while the worker
        starts), else on an event loop of the worker's own."""
        self._begin(loop or _running_loop())
        self._started.result()
        return self

    async def start_async(self) -> Worker:
        """Start in threads of the worker's own without blocking the event loop; its async
        handlers run on this loop. Stop it with ``await stop_async()``."""
        self._begin(asyncio.get_running_loop())
        await asyncio.wrap_future(self._started)
        return self

    def join(self, timeout: float | None = None) -> WorkerStats:
        """Wait until a worker started with ``start()`` has stopped (by ``stop()``, or by
        itself in burst mode) and return its stats; ``TimeoutError`` if it still runs after
        ``timeout`` seconds."""
        if self._background is None:
            raise RuntimeError("join() is for a worker started with start()")
        return self._finished.result(timeout)

    @property
    def running(self) -> bool:
        """Started (by ``start()`` or ``run()``) and not yet stopped."""
        return (
            self._started.done() and self._started.exception() is None and not self._ended.is_set()
        )

    def __enter__(self) -> Worker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> Worker:
        return await self.start_async()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop_async()

    def stop_when(self, event: threading.Event) -> None:
        """Stop gracefully (as ``stop()``) once ``event`` is set: a worker running in a thread
        that cannot call ``stop()`` itself (``ledger.run_worker(stop=event)``)."""
        self._stop_events.append(event)

    def _watch(self, event: threading.Event) -> None:
        while not event.wait(0.1):
            if self._ended.is_set():
                return
        Runtime.stop(self)
        self._wake.set()

    def _begin(self, loop: asyncio.AbstractEventLoop | None) -> None:
        with self._control:
            if self._began:
                raise RuntimeError(
                    "this worker was started already (a worker runs once: build another with "
                    "ledger.worker(...))"
                )
            self._began = True
            if loop is not None:
                self._loop, self._owns_loop = loop, False
            self._background = threading.Thread(
                target=self._run_in_background, name="jobledger-worker", daemon=True
            )
        self._background.start()

    def _run_in_background(self) -> None:
        try:
            stats = self.run()
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for the worker
            if not self._started.done():
                self._started.set_exception(exc)
            self._finished.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            log.error("worker %s failed", self.name, exc_info=exc)
        else:
            if not self._started.done():
                self._started.set_result(None)
            self._finished.set_result(stats)

    def _may_wait(self) -> bool:
        """Whether the calling thread may wait for the worker to stop: it is none of the
        worker's own threads (a handler or an observer that stops its worker), nor the event
        loop the worker's async handlers run on."""
        me = threading.current_thread()
        if me is self._run_thread or me in self._threads:
            return False
        if me is self._completer.thread or me is self._keeper.thread:
            return False
        if self._loop is not None and _running_loop() is self._loop:
            log.warning(
                "worker %s: stop() called on the event loop its async handlers run on; it "
                "cannot wait there without blocking them: use `await worker.stop_async()`",
                self.name,
            )
            return False
        return True

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
        with self._control:
            me = threading.current_thread()
            if self._run_thread is not None or (self._began and me is not self._background):
                raise RuntimeError(
                    "this worker was started already (a worker runs once: build another with "
                    "ledger.worker(...))"
                )
            self._began = True
            self._run_thread = me
        self.ledger._register_wake(self._wake)
        for event in self._stop_events:
            threading.Thread(
                target=self._watch, args=(event,), name="jobledger-stop-when", daemon=True
            ).start()
        # A burst worker stops once nothing is due: it has no use for wake-ups.
        self._listener = None if self.burst else self.backend.listener(self.queues)
        self.start_runtime()
        for _ in range(self.concurrency):
            self._add_runner()
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
        if not self._started.done():
            self._started.set_result(None)

    def _add_runner(self) -> None:
        self._runners += 1
        t = threading.Thread(
            target=self._runner, name=f"jobledger-runner-{self._runners}", daemon=True
        )
        t.start()
        self._threads.append(t)

    def _free(self) -> int:
        """How many jobs to claim now: runner slots (plus ``prefetch``) not taken by a handler,
        bounded so that outcomes waiting for the completer cannot pile up without limit.

        While claimed jobs still wait for a runner, a claim waits until it can take at least
        half a batch: many small claims cost the database more than a few large ones. While
        ``concurrency`` abandoned handlers still run past their timeout, nothing is claimed."""
        room = self.concurrency + self.prefetch
        with self._running_lock:
            if self._abandoned >= self.concurrency:
                return 0
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
        next_rescue = next_timeouts = 0.0
        idle_wait = self.min_poll
        failures = 0
        warned_stuck = False
        rewound = False  # burst: the last empty claim looked from the start of every queue
        while not self._stopping.is_set():
            if time.monotonic() >= next_rescue:
                self._rescue()
                next_rescue = time.monotonic() + self.rescue_interval
            if time.monotonic() >= next_timeouts:
                self._read_queue_timeouts()
                next_timeouts = time.monotonic() + 30.0
            free = self._free()
            if free <= 0:
                if self._abandoned >= self.concurrency and not warned_stuck:
                    warned_stuck = True
                    log.error(
                        "worker %s: %d handler threads are still running past their timeout; "
                        "claiming nothing until one returns (restart the worker to end them)",
                        self.name,
                        self._abandoned,
                    )
                self._slot_free.wait(0.5)
                self._slot_free.clear()
                continue
            warned_stuck = False
            want = min(self.batch_size, free)
            try:
                jobs = self.claim(self.queues, want)
                failures = 0
            except BackendUnavailable as exc:
                failures += 1
                # Capped at 2 s: an unavailable database answers at once (the backends fail
                # fast), so looking again costs nothing, and the worker claims again within
                # about 2 s of the database's return.
                delay = min(CLAIM_RETRY_CAP, 0.1 * 2 ** min(failures, 5)) * (
                    0.5 + random.random() / 2
                )
                log.warning("claim failed (%s); retrying in %.1f s", exc, delay)
                self._stopping.wait(delay)
                continue
            self._dispatch(jobs)
            if jobs:
                rewound = False
            if len(jobs) == want:
                idle_wait = self.min_poll
                continue
            if self.burst:
                if jobs or self.in_flight():
                    # A job still running may yet schedule a retry that is due at once.
                    self._slot_free.wait(0.05)
                    self._slot_free.clear()
                    continue
                if not rewound and self.backend.jobs.rewind():
                    # Nothing from where the claims had got to: look once more from the start
                    # of every queue (a job put ahead of the position by another process or
                    # by hand) before saying that nothing is due.
                    rewound = True
                    continue
                break
            if jobs:
                idle_wait = self.min_poll
            if self._wake.wait(idle_wait):
                self._wake.clear()
                idle_wait = self.min_poll
            else:
                idle_wait = min(idle_wait * 2, self.poll_interval)

    def _dispatch(self, holds: list[LeaseHold]) -> None:
        if not holds:
            return
        with self._running_lock:
            self._busy += len(holds)
        if not self._direct_async:
            for hold in holds:
                self._runnable.put(hold)
            return
        on_loop = []
        for hold in holds:
            task = self.ledger.get_task(hold.job.task)
            if task is not None and task.is_async:
                on_loop.append(hold)
            else:
                self._runnable.put(hold)
        if on_loop:
            # One hand-over to the loop per claim, not one per job.
            try:
                self._event_loop().call_soon_threadsafe(self._loop_take, on_loop)
            except RuntimeError:  # the application closed its loop: to the runner threads,
                # whose hand-over fails in turn, recorded as each attempt's failure
                for hold in on_loop:
                    self._runnable.put(hold)

    def _rescue(self) -> None:
        try:
            self.rescuer.run_once()
        except BackendUnavailable as exc:
            log.warning("rescue failed: %s", exc)

    def _rescued(self, rescued: list[Any]) -> None:
        self.stats.add(rescued=len(rescued))
        self.notify("on_rescue", rescued)

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
        slots = self._direct_async
        while True:
            hold = self._runnable.get()
            if hold is None:
                return
            if slots:
                self._take_slot()
            try:
                if not hold.start():
                    continue
                self._execute(hold)
            except Exception:  # never lose a runner thread to a bug
                log.exception("unexpected error running job %d", hold.job.id)
                self._let_go(hold)
            finally:
                abandoned = hold.orphaned  # set only with timed_out, under the hold's lock
                # (An abandoned handler's slot was freed when it was abandoned.)
                self._returned(abandoned, slot=slots and not abandoned)
                if slots and not abandoned:
                    self._wake_loop()
            if abandoned:
                return

    def _let_go(self, hold: LeaseHold) -> None:
        """After a bug between a claim and the hand-over of its attempt's outcome: no outcome
        will be written, so the lease is no longer renewed either (the worker would have held
        the job for as long as it ran, and a burst never ended). It expires, and the rescuer
        hands the job out again with the attempt charged, as after a crashed worker."""
        if hold.ended or hold.finished:
            return  # its outcome is with the completer, or written
        log.error(
            "job %d %s/%s attempt %d: no outcome will be written; its lease is left to expire",
            hold.job.id,
            hold.job.queue,
            hold.job.key,
            hold.job.attempt,
            extra={"job_id": hold.job.id, "key": hold.job.key, "queue": hold.job.queue},
        )
        self.finished([hold])

    def _take_slot(self) -> None:
        """A runner thread's wait for one of ``concurrency`` slots (a worker with async tasks)."""
        with self._running_lock:
            while self._slots_free <= 0:
                self._sync_waiting += 1
                self._slot_taken.wait()
                self._sync_waiting -= 1
            self._slots_free -= 1

    def _slot_freed(self) -> None:
        """Under ``_running_lock``: a slot is free again; a runner thread waiting for one gets
        it."""
        self._slots_free += 1
        if self._sync_waiting:
            self._slot_taken.notify()

    def _wake_loop(self) -> None:
        """A slot was freed off the loop: async jobs waiting for one are started on the loop."""
        loop = self._loop
        if self._loop_waiting and loop is not None:
            with suppress(RuntimeError):  # the application's loop is closed
                loop.call_soon_threadsafe(self._loop_start)

    def _returned(self, abandoned: bool, slot: bool = False) -> None:
        """A handler returned (or its job was given back before it started): its place is free,
        and its ``slot`` if it held one."""
        with self._running_lock:
            if slot:
                self._slot_freed()
            if abandoned:
                # Its slot was given to a new runner when it timed out: this thread has served
                # its turn.
                self._abandoned -= 1
                wake = True
            else:
                self._busy -= 1
                # Wake the fetch loop only when it may claim (see ``_free``), not once per job:
                # at thousands of jobs a second the wake-ups would cost.
                wake = self.prefetch > 0 and (
                    self._busy <= self.concurrency
                    or self.concurrency + self.prefetch - self._busy >= self._claim_at_least
                )
        # ``set`` takes the event's lock and wakes its waiters even when it is set already:
        # only the first runner after the fetch loop cleared it sets it.
        if wake and not self._slot_free.is_set():
            self._slot_free.set()

    def _execute(self, hold: LeaseHold) -> None:
        """Run one attempt in this runner thread (an async handler on the loop, waited for)."""
        ctx, traced, task, error = self._before(hold)
        value: Any = None
        if task is not None:
            try:
                if task.is_async:
                    value = self._run_async(task, ctx, hold)
                else:
                    value = task.fn(ctx, **hold.job.payload)
            except BaseException as exc:  # noqa: BLE001 - every handler outcome is recorded
                error = exc
        store = self._after(hold, ctx, traced, value, error)
        if store is not None:
            store()

    def _before(
        self, hold: LeaseHold
    ) -> tuple[JobContext, object, Task | None, BaseException | None]:
        """What comes before a handler runs: its context, its span, its task (or why it cannot
        run: an unknown task, a payload its signature refuses) and its timeout."""
        fault_point("worker.after_claim")
        ctx = JobContext(hold, self._backend or self.backend, self.renew_one, self._now)
        tracer = self.tracer
        traced = tracer.start(hold, self.name) if tracer is not None else None
        job = hold.job
        try:
            task = self.ledger.get_task(job.task)
            if task is None:
                raise UnknownTask(f"no task named {job.task!r} is registered in this worker")
            try:
                task.check_payload(job.payload)
            except PayloadError as exc:
                raise Permanent(str(exc), error_class="PayloadError") from None
        except BaseException as exc:  # noqa: BLE001 - recorded as the attempt's outcome
            return ctx, traced, None, exc
        hold.timeout = self._timeout_of(task, job.queue)
        return ctx, traced, task, None

    def _after(
        self,
        hold: LeaseHold,
        ctx: JobContext,
        traced: object,
        value: Any,
        error: BaseException | None,
    ) -> Callable[[], None] | None:
        """What follows a handler's return: its span ends; then nothing more if the attempt
        was recorded as timed out meanwhile; else its outcome goes to the completer, or, when
        it completed its job in its own transaction, what stores that is returned (database
        work, which the caller runs off the event loop)."""
        if self.tracer is not None:
            self.tracer.returned(hold, traced, error)
        if hold.timeout is not None and not self._returned_in_time(hold):
            return None
        if ctx.completed:
            return functools.partial(self._completed_in_handler, hold, ctx, value, error)
        duration = time.monotonic() - hold.started_at
        fault_point("worker.before_finish")
        self.finish(
            returned(hold, value, duration) if error is None else self.fail(hold, error, duration)
        )
        return None

    def _returned_in_time(self, hold: LeaseHold) -> bool:
        """For an attempt with a timeout: False if it was recorded as timed out already (what
        its handler did is not its outcome); otherwise it is no longer subject to its timeout."""
        with hold.lock:
            if hold.timed_out:
                late = time.monotonic() - hold.started_at - (hold.timeout or 0.0)
                log.warning(
                    "job %d %s/%s attempt %d: the handler returned %.1f s after its "
                    "timeout; its outcome is discarded",
                    hold.job.id,
                    hold.job.queue,
                    hold.job.key,
                    hold.job.attempt,
                    late,
                )
                return False
            hold.timeout = None  # returned in time: no longer subject to its timeout
        return True

    def _completed_in_handler(
        self, hold: LeaseHold, ctx: JobContext, value: Any, error: BaseException | None
    ) -> None:
        """The handler completed its job in its own transaction (whatever it raised
        afterwards): what it returned is stored now, and that is its outcome."""
        duration = time.monotonic() - hold.started_at
        item = returned(hold, value if error is None else None, duration)
        self.recorder.completed_in_transaction(hold, duration, item)
        if self.tracer is not None and hold.span is not None:
            item.outcome = "done"
            self.tracer.ended(item)
        self.finished([hold])

    # -- async handlers on the event loop ----------------------------------------------------------

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        """The loop async handlers run on: the application's, else the worker's own (started on
        first use)."""
        with self._loop_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=loop.run_forever, name="jobledger-async", daemon=True
                ).start()
                self._loop = loop
            return self._loop

    def _loop_take(self, holds: list[LeaseHold]) -> None:
        """On the loop: start what ``concurrency`` allows of a claim's async jobs, the rest as
        those running end."""
        self._loop_waiting.extend(holds)
        self._loop_start()

    def _loop_start(self) -> None:
        waiting, loop = self._loop_waiting, self._loop
        assert loop is not None
        with self._running_lock:
            n = min(len(waiting), self._slots_free)
            self._slots_free -= n
        for _ in range(n):
            loop.create_task(self._run_on_loop(waiting.popleft()))

    async def _run_on_loop(self, hold: LeaseHold) -> None:
        """One attempt of an async handler, as a task of the loop (no runner thread)."""
        try:
            if not hold.start(asyncio.current_task()):
                return
            ctx, traced, task, error = self._before(hold)
            value: Any = None
            if task is not None:
                try:
                    value = await task.fn(ctx, **hold.job.payload)
                except BaseException as exc:  # noqa: BLE001 - every handler outcome is recorded
                    error = exc
            store = self._after(hold, ctx, traced, value, error)
            if store is not None:  # database work: on a thread, not on the loop
                await asyncio.get_running_loop().run_in_executor(None, store)
        except Exception:  # never lose a slot of the loop to a bug
            log.exception("unexpected error running job %d", hold.job.id)
            self._let_go(hold)
        finally:
            self._returned(False, slot=True)
            # A runner thread waiting for a slot gets this one: without this, a steady stream
            # of async jobs would keep sync ones waiting (it starts the loop's when it ends).
            if not self._sync_waiting:
                self._loop_start()

    def _run_async(self, task: Task, ctx: JobContext, hold: LeaseHold) -> Any:
        """An async handler that reached a runner thread (its task was registered after the
        worker started, or for another queue): run on the loop, the thread waiting for it."""
        loop = self._event_loop()
        run = task.fn(ctx, **hold.job.payload)
        try:
            future = asyncio.run_coroutine_threadsafe(run, loop)
        except BaseException:  # the loop is closed: the coroutine will never run
            run.close()
            raise
        with hold.lock:
            hold.future = future
            late = hold.timed_out
        if late:  # it timed out before it was handed to the loop
            future.cancel()
        return future.result()

    def abandon(self, hold: LeaseHold) -> None:
        """A timed-out attempt: cancel an async handler; for a sync one, give its slot to a new
        runner thread (at most ``concurrency`` abandoned threads; then the worker stops
        claiming until one returns)."""
        if not hold.orphaned:
            _cancel(hold.future)
            return
        with self._running_lock:
            self._busy -= 1
            self._abandoned += 1
            if self._direct_async:
                self._slot_freed()
        if self._direct_async:
            self._wake_loop()
        if not self._stopping.is_set():
            self._add_runner()
        self._slot_free.set()

    # -- shutdown ----------------------------------------------------------------------------------

    def _shutdown(self) -> None:
        try:
            self._stop_everything()
        finally:
            self._ended.set()

    def _stop_everything(self) -> None:
        deadline = self._deadline or time.monotonic() + self.grace_seconds
        self.ledger._unregister_wake(self._wake)
        for service in reversed(self._services):
            try:
                service.stop()
            except Exception:
                log.exception("stopping %r failed", service)
        self.give_back_unstarted()
        self.drain(deadline)
        for _ in range(self._runners):
            self._runnable.put(None)
        if self._loop is not None and self._owns_loop:
            self._loop.call_soon_threadsafe(self._loop.stop)
        elif self._loop is not None:
            # The application's loop runs on: async handlers still running past the deadline
            # are cancelled there (their outcome is not written; their leases expire).
            for hold in self._held():
                _cancel(hold.future)
        log.info("worker %s stopped: %s", self.name, self.stats)


def _cancel(future: Future[Any] | asyncio.Task[Any] | None) -> None:
    """Cancel an async handler's run, from any thread (a task of the loop on its loop)."""
    if isinstance(future, asyncio.Task):
        future.get_loop().call_soon_threadsafe(future.cancel)
    elif future is not None:
        future.cancel()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, if any."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
