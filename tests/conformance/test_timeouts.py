"""A maximum run time per job: ``@ledger.task(timeout=…)``, on every backend.

An attempt that runs past its task's timeout is recorded as ``timed_out``, its lease is no
longer renewed, the job is retried by its backoff (or parked dead when its attempts are spent),
and whatever the abandoned handler writes later is refused by the fence.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future

import pytest

from jobledger import AttemptOutcome, Backoff, JobState, LeaseLost, Ledger

from ..support.processes import wait_until

QUICK = Backoff(base=0.01, cap=0.01, jitter=False)


def _run(worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return thread


def _outcomes(ledger: Ledger, job_id: int) -> list[AttemptOutcome | None]:
    return [a.outcome for a in ledger.history(job_id).attempts]


def test_attempt_one_runs_past_its_timeout_and_attempt_two_completes(ledger):
    let_go = threading.Event()
    late: list[str] = []

    @ledger.task(queue="t", timeout=0.5, lease_seconds=2, backoff=QUICK)
    def slow(ctx) -> None:
        if ctx.attempt == 1:
            let_go.wait(60)  # hangs past its timeout, until the test lets it go
            try:
                ctx.record_effect("sent")
                late.append("recorded")
            except LeaseLost:
                late.append("refused")

    job_id, _ = ledger.enqueue(slow, {}, key="k")
    worker = ledger.worker(["t"], concurrency=2, poll_interval=0.05, rescue_interval=0.05)
    thread = _run(worker)
    try:
        wait_until(lambda: ledger.job(job_id).state is JobState.DONE, what="attempt 2 done")
        assert _outcomes(ledger, job_id) == [AttemptOutcome.TIMED_OUT, AttemptOutcome.DONE]
        [first, _] = ledger.history(job_id).attempts
        assert first.error_class == "Timeout" and "timeout of 0.5 s" in (first.error_message or "")
        let_go.set()
        wait_until(lambda: late, what="the abandoned handler's late write")
        assert late == ["refused"], "the fence must refuse what the abandoned handler writes"
        assert ledger.history(job_id).effects == []
        assert worker.stats.timed_out == 1 and worker.stats.completed == 1
    finally:
        let_go.set()
        worker.stop()
        thread.join(30)


def test_a_timed_out_job_with_its_attempts_spent_is_dead(ledger):
    let_go = threading.Event()

    @ledger.task(queue="t", timeout=0.3, max_attempts=1, lease_seconds=2, backoff=QUICK)
    def hangs(ctx) -> None:
        let_go.wait(60)

    job_id, _ = ledger.enqueue(hangs, {}, key="k")
    worker = ledger.worker(["t"], concurrency=1, poll_interval=0.05)
    thread = _run(worker)
    try:
        wait_until(lambda: ledger.job(job_id).state is JobState.DEAD, what="dead")
        assert _outcomes(ledger, job_id) == [AttemptOutcome.TIMED_OUT]
    finally:
        let_go.set()
        worker.stop()
        thread.join(30)


def test_an_attempt_is_timed_out_once_however_often_the_keeper_looks(ledger):
    # The keeper looks at every held attempt each tick, and an attempt it has timed out stays
    # held until the completer has written its outcome: a second look must not end it again
    # (a second outcome, a second abandoned slot).
    ledger.task(lambda ctx: None, name="t", queue="t", timeout=0.5)
    ledger.enqueue("t", {}, key="k")
    worker = ledger.worker(["t"], concurrency=1)
    (hold,) = worker.claim(["t"], 1)
    hold.timeout = 0.5  # as the worker sets it before the handler runs
    assert hold.start(Future())  # an async handler's run: cancelled, no thread to replace
    ended = []
    worker.finish = ended.append  # what would go to the completer (not started here)
    worker.time_out(hold)
    worker.time_out(hold)
    assert len(ended) == 1 and ended[0].failure.timed_out
    assert worker.stats.timed_out == 1 and hold.future.cancelled()


def test_an_async_handler_past_its_timeout_is_cancelled(ledger):
    cancelled = threading.Event()

    @ledger.task(queue="t", timeout=0.3, lease_seconds=2, backoff=QUICK)
    async def sleepy(ctx) -> None:
        if ctx.attempt == 1:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.set()
                raise

    job_id, _ = ledger.enqueue(sleepy, {}, key="k")
    worker = ledger.worker(["t"], concurrency=1, poll_interval=0.05)
    thread = _run(worker)
    try:
        wait_until(lambda: ledger.job(job_id).state is JobState.DONE, what="attempt 2 done")
        assert cancelled.is_set()
        assert _outcomes(ledger, job_id) == [AttemptOutcome.TIMED_OUT, AttemptOutcome.DONE]
        # The cancelled coroutine did not cost a runner thread: concurrency 1 ran attempt 2.
        assert worker.stats.timed_out == 1
    finally:
        worker.stop()
        thread.join(30)


def test_an_abandoned_sync_handler_gives_up_its_slot_to_the_async_ones(ledger):
    """A worker of both kinds bounds them with slots: the slot of a sync handler abandoned past
    its timeout is freed at once, so async jobs claimed behind it run at ``concurrency`` 1
    while it still hangs."""
    let_go = threading.Event()

    @ledger.task(queue="t", timeout=2.0, lease_seconds=4, backoff=QUICK)
    def hangs_once(ctx) -> None:
        if ctx.attempt == 1:
            let_go.wait(60)

    @ledger.task(queue="t")
    async def quick(ctx, n: int) -> None:
        await asyncio.sleep(0)

    hung, _ = ledger.enqueue(hangs_once, {}, key="h")
    ids = [ledger.enqueue(quick, {"n": n}, key=f"q{n}", delay=0.1)[0] for n in range(5)]
    worker = ledger.worker(["t"], concurrency=1, batch_size=10, prefetch=10, poll_interval=0.05)
    thread = _run(worker)
    try:
        # Claimed while the sync handler holds the only slot: they wait for it.
        wait_until(
            lambda: all(ledger.job(i).state is JobState.LEASED for i in [hung, *ids]),
            what="all claimed",
        )
        wait_until(
            lambda: all(ledger.job(i).state is JobState.DONE for i in ids),
            what="the async jobs done while the abandoned handler still hangs",
        )
        assert not let_go.is_set() and worker.stats.timed_out == 1
    finally:
        let_go.set()
        worker.stop()
        thread.join(30)
    assert _outcomes(ledger, hung)[0] is AttemptOutcome.TIMED_OUT


def test_a_worker_stops_claiming_while_its_abandoned_threads_fill_its_concurrency(ledger, caplog):
    """A sync handler's thread cannot be killed: with ``concurrency`` of them still running
    past their timeout the worker claims nothing (and says so), and claims again once one
    returns."""
    let_go = threading.Event()

    @ledger.task(queue="t", timeout=0.3, lease_seconds=2, backoff=QUICK)
    def hangs_once(ctx) -> None:
        if ctx.attempt == 1 and ctx.key == "a":
            let_go.wait(60)

    a, _ = ledger.enqueue(hangs_once, {}, key="a")
    b, _ = ledger.enqueue(hangs_once, {}, key="b", delay=0.5)
    worker = ledger.worker(["t"], concurrency=1, poll_interval=0.05)
    caplog.set_level("ERROR", logger="jobledger.worker")
    thread = _run(worker)
    try:
        wait_until(
            lambda: any("claiming nothing" in r.getMessage() for r in caplog.records),
            what="the worker saying it stopped claiming",
        )
        # Its one runner is abandoned inside a's first attempt: a's retry and b wait.
        wait_until(lambda: _outcomes(ledger, a) == [AttemptOutcome.TIMED_OUT], what="a timed out")
        assert worker.stats.claimed == 1
        assert ledger.job(b).state is JobState.PENDING and ledger.job(b).attempts == 0
        let_go.set()
        wait_until(
            lambda: ledger.job(a).state is JobState.DONE and ledger.job(b).state is JobState.DONE,
            what="both done once the abandoned thread returned",
        )
        assert _outcomes(ledger, a) == [AttemptOutcome.TIMED_OUT, AttemptOutcome.DONE]
    finally:
        let_go.set()
        worker.stop()
        thread.join(30)


@pytest.mark.parametrize("value", [0, -1, float("nan"), "5", True, 8 * 24 * 3600.0])
def test_a_bad_timeout_is_refused_when_the_task_is_built(ledger, value):
    from jobledger import ConfigError

    with pytest.raises(ConfigError, match="timeout"):
        ledger.task(lambda ctx: None, name="bad", timeout=value)


def test_a_timeout_of_exactly_seven_days_is_accepted(ledger):
    # The bound is inclusive, as the message says ("at most 7 days").
    task = ledger.task(lambda ctx: None, name="slow", timeout=7 * 24 * 3600)
    assert task.timeout == 7 * 24 * 3600.0


def test_a_declared_queue_s_timeout_bounds_the_tasks_that_set_none(ledger):
    """The queue's ``timeout_seconds`` is the default of its tasks (and of the jobs published
    to it over HTTP, which carry the queue's task name)."""
    from jobledger._records import QueueSettings

    ledger.queue_settings.declare(QueueSettings(name="t", timeout_seconds=0.3))
    assert ledger.queue_settings.get("t").settings.timeout_seconds == 0.3
    let_go = threading.Event()

    @ledger.task(queue="t", lease_seconds=2, backoff=QUICK)
    def no_timeout_of_its_own(ctx) -> None:
        if ctx.attempt == 1:
            let_go.wait(60)

    job_id, _ = ledger.enqueue(no_timeout_of_its_own, {}, key="k")
    worker = ledger.worker(["t"], concurrency=2, poll_interval=0.05)
    thread = _run(worker)
    try:
        wait_until(lambda: ledger.job(job_id).state is JobState.DONE, what="attempt 2 done")
        assert _outcomes(ledger, job_id) == [AttemptOutcome.TIMED_OUT, AttemptOutcome.DONE]
    finally:
        let_go.set()
        worker.stop()
        thread.join(30)
