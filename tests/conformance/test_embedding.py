"""A worker embedded in an application: started and stopped from code, sync and async, a graceful
stop with a deadline, async handlers on the application's event loop, ``run_worker`` stopped
from code — on every backend."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from jobledger import AttemptOutcome, Backoff, JobState, Ledger

from ..support.processes import wait_until
from ..support.waiting import TIME_SLICE_MS, Patience, metered, slowdown

QUICK = Backoff(base=0.01, cap=0.01, jitter=False)


def _outcomes(ledger: Ledger, job_id: int) -> list[AttemptOutcome | None]:
    return [a.outcome for a in ledger.history(job_id).attempts]


def _done(ledger: Ledger, ids: list[int]) -> int:
    return sum(ledger.job(i).state is JobState.DONE for i in ids)


def test_start_returns_at_once_and_stop_returns_the_stats(ledger):
    ran = []
    ledger.task(lambda ctx, n: ran.append(n), name="t", queue="e")
    worker = ledger.worker(["e"], concurrency=2, poll_interval=0.05)
    assert not worker.running
    assert worker.start() is worker
    assert worker.running
    ids = [ledger.enqueue("t", {"n": n}, key=f"k{n}")[0] for n in range(20)]
    wait_until(lambda: _done(ledger, ids) == 20, what="20 jobs done", progress=lambda: len(ran))
    stats = worker.stop(timeout=10)
    assert not worker.running
    assert stats.completed == 20 and stats is worker.stats
    assert worker.stop() is stats, "stop is idempotent"
    assert worker.join() is stats
    assert sorted(ran) == list(range(20))
    with pytest.raises(RuntimeError, match="started already"):
        worker.start()


def test_stop_from_another_thread_and_from_a_handler(ledger):
    worker = ledger.worker(["e"], concurrency=1, poll_interval=0.05)

    @ledger.task(queue="e")
    def stops_its_worker(ctx) -> None:
        # A handler's thread is the worker's own: stop() must not wait there (it would wait
        # for this very handler).
        worker.stop()

    job_id, _ = ledger.enqueue(stops_its_worker, {}, key="k")
    worker.start()
    stats = worker.join(timeout=60)
    assert stats.completed == 1 and ledger.job(job_id).state is JobState.DONE
    assert not worker.running

    other = ledger.worker(["e"], concurrency=1, poll_interval=0.05).start()
    results = []
    stopper = threading.Thread(target=lambda: results.append(other.stop()))
    stopper.start()
    stopper.join(60)
    assert results == [other.stats] and not other.running


def test_a_burst_worker_started_in_the_background_stops_by_itself(ledger):
    ledger.task(lambda ctx, n: None, name="t", queue="e")
    ids = [ledger.enqueue("t", {"n": n}, key=f"k{n}")[0] for n in range(30)]
    worker = ledger.worker(["e"], burst=True).start()
    stats = worker.join(timeout=120)
    assert stats.completed == 30 and _done(ledger, ids) == 30 and not worker.running


def test_with_starts_and_stops(ledger):
    ran = []
    ledger.task(lambda ctx: ran.append(ctx.key), name="t", queue="e")
    with ledger.worker(["e"], poll_interval=0.05) as worker:
        assert worker.running
        job_id, _ = ledger.enqueue("t", {}, key="k")
        wait_until(lambda: ledger.job(job_id).state is JobState.DONE, what="the job done")
    assert not worker.running and worker.stats.completed == 1 and ran == ["k"]


def test_stop_with_a_deadline_gives_back_what_waits_and_leaves_what_runs_to_its_lease(ledger):
    """A handler runs past the stop's deadline: stop returns at the deadline; the job that was
    claimed and had not started is given back uncharged; the one still running keeps its lease,
    and its late outcome is not written. A later worker rescues it and runs it again; its effect,
    recorded by the first attempt, is not repeated, and the given-back job runs once."""
    let_go, entered, returned = threading.Event(), threading.Event(), threading.Event()
    effects: list[str] = []

    @ledger.task(queue="e", lease_seconds=30, backoff=QUICK)
    def send(ctx, hold: bool) -> None:
        if hold and ctx.attempt == 1:
            entered.set()
            let_go.wait(120)
        ctx.once("sent", effects.append, ctx.key)
        if ctx.attempt == 1:
            returned.set()

    slow, _ = ledger.enqueue(send, {"hold": True}, key="slow", priority=10)
    waiting, _ = ledger.enqueue(send, {"hold": False}, key="waiting")
    # One runner, and room for one more claimed job to wait for it.
    worker = ledger.worker(["e"], concurrency=1, prefetch=1, poll_interval=0.05).start()
    try:
        assert entered.wait(60), "the slow job did not start"
        wait_until(lambda: ledger.job(waiting).state is JobState.LEASED, what="the second claim")
        stats = worker.stop(timeout=0.2)
        assert not worker.running
        assert stats.released == 1 and stats.completed == 0
        row = ledger.job(waiting)
        assert row.state is JobState.PENDING and row.budget_left == row.max_attempts
        assert _outcomes(ledger, waiting) == [AttemptOutcome.RELEASED]
        row = ledger.job(slow)
        assert row.state is JobState.LEASED and row.leased_by == worker.name
        # The handler returns after the deadline: its effect is recorded (its lease is still
        # its own), its outcome is not written (the worker has stopped).
        let_go.set()
        assert returned.wait(60)
        assert effects == ["slow"]
        assert ledger.job(slow).state is JobState.LEASED
    finally:
        let_go.set()
        worker.stop()

    # Another host, whose clock is past the lease, rescues the job and runs both.
    later = ledger.worker(
        ["e"], burst=True, clock=lambda: datetime.now(UTC) + timedelta(minutes=2)
    ).start()
    stats = later.join(timeout=120)
    assert stats.rescued == 1 and stats.completed == 2
    assert _outcomes(ledger, slow) == [AttemptOutcome.LEASE_EXPIRED, AttemptOutcome.DONE]
    assert _outcomes(ledger, waiting) == [AttemptOutcome.RELEASED, AttemptOutcome.DONE]
    assert sorted(effects) == ["slow", "waiting"], "each effect happened once"
    assert worker.stats.lease_lost == 0


def test_a_second_stop_brings_the_deadline_forward(ledger):
    let_go, entered = threading.Event(), threading.Event()

    @ledger.task(queue="e")
    def hangs(ctx) -> None:
        entered.set()
        let_go.wait(120)

    ledger.enqueue(hangs, {}, key="k")
    worker = ledger.worker(["e"], concurrency=1, poll_interval=0.05).start()
    try:
        assert entered.wait(60)
        first = threading.Thread(target=worker.stop, kwargs={"timeout": 3600})
        first.start()
        wait_until(lambda: worker.stopping, what="the first stop")
        worker.stop(timeout=0)  # returns once the worker stopped: long before an hour
        assert not worker.running
        first.join(60)
        assert not first.is_alive()
    finally:
        let_go.set()


def test_a_bad_timeout_is_refused(ledger):
    ledger.task(lambda ctx: None, name="t", queue="e")
    worker = ledger.worker(["e"])
    with pytest.raises(ValueError, match="timeout must be"):
        worker.stop(timeout=-1)


# -- async --------------------------------------------------------------------------------------


def test_async_handlers_run_on_the_apps_loop_and_the_worker_never_blocks_it(ledger):
    """While the worker drains a few hundred jobs, async handlers run on the loop that started
    it and sync ones on runner threads; the loop's ticks are never late by more than 20 ms (in
    machine time: scaled by the machine's slowdown at that moment)."""
    seen_loops: list[asyncio.AbstractEventLoop] = []
    sync_threads: list[str] = []

    @ledger.task(queue="a")
    async def on_loop(ctx, n: int) -> None:
        seen_loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0)

    @ledger.task(queue="a")
    def on_thread(ctx, n: int) -> None:
        sync_threads.append(threading.current_thread().name)

    n_async, n_sync = 300, 100
    ledger.enqueue_many(on_loop, [{"payload": {"n": n}, "key": f"a{n}"} for n in range(n_async)])
    ledger.enqueue_many(on_thread, [{"payload": {"n": n}, "key": f"s{n}"} for n in range(n_sync)])
    tick = 0.005
    late: list[tuple[float, float]] = []  # (how late a tick was, the slowdown then)

    async def main() -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        patience = Patience(30, lambda: len(seen_loops) + len(sync_threads))
        async with ledger.worker(["a"], concurrency=8) as worker:
            assert worker.running
            while len(seen_loops) + len(sync_threads) < n_async + n_sync:
                assert not patience.expired(), patience.describe()
                before = time.monotonic()
                await asyncio.sleep(tick)
                late.append((time.monotonic() - before - tick, slowdown()))
        assert not worker.running
        assert worker.stats.completed == n_async + n_sync
        return loop

    loop, meter = metered(lambda: asyncio.run(main()))
    assert len(seen_loops) == n_async and all(seen is loop for seen in seen_loops)
    assert len(sync_threads) == n_sync
    assert all(name.startswith("jobledger-runner") for name in sync_threads)
    worst = max(late, key=lambda lag: lag[0] / max(lag[1], meter.factor()))
    # Plus one scheduler time slice (another process holding the core) and one interpreter
    # switch interval (a runner thread holding the GIL the loop's thread asks for): waits
    # that are not the loop being blocked by the worker.
    allowance = TIME_SLICE_MS / 1000 + sys.getswitchinterval()
    bound = 0.020 * max(worst[1], meter.factor()) + allowance
    assert worst[0] <= bound, (
        f"the loop was blocked {worst[0] * 1000:.0f} ms at a slowdown of {worst[1]:.1f} "
        f"(bound {bound * 1000:.0f} ms, {len(late)} ticks)"
    )


