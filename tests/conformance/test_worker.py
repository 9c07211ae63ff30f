"""The worker: lease renewal, stale writes, graceful shutdown, wake-ups, several processes."""

from __future__ import annotations

import asyncio
import logging
import re
import signal
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from jobledger import JobState, LeaseLost, Ledger, WorkerObserver
from jobledger._records import AttemptOutcome
from jobledger._runtime.outcomes import Finished
from jobledger.push import PushObserver

from ..support.processes import wait_exit, wait_until, worker_process
from .conftest import T0


def test_long_handler_keeps_its_lease_by_renewal(ledger):
    release = threading.Event()

    @ledger.task(queue="w", lease_seconds=0.6, max_attempts=3)
    def slow(ctx) -> None:
        release.wait(2.0)  # three lease periods; the worker renews every 0.2 s

    job_id, _ = ledger.enqueue(slow, {}, key="slow")
    worker = ledger.worker(["w"], concurrency=1, rescue_interval=0.05)
    t = threading.Thread(target=worker.run)
    t.start()
    try:
        wait_until(lambda: ledger.job(job_id).state is JobState.LEASED, what="claim")
        first_until = ledger.job(job_id).lease_until
        wait_until(
            lambda: ledger.job(job_id).lease_until > first_until + timedelta(seconds=0.3),
            what="a renewal",
        )
        release.set()
        wait_until(lambda: ledger.job(job_id).state is JobState.DONE, what="completion")
    finally:
        release.set()
        worker.stop()
        t.join(10)
    assert ledger.job(job_id).attempts == 1
    assert [a.outcome for a in ledger.backend.history.attempts(job_id)] == [AttemptOutcome.DONE]
    assert worker.stats.lease_lost == 0


def test_a_late_completion_is_refused_counted_and_recorded(ledger, db_url):
    go = threading.Event()
    seen = {}

    @ledger.task(queue="w", lease_seconds=60)
    def stuck(ctx) -> None:
        go.wait(60)
        try:
            ctx.heartbeat()
        except LeaseLost as exc:
            seen["heartbeat"] = exc
            raise

    job_id, _ = ledger.enqueue(stuck, {}, key="stuck")
    worker = ledger.worker(["w"], concurrency=1, rescue_interval=3600)
    t = threading.Thread(target=worker.run)
    t.start()
    try:
        wait_until(lambda: ledger.job(job_id).state is JobState.LEASED, what="claim")
        token = _taken_over(db_url, job_id)
        go.set()
        wait_until(lambda: worker.stats.lease_lost >= 2, what="refused writes")
    finally:
        go.set()
        worker.stop()
        t.join(10)
    assert isinstance(seen["heartbeat"], LeaseLost)
    row = ledger.job(job_id)
    assert (
        row.state is JobState.LEASED and row.lease_token == token and row.leased_by == "other-host"
    )
    events = ledger.backend.history.events(job_id)
    assert {e.detail["action"] for e in events} == {"heartbeat", "fail"}
    assert all(
        e.kind == "lease_lost" and e.actor == worker.name and e.detail["attempt"] == 1
        for e in events
    )


def _given_back_first(ledger, job_id):
    """The job is pending again, uncharged, its one attempt released."""
    row = ledger.job(job_id)
    assert row.state is JobState.PENDING and row.budget_left == row.max_attempts
    assert [a.outcome for a in ledger.backend.history.attempts(job_id)] == [AttemptOutcome.RELEASED]


def test_shutdown_releases_claimed_but_unstarted_jobs(ledger):
    ledger.task(lambda ctx: None, name="t", queue="w")
    job_id, _ = ledger.enqueue("t", {}, key="k", now=T0)
    worker = ledger.worker(["w"], concurrency=1)
    worker._dispatch(worker.claim(["w"], 1))  # claimed; no runner started
    worker._shutdown()
    _given_back_first(ledger, job_id)
    assert worker.stats.released == 1


def _taken_over(db_url, job_id) -> str:
    """Another host sees the job's lease as expired (its clock is 2 minutes ahead), rescues
    the job and claims it: the new lease's token."""
    later = datetime.now(UTC) + timedelta(minutes=2)
    other = Ledger(db_url)
    try:
        assert [r.job_id for r in other.backend.jobs.rescue(now=later)] == [job_id]
        [taken] = other.backend.jobs.claim(["w"], "other-host", 1, now=later)
    finally:
        other.close()
    return taken.lease_token


