"""Results: a handler's return value is stored with its job when its attempt completes, read by
key or id with ``ledger.result``, awaited with ``timeout=`` (woken by LISTEN on PostgreSQL,
polling on SQLite), and removed with the job by prune."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta

import pytest

from jobledger import (
    ConfigError,
    JobFailed,
    JobFilter,
    JobState,
    Ledger,
    NotFound,
    Permanent,
    ResultNotReady,
    ResultTimeout,
)
from jobledger._records import AttemptOutcome, Lease

from ..support.processes import wait_until
from .conftest import T0, lease_of

VALUES = [
    {"invoice": 4187, "lines": [1, 2.5, "three"], "paid": True, "note": None},
    ["a", {"b": []}],
    "sent",
    "",
    0,
    -3.25,
    False,
    {"text": "naïve ✓ 日本", "escaped": "\\u0000 is text here"},
]


def _burst(ledger: Ledger, queue: str = "r", **options) -> None:  # type: ignore[no-untyped-def]
    ledger.run_worker([queue], burst=True, handle_signals=False, **options)


def _waiter(ledger: Ledger, ref: str, timeout: float) -> tuple[threading.Thread, dict]:  # type: ignore[type-arg]
    """``ledger.result(ref, timeout=...)`` on a thread: what it returned or raised."""
    got: dict = {}  # type: ignore[type-arg]

    def wait() -> None:
        try:
            got["value"] = ledger.result(ref, timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            got["error"] = exc

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread, got


def test_what_sync_and_async_handlers_return_is_stored_and_read_by_key_or_id(ledger):
    @ledger.task(queue="r")
    def give(ctx, i: int):  # type: ignore[no-untyped-def]
        return VALUES[i]

    @ledger.task(queue="r")
    async def agive(ctx, i: int):  # type: ignore[no-untyped-def]
        return VALUES[i]

    ids = {}
    for i in range(len(VALUES)):
        ids[f"s{i}"] = ledger.enqueue(give, {"i": i}, key=f"s{i}").id
        ids[f"a{i}"] = ledger.enqueue(agive, {"i": i}, key=f"a{i}").id
    _burst(ledger, concurrency=4, batch_size=50)
    for i, value in enumerate(VALUES):
        for kind in "sa":
            key = f"{kind}{i}"
            assert ledger.result(key) == value, key
            assert ledger.result(ids[key]) == value
            assert ledger.result(key, queue="r") == value
            assert ledger.find(key).result == value
            assert type(ledger.result(key)) is type(value)
    assert {j.state for j in ledger.jobs()} == {JobState.DONE}


def test_a_handler_that_returns_none_has_a_null_result(ledger):
    @ledger.task(queue="r")
    def nothing(ctx) -> None:
        pass

    @ledger.task(queue="r")
    def something(ctx):  # type: ignore[no-untyped-def]
        return {"ok": 1}

    ledger.enqueue(nothing, {}, key="none")
    ledger.enqueue(something, {}, key="some")
    _burst(ledger)  # one completion batch: one job with a result, one without
    assert ledger.result("none") is None and ledger.find("none").result is None
    assert ledger.result("some") == {"ok": 1}
    assert ledger.history(ledger.find("none").id).events == []


def _nested(depth: int) -> list:
    """A list in a list ``depth`` times: more than the JSON encoder's recursion can hold."""
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (datetime(2026, 8, 10, tzinfo=UTC), "not JSON-serialisable"),
        ({"x": float("nan")}, "not JSON-serialisable"),
        ("x" * (256 * 1024), "the limit is 262144 bytes"),
        ({"s": "a\x00b"}, "U+0000"),
        ("\ud800", "unpaired surrogate"),
        (_nested(100_000), "nests too deeply"),
    ],
    ids=["datetime", "nan", "too-large", "nul", "surrogate", "nested"],
)
def test_a_return_value_that_cannot_be_stored_leaves_the_job_done_with_a_null_result(
    ledger, caplog, value, why
):
    effects = []

    @ledger.task(queue="r", max_attempts=3)
    def odd(ctx):  # type: ignore[no-untyped-def]
        effects.append(ctx.key)
        return value

    @ledger.task(queue="r")
    def fine(ctx):  # type: ignore[no-untyped-def]
        return "fine"

    job_id = ledger.enqueue(odd, {}, key="odd").id
    ledger.enqueue(fine, {}, key="fine")
    with caplog.at_level(logging.WARNING, logger="jobledger.worker"):
        _burst(ledger)
    job = ledger.job(job_id)
    # Its effect happened: the job is done, never retried.
    assert (job.state, job.attempts, job.result, effects) == (JobState.DONE, 1, None, ["odd"])
    assert ledger.result("odd") is None
    assert ledger.result("fine") == "fine"  # the batch's other results are stored
    [attempt] = ledger.history(job_id).attempts
    assert attempt.outcome is AttemptOutcome.DONE
    [event] = ledger.history(job_id).events
    assert event.kind == "result_dropped" and why in (event.note or "")
    assert event.detail == {"attempt": 1}
    [line] = [r.getMessage() for r in caplog.records if "result is null" in r.getMessage()]
    assert "task odd" in line and why in line