class _Overlap:
    """How many handlers run at once, and at most; they hold on until ``release`` is set."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = self.most = self.ran = 0
        self.release = threading.Event()
        self.runs_as: set[str] = set()
        """What the async handlers ran as: the qualified names of their tasks' coroutines."""

    async def held(self) -> None:
        """An async handler's body: run until released."""
        self.runs_as.add(asyncio.current_task().get_coro().__qualname__)  # type: ignore[union-attr]
        self.enter()
        try:
            while not self.release.is_set():
                await asyncio.sleep(0.002)
        finally:
            self.leave()

    def enter(self) -> None:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)

    def leave(self) -> None:
        with self.lock:
            self.running -= 1
            self.ran += 1

    def check_bound(self, bound: int, ids: list[int], ledger: Ledger) -> None:
        """Once ``bound`` handlers run and every job is claimed (handed to the worker), no more
        start while a window of 0.5 machine seconds passes; then all are let go and end."""
        try:
            wait_until(lambda: self.running >= bound, what=f"{bound} handlers running")
            wait_until(
                lambda: all(ledger.job(i).state is JobState.LEASED for i in ids),
                what="all claimed",
            )
            patience = Patience(0.5)
            while not patience.expired() and self.running <= bound:
                time.sleep(0.005)
            running = self.running
            assert running <= bound, f"{running} handlers ran at once (bound {bound})"
        finally:
            self.release.set()
        wait_until(
            lambda: _done(ledger, ids) == len(ids), what="all done", progress=lambda: self.ran
        )
        assert self.most == bound