def _lost_on_release(ledger, worker, job_id, token):
    """The give-back was refused and said so: the other host keeps the job, and the history
    has one lost lease, of a release, by this worker; nothing counted as released."""
    row = ledger.job(job_id)
    assert row.leased_by == "other-host" and row.lease_token == token
    assert (worker.stats.released, worker.stats.lease_lost) == (0, 1)
    [event] = ledger.backend.history.events(job_id)
    assert event.kind == "lease_lost" and event.detail["action"] == "release"
    assert event.actor == worker.name


def test_giving_back_a_job_another_host_took_over_is_a_lost_lease_not_a_release(ledger, db_url):
    # A shutdown gives back what it never started; if another host took the job over in the
    # meantime, the fence refuses the give-back, and the worker says so as for any refused
    # write (a lost lease, in the job's history), not that it released the job.
    ledger.task(lambda ctx: None, name="t", queue="w", lease_seconds=60)
    job_id, _ = ledger.enqueue("t", {}, key="k")
    worker = ledger.worker(["w"], concurrency=1)
    worker._dispatch(worker.claim(["w"], 1))  # claimed; no runner started
    token = _taken_over(db_url, job_id)
    worker._shutdown()
    _lost_on_release(ledger, worker, job_id, token)


def test_a_released_outcome_the_fence_refuses_is_a_lost_lease(ledger, db_url):
    # A transport that hands a job back as an outcome (a push delivery cancelled at
    # shutdown) has it written by the recorder: refused, it is a lost lease too.
    ledger.task(lambda ctx: None, name="t", queue="w", lease_seconds=60)
    job_id, _ = ledger.enqueue("t", {}, key="k")
    worker = ledger.worker(["w"], concurrency=1)
    (hold,) = worker.claim(["w"], 1)
    token = _taken_over(db_url, job_id)
    given_back = Finished(hold, released=True)
    worker.recorder.write([given_back])
    assert given_back.outcome == "lease_lost"
    _lost_on_release(ledger, worker, job_id, token)


def test_a_job_given_back_before_its_runner_reaches_it_never_runs(ledger):
    # A shutdown gives back what no runner thread has started; a runner that reaches such a
    # job afterwards must not run it (another worker may hold it by then).
    ran = []
    ledger.task(lambda ctx: ran.append(ctx.job_id), name="t", queue="w")
    job_id, _ = ledger.enqueue("t", {}, key="k", now=T0)
    worker = ledger.worker(["w"], concurrency=1)
    worker._dispatch(worker.claim(["w"], 1))  # waiting for a runner thread; none started
    worker.give_back_unstarted()
    worker._runnable.put(None)
    worker._runner()  # here, in this thread: it reaches the job, then the end
    assert ran == []
    _given_back_first(ledger, job_id)


def test_an_async_job_given_back_before_the_loop_starts_it_never_runs(ledger):
    ran = []

    async def handler(ctx) -> None:
        ran.append(ctx.job_id)

    ledger.task(handler, name="t", queue="w")
    job_id, _ = ledger.enqueue("t", {}, key="k", now=T0)
    worker = ledger.worker(["w"], concurrency=1)
    (hold,) = worker.claim(["w"], 1)
    with worker._running_lock:  # as _dispatch counts it, without handing it to a loop
        worker._busy += 1
        worker._slots_free -= 1
    worker.give_back_unstarted()

    async def on_the_loop() -> None:
        worker._loop = asyncio.get_running_loop()
        await worker._run_on_loop(hold)

    asyncio.run(on_the_loop())
    assert ran == []
    _given_back_first(ledger, job_id)