def test_a_result_is_stored_with_a_completion_in_the_handlers_transaction(ledger):
    @ledger.task(queue="r")
    def booked(ctx):  # type: ignore[no-untyped-def]
        with ctx.transaction():
            pass
        return {"booked": ctx.key}

    @ledger.task(queue="r")
    def booked_then_failed(ctx) -> None:
        with ctx.transaction():
            pass
        raise RuntimeError("after the commit")

    ledger.enqueue(booked, {}, key="b1")
    ledger.enqueue(booked_then_failed, {}, key="b2")
    _burst(ledger)
    assert ledger.result("b1") == {"booked": "b1"}
    assert ledger.find("b2").state is JobState.DONE and ledger.result("b2") is None


def test_async_handlers_on_the_loop_store_results_and_complete_in_their_transaction(ledger):
    """A worker of only async tasks runs them as tasks of its loop: what they return is
    stored, and a completion in the handler's transaction is its outcome there too."""

    @ledger.task(queue="ra")
    async def agive(ctx, i: int):  # type: ignore[no-untyped-def]
        return VALUES[i]

    @ledger.task(queue="ra")
    async def abooked(ctx):  # type: ignore[no-untyped-def]
        with ctx.transaction():
            pass
        return {"booked": ctx.key}

    @ledger.task(queue="ra")
    async def abooked_then_failed(ctx) -> None:
        with ctx.transaction():
            pass
        raise RuntimeError("after the commit")

    for i in range(len(VALUES)):
        ledger.enqueue(agive, {"i": i}, key=f"a{i}")
    ledger.enqueue(abooked, {}, key="b1")
    ledger.enqueue(abooked_then_failed, {}, key="b2")
    _burst(ledger, queue="ra", concurrency=4, batch_size=50)
    for i, value in enumerate(VALUES):
        assert ledger.result(f"a{i}") == value
    assert ledger.result("b1") == {"booked": "b1"}
    assert ledger.find("b2").state is JobState.DONE and ledger.result("b2") is None
    assert {j.state for j in ledger.jobs()} == {JobState.DONE}


def test_completions_store_results_only_under_a_held_lease(ledger, tasks):
    jobs = ledger.backend.jobs
    for n in range(4):
        ledger.enqueue("work", {"n": n}, key=f"k{n}")
    claimed = jobs.claim(["q"], "w", 4)
    leases = [Lease(j.id, j.lease_token, j.attempt) for j in claimed]
    a, b, c, d = leases
    stale = Lease(d.job_id, "0" * 32, d.attempt)
    refused = jobs.complete(
        [a, b, c, stale], results={a.job_id: '{"a":1}', c.job_id: "[3]", d.job_id: '"x"'}
    )
    assert refused == [d.job_id]
    assert [ledger.job(x.job_id).result for x in leases] == [{"a": 1}, None, [3], None]
    assert ledger.job(d.job_id).state is JobState.LEASED
    # A result is never written over a job that this lease did not complete.
    assert jobs.store_result(d, '"late"') is False
    assert jobs.store_result(a, '"again"') is True and ledger.job(a.job_id).result == "again"
    # Nor over a job done under another lease: the token names the lease that completed it.
    assert jobs.store_result(Lease(a.job_id, "0" * 32, a.attempt), '"other"') is False
    assert ledger.job(a.job_id).result == "again"