def test_a_worker_of_async_tasks_runs_them_on_its_loop_at_most_concurrency_at_once(ledger):
    """Every task of the worker's queues is a coroutine: its jobs run as tasks of the loop (no
    runner thread waits for each), and ``concurrency`` still bounds how many run at once."""
    overlap = _Overlap()

    @ledger.task(queue="a")
    async def held(ctx, n: int) -> None:
        await overlap.held()

    jobs = [{"payload": {"n": n}, "key": f"a{n}"} for n in range(40)]
    ids = [r.id for r in ledger.enqueue_many(held, jobs)]
    with ledger.worker(["a"], concurrency=4, batch_size=40, prefetch=40, poll_interval=0.05):
        overlap.check_bound(4, ids, ledger)
    assert overlap.runs_as == {"Worker._run_on_loop"}


def test_a_stop_gives_back_the_async_jobs_that_wait_for_the_loop(ledger):
    """Claimed async jobs waiting for a free place on the loop are given back at a stop,
    uncharged, as those waiting for a runner thread are."""
    overlap = _Overlap()

    @ledger.task(queue="a", lease_seconds=30)
    async def held(ctx, n: int) -> None:
        await overlap.held()

    jobs = [{"payload": {"n": n}, "key": f"a{n}"} for n in range(5)]
    ids = [r.id for r in ledger.enqueue_many(held, jobs)]
    worker = ledger.worker(["a"], concurrency=1, batch_size=5, prefetch=5, poll_interval=0.05)
    worker.start()
    wait_until(lambda: overlap.running == 1, what="one running")
    wait_until(lambda: all(ledger.job(i).state is JobState.LEASED for i in ids), what="claimed")
    stopping = threading.Thread(target=worker.stop, kwargs={"timeout": 60})
    stopping.start()
    try:
        wait_until(
            lambda: sum(ledger.job(i).state is JobState.PENDING for i in ids) == 4,
            what="the 4 waiting jobs given back",
        )
    finally:
        overlap.release.set()
        stopping.join(60)
    assert overlap.ran == 1, "a job given back was run"
    assert worker.stats.released == 4 and worker.stats.completed == 1
    states = sorted(ledger.job(i).state.value for i in ids)
    assert states == ["done"] + ["pending"] * 4
    given_back = [ledger.job(i) for i in ids if ledger.job(i).state is JobState.PENDING]
    assert all(j.attempt_limit == j.max_attempts + 1 for j in given_back), "uncharged"