def test_sigterm_stops_claiming_and_finishes_running_jobs(ledger, db_url, tmp_path):
    started, go = tmp_path / "started", tmp_path / "go"
    ledger.task(lambda ctx, n: None, name="send", queue="drill")
    ledger.task(lambda ctx, n: None, name="noop", queue="drill")
    blocking, _ = ledger.enqueue("send", {"n": 0}, key="blocking", priority=10)
    proc = worker_process(
        "tests.apps.lifecycle_app:ledger",
        db_url,
        "--concurrency",
        "2",
        "--poll-interval",
        "0.05",
        "--grace",
        "30",
        env={"LIFECYCLE_STARTED": str(started), "LIFECYCLE_GO": str(go)},
    )
    try:
        wait_until(started.exists, timeout=30, what="the blocking job to start")
        later = [ledger.enqueue("noop", {"n": n}, key=f"later-{n}", delay=0.5).id for n in range(3)]
        proc.send_signal(signal.SIGTERM)
        # Give the worker time to claim the later jobs if it (wrongly) still claims.
        due = ledger.job(later[-1]).run_at
        wait_until(
            lambda: datetime.now(UTC) > due + timedelta(seconds=0.5),
            what="the later jobs to be due",
        )
        go.touch()
        code, _out, err = wait_exit(proc, 30)
    finally:
        go.touch()
        if proc.poll() is None:
            proc.kill()
    assert code == 0, err
    assert ledger.job(blocking).state is JobState.DONE
    assert [ledger.job(i).attempts for i in later] == [0, 0, 0]


def test_postgres_notify_wakes_an_idle_worker(ledger, db_url):
    if ledger.url.dialect != "postgres":
        # SQLite has no LISTEN; an enqueue in the same process wakes its workers instead.
        pass
    done = threading.Event()
    ledger.task(lambda ctx: done.set(), name="ping", queue="w")
    worker = ledger.worker(["w"], concurrency=1, poll_interval=60)
    t = threading.Thread(target=worker.run)
    t.start()
    try:
        wait_until(
            lambda: worker.in_flight() == 0 and worker.stats.claimed == 0 and t.is_alive(),
            what="worker up",
        )
        time.sleep(
            0.3
        )  # let it reach its idle wait (not an assertion: the wait below is the check)
        producer = Ledger(db_url) if ledger.url.dialect == "postgres" else ledger
        producer.enqueue("ping", {}, key="ping", queue="w")
        assert done.wait(30), "the worker slept through the enqueue (poll interval is 60 s)"
    finally:
        worker.stop()
        t.join(10)


def test_two_worker_processes_share_one_database(ledger, db_url, tmp_path):
    barrier = tmp_path / "start"
    ledger.task(lambda ctx, n: None, name="noop", queue="drill")
    ledger.enqueue_many("noop", [{"payload": {"n": n}, "key": f"n{n}"} for n in range(2000)])
    procs = [
        worker_process(
            "tests.apps.drill_app:ledger",
            db_url,
            "--burst",
            "--concurrency",
            "2",
            "--batch-size",
            "10",
            # Each job takes 2 ms: the share does not depend on which process starts first.
            env={"DRILL_START_BARRIER": str(barrier), "DRILL_NOOP_SECONDS": "0.002"},
        )
        for _ in range(2)
    ]
    # Both interpreters import the app, which says it is ready and waits for the barrier.
    wait_until(lambda: len(list(tmp_path.glob("start.ready.*"))) == 2, what="both processes ready")
    barrier.touch()
    claimed = []
    for proc in procs:
        code, _out, err = wait_exit(proc, 120)
        assert code == 0, err
        claimed.append(int(re.search(r"claimed (\d+)", err).group(1)))
    print(
        f"\n{ledger.url.dialect}: two worker processes claimed {claimed[0]} and {claimed[1]} of 2000 jobs"
    )
    assert sum(claimed) == 2000 and min(claimed) > 0
    jobs = ledger.jobs()
    assert all(j.state is JobState.DONE and j.attempts == 1 for j in jobs)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"concurrency": 0}, "concurrency must be a whole number from 1 to 1000, got 0"),
        ({"concurrency": True}, "concurrency must be a whole number from 1 to 1000, got True"),
        ({"concurrency": 2.0}, "concurrency must be a whole number from 1 to 1000, got 2.0"),
        # A thread each, all started with the worker: 10**12 ran the process out of memory.
        ({"concurrency": 1001}, "concurrency must be a whole number from 1 to 1000, got 1001"),
        ({"name": "w\x00"}, "a worker's name 'w\\x00' contains a control character"),
        ({"name": 7}, "a worker's name must be a string, got int"),
        ({"name": ""}, "a worker's name must not be empty"),
        ({"batch_size": 0}, "batch_size must be a whole number from 1 to 1000, got 0"),
        ({"batch_size": 1001}, "batch_size must be a whole number from 1 to 1000, got 1001"),
        ({"batch_size": True}, "batch_size must be a whole number from 1 to 1000, got True"),
        ({"prefetch": -1}, "prefetch must be a whole number from 0 to 10000, got -1"),
        ({"prefetch": 10_001}, "prefetch must be a whole number from 0 to 10000, got 10001"),
        ({"prefetch": False}, "prefetch must be a whole number from 0 to 10000, got False"),
        ({"poll_interval": 0}, "poll_interval must be > 0 seconds, got 0"),
        ({"poll_interval": -1}, "poll_interval must be > 0 seconds, got -1"),
        ({"poll_interval": float("nan")}, "poll_interval must be > 0 seconds, got nan"),
        ({"poll_interval": float("inf")}, "poll_interval must be > 0 seconds, got inf"),
        ({"poll_interval": "1"}, "poll_interval must be > 0 seconds, got '1'"),
        ({"rescue_interval": 0}, "rescuer interval must be > 0 seconds, got 0"),
        # Checked when the worker stopped: NaN or a negative grace waited for nothing, a text
        # was a TypeError in the middle of stopping.
        ({"grace_seconds": -1}, "grace_seconds must be a number of seconds >= 0, got -1"),
        (
            {"grace_seconds": float("nan")},
            "grace_seconds must be a number of seconds >= 0, got nan",
        ),
        ({"grace_seconds": "30"}, "grace_seconds must be a number of seconds >= 0, got '30'"),
        ({"grace_seconds": True}, "grace_seconds must be a number of seconds >= 0, got True"),
    ],
)
def test_a_worker_with_a_setting_out_of_range_is_refused(ledger, options, message):
    """Refused when it is built, with the setting's bounds; a bool is no count (True would run
    one job at a time, or a batch of one, without a word); a poll interval of zero or less
    would poll without a pause, and an infinite one never."""
    ledger.task(name="noop", queue="q")(lambda ctx: None)
    with pytest.raises(ValueError) as info:
        ledger.worker(["q"], **options)
    assert str(info.value) == message


