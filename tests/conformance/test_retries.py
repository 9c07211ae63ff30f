"""Failures, retries and the budget (SPEC §3), at the backend and through the worker."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from jobledger import JobState, Permanent, Retry
from jobledger._records import LATEST_TIME, AttemptOutcome, Failure

from ..support.processes import wait_until
from .conftest import T0, at, enqueue, lease_of


def test_transient_failure_goes_back_to_pending_at_its_run_time(ledger, tasks):
    job_id = enqueue(ledger, 1)
    [job] = ledger.backend.jobs.claim(["q"], "w", 1, now=T0)
    [result] = ledger.backend.jobs.fail(
        [Failure(lease_of(job), True, at(10), "TimeoutError", "slow", "Traceback…")], now=at(1)
    )
    assert result.state is JobState.PENDING
    row = ledger.job(job_id)
    assert (row.state, row.run_at, row.last_error, row.last_error_class, row.last_traceback) == (
        JobState.PENDING,
        at(10),
        "slow",
        "TimeoutError",
        "Traceback…",
    )
    [attempt] = ledger.backend.history.attempts(job_id)
    assert (attempt.outcome, attempt.error_class, attempt.error_message) == (
        AttemptOutcome.RETRY,
        "TimeoutError",
        "slow",
    )
    assert ledger.backend.jobs.claim(["q"], "w", 1, now=at(9)) == []
    assert len(ledger.backend.jobs.claim(["q"], "w", 1, now=at(10))) == 1


def test_permanent_failure_is_dead_at_once(ledger, tasks):
    job_id = enqueue(ledger, 1)
    [job] = ledger.backend.jobs.claim(["q"], "w", 1, now=T0)
    [result] = ledger.backend.jobs.fail(
        [Failure(lease_of(job), False, None, "Permanent", "bad address")], now=at(1)
    )
    assert result.state is JobState.DEAD
    row = ledger.job(job_id)
    assert row.state is JobState.DEAD and row.finished_at == at(1) and row.budget_left == 2


def test_spent_budget_is_dead(ledger, tasks):
    job_id = enqueue(ledger, 1)
    states = []
    for i in range(3):
        [job] = ledger.backend.jobs.claim(["q"], "w", 1, now=at(i))
        [result] = ledger.backend.jobs.fail(
            [Failure(lease_of(job), True, at(i), "E", f"fail {i}")], now=at(i)
        )
        states.append(result.state)
    assert states == [JobState.PENDING, JobState.PENDING, JobState.DEAD]
    assert [a.outcome for a in ledger.backend.history.attempts(job_id)] == [
        AttemptOutcome.RETRY,
        AttemptOutcome.RETRY,
        AttemptOutcome.DEAD,
    ]


# -- through the worker, with an explicit clock ----------------------------------------------------


def run_burst(ledger, now, **options):
    return ledger.run_worker(
        ["w"], concurrency=2, burst=True, clock=lambda: now, handle_signals=False, **options
    )


@pytest.mark.parametrize("value", [0, 1001, True, 2.0, "3"])
def test_a_bad_attempt_budget_is_refused_when_the_task_is_built(ledger, value):
    from jobledger import ConfigError

    with pytest.raises(ConfigError, match="max_attempts must be a whole number from 1 to 1000"):
        ledger.task(lambda ctx: None, name="bad", max_attempts=value)


def test_a_budget_of_exactly_1000_attempts_is_accepted(ledger):
    # The bound is inclusive, as the message says ("from 1 to 1000").
    assert ledger.task(lambda ctx: None, name="patient", max_attempts=1000).max_attempts == 1000


def test_worker_records_each_outcome(ledger):
    calls = []

    @ledger.task(queue="w", max_attempts=3)
    def flaky(ctx, mode: str) -> None:
        calls.append((ctx.key, ctx.attempt))
        if mode == "transient":
            raise ConnectionError("provider unreachable")
        if mode == "permanent":
            raise Permanent("customer has no e-mail address")
        if mode == "retry-later":
            raise Retry("provider asked us to wait", after=120)

    for mode in ("ok", "transient", "permanent", "retry-later"):
        ledger.enqueue(flaky, {"mode": mode}, key=mode, now=T0)
    stats = run_burst(ledger, T0)
    assert (stats.completed, stats.retried, stats.dead) == (1, 2, 1)
    ok, transient, permanent, later = (
        ledger.job_by_key(k) for k in ("ok", "transient", "permanent", "retry-later")
    )
    assert ok.state is JobState.DONE
    assert transient.state is JobState.PENDING and transient.last_error_class == "ConnectionError"
    assert (
        T0 <= transient.run_at <= T0 + timedelta(seconds=2)
    )  # backoff ceiling after attempt 1 is 2 s
    assert "ConnectionError: provider unreachable" in transient.last_traceback
    assert (
        permanent.state is JobState.DEAD
        and permanent.last_error == "customer has no e-mail address"
    )
    assert later.state is JobState.PENDING and later.run_at == T0 + timedelta(seconds=120)


def test_429_three_times_then_400_is_dead_after_three_backoffs(ledger):
    """Drill 5, first half: 429 three times (backing off each time), then 400 → dead."""

    class Response:
        def __init__(self, status, retry_after=None):
            self.status_code = status
            self.headers = {"Retry-After": retry_after} if retry_after else {}
            self.text = f"status {status}"

    answers = [Response(429, "7"), Response(429, None), Response(429, "30"), Response(400)]

    @ledger.task(queue="w", max_attempts=8)
    def call_provider(ctx) -> None:
        from jobledger import check_response

        check_response(answers[ctx.attempt - 1])

    job_id, _ = ledger.enqueue(call_provider, {}, key="drill5", now=T0)
    now = T0
    run_ats = []
    for _ in range(4):
        run_burst(ledger, now)
        row = ledger.job(job_id)
        if row.state is JobState.PENDING:
            run_ats.append((row.run_at - now).total_seconds())
            now = row.run_at
    row = ledger.job(job_id)
    assert row.state is JobState.DEAD and row.attempts == 4 and row.last_error_class == "HTTP 400"
    assert run_ats[0] == 7 and 0 <= run_ats[1] <= 4 and run_ats[2] == 30
    outcomes = [a.outcome for a in ledger.backend.history.attempts(job_id)]
    assert outcomes == [AttemptOutcome.RETRY] * 3 + [AttemptOutcome.DEAD]


def test_unknown_task_is_retried_not_lost(ledger):
    ledger.task(lambda ctx: None, name="known", queue="w")
    job_id, _ = ledger.enqueue("renamed_task", {}, key="k", queue="w", now=T0)
    run_burst(ledger, T0)
    row = ledger.job(job_id)
    assert row.state is JobState.PENDING and row.last_error_class == "UnknownTask"


def test_payload_that_no_longer_fits_the_handler_is_dead(ledger):
    @ledger.task(queue="w", name="changed")
    def v1(ctx, a: int) -> None:
        pass

    job_id, _ = ledger.enqueue(v1, {"a": 1}, key="k", now=T0)
    ledger._tasks.clear()

    @ledger.task(queue="w", name="changed")
    def v2(ctx, b: int) -> None:
        pass

    run_burst(ledger, T0)
    row = ledger.job(job_id)
    assert row.state is JobState.DEAD and row.last_error_class == "PayloadError"


class _Unprintable(Exception):
    """An exception whose message cannot be read: its ``__str__`` raises."""

    def __str__(self) -> str:
        raise RuntimeError("no message today")


@pytest.mark.parametrize("is_async", [False, True])
def test_an_exception_whose_message_cannot_be_read_is_a_failure_like_any_other(ledger, is_async):
    """The attempt ends as its class says (transient: retried), recorded with a message that
    says its own could not be read, at once: never a job left leased until its lease runs
    out because the outcome could not be written."""
    if is_async:

        async def handler(ctx) -> None:
            raise _Unprintable()
    else:

        def handler(ctx) -> None:
            raise _Unprintable()

    task = ledger.task(handler, queue="w", name="unprintable", max_attempts=2, lease_seconds=3600)

    job_id, _ = ledger.enqueue(task, {}, key="k", now=T0)
    run_burst(ledger, T0)
    row = ledger.job(job_id)
    assert (row.state, row.attempts, row.last_error_class) == (
        JobState.PENDING,
        1,
        "_Unprintable",
    )
    assert row.last_error == "_Unprintable (its message could not be read: RuntimeError)"
    assert "_Unprintable" in (row.last_traceback or "")


@pytest.mark.parametrize("is_async", [False, True])
def test_an_exception_with_a_nul_in_its_message_is_recorded_with_it_visible(ledger, is_async):
    """U+0000 in a handler's exception (a C library's message, bytes decoded as text): the
    attempt is recorded at once, on both backends alike, with each NUL written as ``\\x00``.
    PostgreSQL cannot store a NUL in text: the outcome was never written, the worker tried
    again and again, and the job stayed leased."""
    message = "bad\x00byte"
    if is_async:

        async def handler(ctx) -> None:
            raise RuntimeError(message)
    else:

        def handler(ctx) -> None:
            raise RuntimeError(message)

    task = ledger.task(handler, queue="w", name="nul", max_attempts=2, lease_seconds=3600)
    job_id, _ = ledger.enqueue(task, {}, key="k", now=T0)
    run_burst(ledger, T0)
    row = ledger.job(job_id)
    assert (row.state, row.attempts, row.last_error) == (JobState.PENDING, 1, "bad\\x00byte")
    assert "bad\\x00byte" in row.last_traceback and "\x00" not in row.last_traceback
    [attempt] = ledger.history(job_id).attempts
    assert (attempt.outcome, attempt.error_message) == (AttemptOutcome.RETRY, "bad\\x00byte")


def test_an_error_with_half_a_surrogate_pair_or_a_long_class_is_recorded_as_it_can_be(ledger):
    """Half of a surrogate pair in a handler's exception (bytes decoded with
    ``surrogateescape``, a file name) or in the error class a ``Retry`` names: neither driver
    could encode it, the outcome was never written, and the job stayed leased. It is kept
    escaped now, as U+0000 is; an error class is cut at 255 characters, as a message is at
    4,000 (one of 100,000 was stored whole)."""

    def handler(ctx, how: str) -> None:
        if how == "message":
            raise OSError("no such file: \udcff.csv")
        raise Retry("later", after=60, error_class="Quota\ud800" + "x" * 1000)

    task = ledger.task(handler, queue="w", name="odd", max_attempts=2, lease_seconds=3600)
    message, _ = ledger.enqueue(task, {"how": "message"}, key="m", now=T0)
    named, _ = ledger.enqueue(task, {"how": "class"}, key="c", now=T0)
    _burst_ends(ledger, T0)
    row = ledger.job(message)
    assert (row.state, row.attempts) == (JobState.PENDING, 1)
    assert row.last_error == "no such file: \\udcff.csv" and "\\udcff" in row.last_traceback
    row = ledger.job(named)
    assert (row.state, row.run_at) == (JobState.PENDING, T0 + timedelta(seconds=60))
    # Cut at 255 characters, then the half pair written as its six-character escape.
    assert row.last_error_class == "Quota\\ud800" + "x" * 249


@pytest.mark.parametrize(
    "after",
    [1e12, 1e300, datetime.max.replace(tzinfo=UTC)],
    ids=["1e12-seconds", "1e300-seconds", "datetime-max"],
)
def test_a_retry_later_than_the_ledger_keeps_waits_until_the_latest_time_it_keeps(ledger, after):
    """A handler's ``Retry(after=...)`` past the latest time the ledger keeps (or past what a
    datetime holds) is recorded at once as a retry at that time: never an internal error that
    leaves the job leased until its lease runs out."""

    def handler(ctx) -> None:
        raise Retry("come back much later", after=after)

    task = ledger.task(handler, queue="w", name="later", max_attempts=2, lease_seconds=3600)
    job_id, _ = ledger.enqueue(task, {}, key="k", now=T0)
    run_burst(ledger, T0)
    row = ledger.job(job_id)
    assert (row.state, row.attempts, row.run_at, row.last_error) == (
        JobState.PENDING,
        1,
        LATEST_TIME,
        "come back much later",
    )
    [attempt] = ledger.history(job_id).attempts
    assert attempt.outcome is AttemptOutcome.RETRY


@pytest.mark.parametrize("is_async", [False, True])
def test_sync_and_async_handlers(ledger, is_async):
    seen = []
    if is_async:

        async def handler(ctx, n: int) -> None:
            seen.append((n, ctx.key, ctx.job_id, ctx.attempt, ctx.queue))
    else:

        def handler(ctx, n: int) -> None:
            seen.append((n, ctx.key, ctx.job_id, ctx.attempt, ctx.queue))

    task = ledger.task(handler, name="h", queue="w")
    job_id, _ = ledger.enqueue(task, {"n": 5}, key="five", now=T0)
    run_burst(ledger, T0)
    assert seen == [(5, "five", job_id, 1, "w")]
    assert ledger.job(job_id).state is JobState.DONE


def _burst_ends(ledger, now, **options) -> None:
    """``run_burst``, which must end: a worker whose runner wrote no outcome held the job (and
    renewed its lease) for ever, so its burst never ended."""
    done = threading.Event()

    def run() -> None:
        run_burst(ledger, now, **options)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    wait_until(done.is_set, timeout=60, what="the burst to end")


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(
    ("make", "error_class", "message"),
    [
        (lambda: Retry(after=datetime(2030, 1, 1)), "ValueError", "Retry(after=datetime"),
        (lambda: Retry(after=float("nan")), "TypeError", "Retry(after=nan): pass seconds"),
        (lambda: Retry(after="soon"), "ValueError", "Retry(after='soon'): neither"),
        (lambda: Permanent(7), "TypeError", "Permanent's reason must be a text, got 7"),
    ],
    ids=["naive-datetime", "nan", "unreadable-text", "permanent-of-a-number"],
)
def test_an_outcome_no_outcome_can_hold_fails_the_attempt_in_the_handler(
    ledger, is_async, make, error_class, message
):
    """``Retry(after=<naive datetime>)`` and ``Permanent(7)`` passed the handler and failed
    where the worker read them: no outcome was written, the worker kept the job leased and its
    lease renewed for as long as it ran, and a burst never ended. Now making one raises in the
    handler: a transient failure like any other exception, recorded at once."""
    if is_async:

        async def handler(ctx) -> None:
            raise make()
    else:

        def handler(ctx) -> None:
            raise make()

    task = ledger.task(handler, queue="w", name="odd", max_attempts=2, lease_seconds=3600)
    job_id, _ = ledger.enqueue(task, {}, key="k", now=T0)
    _burst_ends(ledger, T0)
    row = ledger.job(job_id)
    assert (row.state, row.attempts, row.last_error_class) == (JobState.PENDING, 1, error_class)
    assert row.last_error.startswith(message)


def test_a_retry_after_a_timedelta_or_a_header_s_seconds_waits_that_long(ledger):
    def handler(ctx, after: str) -> None:
        raise Retry("later", after=timedelta(minutes=5) if after == "timedelta" else after)

    task = ledger.task(handler, queue="w", name="later", max_attempts=2, lease_seconds=3600)
    first, _ = ledger.enqueue(task, {"after": "timedelta"}, key="a", now=T0)
    second, _ = ledger.enqueue(task, {"after": "120"}, key="b", now=T0)
    _burst_ends(ledger, T0)
    assert ledger.job(first).run_at == T0 + timedelta(minutes=5)
    assert ledger.job(second).run_at == T0 + timedelta(seconds=120)


def test_a_bug_after_the_handler_lets_the_lease_expire_instead_of_holding_it(
    ledger, monkeypatch, caplog
):
    """Whatever goes wrong between a handler's return and its outcome's hand-over, the worker
    stops renewing the job's lease: it expires, and the rescuer hands the job out again with
    the attempt charged, as after a crashed worker. Before, the worker kept the job leased for
    as long as it ran (and a burst never ended)."""
    from jobledger._runtime.runtime import Runtime

    def handler(ctx) -> None:
        raise RuntimeError("provider down")

    def broken(self, hold, cause, duration):
        raise KeyError("a bug of the runtime")

    monkeypatch.setattr(Runtime, "fail", broken)
    task = ledger.task(handler, queue="w", name="bug", max_attempts=3, lease_seconds=30)
    job_id, _ = ledger.enqueue(task, {}, key="k", now=T0)
    _burst_ends(ledger, T0)
    assert "no outcome will be written; its lease is left to expire" in caplog.text
    row = ledger.job(job_id)
    assert (row.state, row.attempts) == (JobState.LEASED, 1)
    assert row.lease_until == T0 + timedelta(seconds=30)
    [rescued] = ledger.rescue(now=T0 + timedelta(seconds=31))
    assert rescued.job_id == job_id
    assert ledger.job(job_id).state is JobState.PENDING


def test_an_outcome_the_storage_refuses_holds_back_no_other_and_is_given_up(
    ledger, monkeypatch, caplog
):
    """A batch of outcomes that failed with an error that is no outage was written again,
    whole, for as long as the worker ran: one outcome the storage refused held back every
    other of its batch, and its job stayed leased. Now the batch is written item by item, and
    an item refused alone three times is given up: its lease expires and the rescuer hands
    the job out again, its attempt charged."""
    from jobledger._runtime.completer import TRIES_ALONE
    from jobledger._runtime.outcomes import Recorder

    write = Recorder.write
    tries = []

    def refusing(self, batch):
        if any(item.hold.job.key == "poison" for item in batch):
            tries.append(len(batch))
            raise ValueError("the storage refuses this outcome")
        return write(self, batch)

    monkeypatch.setattr(Recorder, "write", refusing)
    task = ledger.task(lambda ctx: None, queue="w", name="ok", max_attempts=3, lease_seconds=30)
    ids = {k: ledger.enqueue(task, {}, key=k, now=T0)[0] for k in ("a", "poison", "b")}
    _burst_ends(ledger, T0, batch_size=10)
    assert ledger.job(ids["a"]).state is ledger.job(ids["b"]).state is JobState.DONE
    assert tries.count(1) == TRIES_ALONE  # written alone three times, then given up
    assert "its outcome was refused 3 times; given up" in caplog.text
    poison = ledger.job(ids["poison"])
    assert (poison.state, poison.attempts) == (JobState.LEASED, 1)
    [rescued] = ledger.rescue(now=T0 + timedelta(seconds=31))
    assert rescued.job_id == ids["poison"]
    assert ledger.job(ids["poison"]).state is JobState.PENDING