def test_result_of_a_job_not_finished_and_of_unknown_keys(ledger, tasks):
    job_id = ledger.enqueue("work", {"n": 1}, key="k1").id
    with pytest.raises(ResultNotReady) as not_ready:
        ledger.result("k1")
    assert (not_ready.value.job_id, not_ready.value.state) == (job_id, "pending")
    assert not isinstance(not_ready.value, ResultTimeout)
    with pytest.raises(ResultTimeout) as timed_out:
        ledger.result("k1", timeout=0.05)
    assert isinstance(timed_out.value, TimeoutError) and isinstance(timed_out.value, ResultNotReady)
    assert timed_out.value.state == "pending" and "0.05 s" in str(timed_out.value)
    with pytest.raises(ResultTimeout):
        ledger.result(job_id, timeout=0)
    with pytest.raises(NotFound):
        ledger.result("no-such-key")
    with pytest.raises(NotFound):
        ledger.result("no-such-key", timeout=1)
    for bad in (-1, float("nan"), "soon", True):
        with pytest.raises(ConfigError, match="timeout"):
            ledger.result("k1", timeout=bad)


def test_a_result_timeout_may_be_a_timedelta_and_is_refused_from_a_billion_seconds(ledger, tasks):
    """``timeout`` is seconds or a ``timedelta``; one too long for the waits it makes (a
    billion seconds, some thirty years) is refused before the job is even looked up."""
    job_id = ledger.enqueue("work", {"n": 1}, key="k1").id
    with pytest.raises(ResultTimeout):
        ledger.result(job_id, timeout=timedelta(0))
    ledger.cancel(job_id, actor="ana", reason="not needed")
    with pytest.raises(JobFailed):
        ledger.result("k1", timeout=timedelta(seconds=5))
    for bad in (1e9, timedelta(days=20_000)):
        with pytest.raises(ConfigError, match="timeout"):
            ledger.result("k1", timeout=bad)


def test_dead_and_cancelled_jobs_raise_job_failed(ledger):
    @ledger.task(queue="r", max_attempts=1)
    def refuse(ctx) -> None:
        raise Permanent("template 'weekly' missing")

    dead_id = ledger.enqueue(refuse, {}, key="dead").id
    cancelled_id = ledger.enqueue(refuse, {}, key="cancelled", delay=3600).id
    ledger.cancel(cancelled_id, actor="ana", reason="not needed")
    _burst(ledger)
    with pytest.raises(JobFailed) as dead:
        ledger.result("dead")
    assert (dead.value.job_id, dead.value.state) == (dead_id, "dead")
    assert dead.value.error == "template 'weekly' missing"
    assert dead.value.error_class == "Permanent"
    assert "template 'weekly' missing" in str(dead.value)
    with pytest.raises(JobFailed) as cancelled:
        ledger.result(cancelled_id, timeout=5)
    assert cancelled.value.state == "cancelled" and "cancelled" in str(cancelled.value)


def test_result_with_a_timeout_waits_for_the_job_to_finish(ledger):
    @ledger.task(queue="r")
    def slow(ctx, n: int):  # type: ignore[no-untyped-def]
        return n * 2

    ledger.enqueue(slow, {"n": 21}, key="later")
    thread, got = _waiter(ledger, "later", timeout=60)
    _burst(ledger)
    thread.join(60)
    assert got == {"value": 42}


def _other_process_ledger(db_url: str) -> Ledger:
    """Another ledger on the same database, as a worker in another process would have."""
    return Ledger(db_url)


@pytest.mark.parametrize("backend_name", ["postgres"])  # SQLite has no LISTEN: waiters poll
@pytest.mark.parametrize("ending", ["done", "dead", "done-in-transaction"])
def test_on_postgres_a_waiter_is_woken_by_listen_not_by_polling(ledger, db_url, ending):
    """The waiter's polling interval is an hour, its timeout ten minutes, and the job finishes
    in another ledger (no in-process wake-up): only the completion's NOTIFY can end the wait
    within the minute the test gives it."""
    assert ledger.listening.supported
    ledger.result_poll_interval = 3600.0
    worker_side = _other_process_ledger(db_url)
    go = threading.Event()

    @worker_side.task(queue="r", max_attempts=1)
    def held(ctx):  # type: ignore[no-untyped-def]
        go.wait(60)
        if ending == "dead":
            raise Permanent("no")
        if ending == "done-in-transaction":
            with ctx.transaction():
                pass
        return {"ending": ending}

    job_id = worker_side.enqueue(held, {}, key="held").id
    looked = []
    real_job = ledger.job

    def job(job_id: int):  # type: ignore[no-untyped-def]
        row = real_job(job_id)
        looked.append(row.state)
        return row

    ledger.job = job  # type: ignore[method-assign]
    worker = worker_side.worker(["r"], concurrency=1)
    running = threading.Thread(target=worker.run, daemon=True)
    running.start()
    try:
        wait_until(lambda: worker_side.job(job_id).state is JobState.LEASED, what="the claim")
        thread, got = _waiter(ledger, "held", timeout=600)
        # The waiter listens, and has seen the job still leased: it waits on its event now.
        wait_until(lambda: JobState.LEASED in looked, what="the waiter")
        assert ledger.finishes.waiting() == 1
        go.set()
        thread.join(60)
        assert not thread.is_alive(), "the waiter was not woken"
    finally:
        go.set()
        worker.stop()
        running.join(30)
        worker_side.close()
    if ending == "dead":
        assert isinstance(got.get("error"), JobFailed), got
    else:
        assert got == {"value": {"ending": ending}}
    assert ledger.finishes.waiting() == 0