def test_a_worker_of_both_kinds_bounds_them_together(ledger):
    """Sync and async tasks in one worker: its async handlers run as tasks of the loop too, and
    ``concurrency`` bounds the handlers of both kinds together."""
    overlap = _Overlap()

    @ledger.task(queue="m")
    async def held_async(ctx, n: int) -> None:
        await overlap.held()

    @ledger.task(queue="m")
    def held_sync(ctx, n: int) -> None:
        overlap.enter()
        try:
            overlap.release.wait(60)
        finally:
            overlap.leave()

    ids = []
    for task in (held_async, held_sync):
        jobs = [{"payload": {"n": n}, "key": f"{task.name}{n}"} for n in range(6)]
        ids += [r.id for r in ledger.enqueue_many(task, jobs)]
    with ledger.worker(["m"], concurrency=3, batch_size=12, prefetch=12, poll_interval=0.05):
        overlap.check_bound(3, ids, ledger)
    assert overlap.runs_as == {"Worker._run_on_loop"}


def test_a_stream_of_async_jobs_does_not_keep_a_sync_one_waiting(ledger):
    """In a worker of both kinds whose slots async handlers hold, with many async jobs waiting
    for one, a sync job claimed later gets the next slot an async handler frees: it starts
    within the first few async jobs, not after all of them."""
    starts: list[str] = []
    gate = threading.Event()

    @ledger.task(queue="f")
    def late(ctx) -> None:
        starts.append("sync")

    @ledger.task(queue="f")
    async def many(ctx, n: int) -> None:
        starts.append("async")
        while not gate.is_set():  # the first two hold both slots until the sync job waits
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.002)

    # 30 claimed at once: few enough for the worker to claim again while they wait (``_free``).
    jobs = [{"payload": {"n": n}, "key": f"a{n}"} for n in range(30)]
    ids = [r.id for r in ledger.enqueue_many(many, jobs)]
    ids.append(ledger.enqueue(late, {}, key="s", delay=0.3).id)
    worker = ledger.worker(["f"], concurrency=2, batch_size=100, prefetch=100, poll_interval=0.05)
    with worker:
        try:
            wait_until(lambda: worker._sync_waiting == 1, what="the sync job waiting for a slot")
        finally:
            gate.set()
        wait_until(lambda: _done(ledger, ids) == 31, what="all done", progress=lambda: len(starts))
    assert starts[:2] == ["async", "async"]
    assert "sync" in starts[:6], f"the sync job started after {starts.index('sync')} async ones"


def test_an_async_job_after_the_apps_loop_closed_fails_and_the_worker_runs_on(ledger):
    """The application closed the loop its worker runs async handlers on: an async job fails
    (the hand-over to the loop is refused) instead of ending the worker; sync jobs still run."""

    @ledger.task(queue="c", max_attempts=1)
    async def on_loop(ctx) -> None:
        pass

    ledger.task(lambda ctx: None, name="plain", queue="c")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    worker = ledger.worker(["c"], concurrency=2, poll_interval=0.05)
    worker.start(loop=loop)
    try:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()
        a = ledger.enqueue(on_loop, {}, key="a").id
        wait_until(lambda: ledger.job(a).state is JobState.DEAD, what="the async job failed")
        assert "closed" in (ledger.job(a).last_error or "")
        b = ledger.enqueue("plain", {}, key="b").id
        wait_until(lambda: ledger.job(b).state is JobState.DONE, what="a sync job done after it")
        assert worker.running
    finally:
        worker.stop(timeout=5)


def test_an_async_handler_on_the_apps_loop_is_cancelled_at_its_timeout(ledger):
    @ledger.task(queue="a", timeout=0.3, lease_seconds=5, backoff=QUICK)
    async def sleepy(ctx) -> None:
        if ctx.attempt == 1:
            try:
                await asyncio.sleep(120)
            except asyncio.CancelledError:
                cancelled_on.append(asyncio.get_running_loop())
                raise

    cancelled_on: list[asyncio.AbstractEventLoop] = []
    job_id, _ = ledger.enqueue(sleepy, {}, key="k")

    async def main() -> asyncio.AbstractEventLoop:
        async with ledger.worker(["a"], concurrency=1, poll_interval=0.05) as worker:
            patience = Patience(30, lambda: worker.stats.completed + worker.stats.timed_out)
            while worker.stats.completed < 1:
                assert not patience.expired(), patience.describe()
                await asyncio.sleep(0.01)
        return asyncio.get_running_loop()

    loop = asyncio.run(main())
    assert cancelled_on == [loop]
    assert _outcomes(ledger, job_id) == [AttemptOutcome.TIMED_OUT, AttemptOutcome.DONE]