def test_a_worker_at_its_bounds_is_built(ledger):
    ledger.task(name="noop", queue="q")(lambda ctx: None)
    ledger.worker(["q"], concurrency=1, batch_size=1, prefetch=0)
    ledger.worker(["q"], batch_size=1000, prefetch=10_000)
    # No grace (a graceful stop waits for nothing), and as long as it takes.
    assert ledger.worker(["q"], grace_seconds=0).grace_seconds == 0.0
    assert ledger.worker(["q"], grace_seconds=float("inf")).grace_seconds == float("inf")


def test_an_observer_that_raises_or_lacks_an_event_never_stops_a_worker(ledger, caplog):
    """Observers are told, never trusted: one that raises is logged and the worker goes on;
    one that does not subclass WorkerObserver is told each outcome through its ``on_outcome``;
    and one that observes push deliveries alone (placed in ``ledger.observers``, as
    docs/push.md says) is left out of the worker's events, with no error logged for them."""

    class Broken(WorkerObserver):
        def on_claim(self, worker, jobs):
            raise RuntimeError("observer bug")

        def on_outcomes(self, worker, outcomes):
            raise RuntimeError("observer bug")

    class Plain:
        def __init__(self):
            self.seen = []

        def on_outcome(self, worker, job, outcome, duration, error_class):
            self.seen.append((job.key, outcome))

    class Deliveries(PushObserver):
        pass

    ledger.task(lambda ctx, n: None, name="t", queue="w")
    for n in range(3):
        ledger.enqueue("t", {"n": n}, key=f"k{n}")
    broken, plain, deliveries = Broken(), Plain(), Deliveries()
    ledger.observers.extend([broken, plain, deliveries])
    with caplog.at_level(logging.ERROR, logger="jobledger"):
        stats = ledger.worker(["w"], concurrency=1, burst=True).run()
    assert stats.completed == 3
    assert sorted(plain.seen) == [("k0", "done"), ("k1", "done"), ("k2", "done")]
    failed = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert failed and all(repr(broken) in r.getMessage() for r in failed)
    assert {r.getMessage().rsplit(" ", 1)[1] for r in failed} == {"on_claim", "on_outcomes"}


def test_a_worker_with_no_queue_to_work_on_is_refused(ledger):
    """Without tasks registered, a worker needs its queues named: one that would idle on none
    is refused, saying what to do."""
    with pytest.raises(ValueError, match="no queues to work on: register a task or pass queues="):
        ledger.worker()
    ledger.worker(["w"])  # named, they are enough