def test_prune_removes_results_with_their_jobs(ledger):
    @ledger.task(queue="r")
    def give(ctx, n: int):  # type: ignore[no-untyped-def]
        return {"n": n, "big": "x" * 1000}

    for n in range(3):
        ledger.enqueue(give, {"n": n}, key=f"p{n}")
    _burst(ledger)
    assert [j.result["n"] for j in ledger.jobs(JobFilter(queue="r"))] == [0, 1, 2]
    later = datetime.now(UTC) + timedelta(days=2)
    pruned = ledger.prune(timedelta(days=1), now=later)
    assert pruned.jobs == 3
    assert ledger.jobs(JobFilter(queue="r")) == []
    with pytest.raises(NotFound, match="was pruned at"):
        ledger.result("p1")
    with pytest.raises(NotFound, match="was pruned at"):
        ledger.result("p1", timeout=1)


def test_a_job_pruned_while_a_result_waits_for_it_is_not_found_saying_when(ledger):
    """The waiter found the job pending; it then finished and was pruned before the waiter
    looked again. The waiter answers NotFound, as for a pruned key (docs/concepts.md), saying
    that the job went while it waited, when it was pruned and until when its key is taken."""
    ledger.task(lambda ctx: None, name="short", queue="r")
    job_id = ledger.enqueue("short", {}, key="gone", now=T0).id
    real_arm = ledger.finishes.arm

    def arm(*args, **kwargs):  # type: ignore[no-untyped-def]
        # Between the waiter's first look and its next: the job runs, and a prune takes it.
        [job] = ledger.backend.jobs.claim(["r"], "w", 1, now=T0)
        ledger.backend.jobs.complete([lease_of(job)], now=T0)
        assert ledger.prune(timedelta(days=1), now=T0 + timedelta(days=2)).jobs == 1
        return real_arm(*args, **kwargs)

    ledger.finishes.arm = arm  # type: ignore[method-assign]
    with pytest.raises(NotFound) as gone:
        ledger.result("gone", timeout=60)
    assert str(gone.value) == (
        f"job {job_id} is gone while waiting for it; job {job_id} had this key in queue 'r', "
        "finished done and was pruned at 2026-08-12 06:00:00 UTC; the key stays taken until "
        "2027-08-10 06:00:00 UTC"
    )


def test_results_the_database_refuses_are_dropped_and_the_jobs_still_done(ledger, caplog):
    """``encode_result`` keeps out what the databases refuse; should one refuse a result all the
    same, the batch is completed without results rather than retried (running its handlers
    again)."""

    @ledger.task(queue="r")
    def give(ctx, n: int):  # type: ignore[no-untyped-def]
        return {"n": n}

    @ledger.task(queue="r")
    def quiet(ctx) -> None:
        pass

    jobs = ledger.backend.jobs
    complete = jobs.complete
    calls = []

    def refusing(leases, now=None, conn=None, results=None):  # type: ignore[no-untyped-def]
        calls.append(results)
        if results:
            raise ValueError("invalid input syntax for type json")
        return complete(leases, now, conn)

    jobs.complete = refusing  # type: ignore[method-assign]
    ids = [ledger.enqueue(give, {"n": n}, key=f"g{n}").id for n in range(2)]
    quiet_id = ledger.enqueue(quiet, {}, key="quiet").id
    with caplog.at_level(logging.WARNING, logger="jobledger.worker"):
        _burst(ledger, batch_size=10)
    assert calls[-1] is None  # the batch again, without its results
    for job_id in ids:
        job = ledger.job(job_id)
        assert (job.state, job.attempts, job.result) == (JobState.DONE, 1, None)
        [event] = ledger.history(job_id).events
        assert event.kind == "result_dropped" and "the database refused it" in (event.note or "")
    assert ledger.job(quiet_id).state is JobState.DONE
    assert ledger.history(quiet_id).events == []