def test_stop_async_waits_without_blocking_and_cancels_what_runs_past_the_deadline(ledger):
    @ledger.task(queue="a", lease_seconds=30)
    async def hangs(ctx) -> None:
        entered.set()
        try:
            await asyncio.sleep(120)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    job_id, _ = ledger.enqueue(hangs, {}, key="k")

    async def main() -> None:
        worker = ledger.worker(["a"], concurrency=1, poll_interval=0.05)
        await worker.start_async()
        patience = Patience(30)
        while not entered.is_set():
            assert not patience.expired(), patience.describe()
            await asyncio.sleep(0.01)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        probe = asyncio.create_task(ticker())
        stats = await worker.stop_async(timeout=0.5)
        probe.cancel()
        assert ticks > 0, "the loop kept running while the worker drained"
        assert stats.completed == 0 and not worker.running
        patience = Patience(30)
        while not cancelled.is_set():
            assert not patience.expired(), patience.describe()
            await asyncio.sleep(0.01)

    entered, cancelled = asyncio.Event(), asyncio.Event()
    asyncio.run(main())
    # Its outcome is not written: the lease expires and the rescuer hands the job out again.
    row = ledger.job(job_id)
    assert row.state is JobState.LEASED and row.attempts == 1


# -- run_worker -----------------------------------------------------------------------------------


def test_run_worker_is_stopped_by_its_stop_event(ledger):
    ledger.task(lambda ctx, n: None, name="t", queue="r")
    ids = [ledger.enqueue("t", {"n": n}, key=f"k{n}")[0] for n in range(10)]
    stop = threading.Event()

    def stop_when_done() -> None:
        wait_until(lambda: _done(ledger, ids) == 10, what="10 jobs done")
        stop.set()

    helper = threading.Thread(target=stop_when_done, daemon=True)
    helper.start()
    # In the main thread, with its signal handlers installed as the CLI has them.
    stats = ledger.run_worker(["r"], poll_interval=0.05, stop=stop)
    assert stats.completed == 10
    helper.join(10)

    # In another thread (no signal handlers), stopped before it had anything to do.
    stop2 = threading.Event()
    out = []
    runner = threading.Thread(target=lambda: out.append(ledger.run_worker(["r"], stop=stop2)))
    runner.start()
    stop2.set()
    runner.join(60)
    assert not runner.is_alive() and out and out[0].completed == 0


def test_a_sync_start_in_a_coroutine_uses_its_loop_and_a_loop_may_be_named(ledger):
    seen: list[asyncio.AbstractEventLoop] = []

    @ledger.task(queue="a")
    async def on_loop(ctx) -> None:
        seen.append(asyncio.get_running_loop())

    async def wait_for(n: int) -> None:
        patience = Patience(30, lambda: len(seen))
        while len(seen) < n:
            assert not patience.expired(), patience.describe()
            await asyncio.sleep(0.01)

    async def main() -> asyncio.AbstractEventLoop:
        worker = ledger.worker(["a"], poll_interval=0.05)
        worker.start()  # in a coroutine: the running loop is the handlers' loop
        await asyncio.to_thread(ledger.enqueue, on_loop, {}, key="first")
        await wait_for(1)
        await worker.stop_async()
        return asyncio.get_running_loop()

    loop = asyncio.run(main())
    assert seen == [loop]

    # A loop running in another thread, named.
    other = asyncio.new_event_loop()
    thread = threading.Thread(target=other.run_forever, daemon=True)
    thread.start()
    try:
        worker = ledger.worker(["a"], poll_interval=0.05).start(loop=other)
        ledger.enqueue(on_loop, {}, key="second")
        wait_until(lambda: len(seen) == 2, what="the second job")
        assert worker.stop().completed == 1 and seen[1] is other
    finally:
        other.call_soon_threadsafe(other.stop)
        thread.join(10)
        other.close()


def test_a_sync_stop_on_the_handlers_loop_does_not_wait_there(ledger, caplog):
    ledger.task(lambda ctx: None, name="t", queue="a")

    async def main() -> None:
        worker = await ledger.worker(["a"], poll_interval=0.05).start_async()
        worker.stop()  # would block the loop its async handlers need: it returns at once
        assert "await worker.stop_async()" in caplog.text
        await worker.stop_async()
        assert not worker.running

    asyncio.run(main())
