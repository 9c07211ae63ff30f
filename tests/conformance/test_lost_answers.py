"""A write whose commit lost its answer: the server went away at the commit (or failed over to a
replica that had it), the caller saw ``BackendUnavailable``, and the write, tried again, finds
its job no longer leased — because it is already there. It counts as written, not as a lost
lease; a write that someone else's move made stale is still refused.

The lost answer is made here by a backend that lets the real write commit and then raises, as
a dropped connection does between the server's commit and its reply (the failover drill,
tests/faults/test_failover.py, meets the same thing for real, when the timing falls so).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from jobledger import JobState, Ledger
from jobledger._records import AttemptOutcome, ClaimedJob, Failure, Lease
from jobledger._runtime.leases import LeaseHold
from jobledger._runtime.outcomes import Finished, Recorder
from jobledger.errors import BackendUnavailable

from .conftest import T0, at, enqueue, lease_of


class AnswerLost:
    """``backend.jobs`` whose named write commits, then raises as if its reply never came."""

    def __init__(self, jobs: Any, method: str):
        self._jobs = jobs
        self._method = method

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._jobs, name)
        if name != self._method:
            return real

        def committed_then_lost(*args: Any, **kwargs: Any) -> Any:
            real(*args, **kwargs)
            raise BackendUnavailable("server closed the connection unexpectedly")

        return committed_then_lost


class Losing:
    """A backend whose ``jobs.<method>`` loses its answer (all else is the real backend's)."""

    def __init__(self, backend: Any, method: str):
        self._backend = backend
        self.jobs = AnswerLost(backend.jobs, method)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)


@dataclass
class Heard:
    outcomes: list[tuple[int, str]] = field(default_factory=list)
    lost: list[tuple[int, str]] = field(default_factory=list)

    def observe(self, observed: list[tuple[ClaimedJob, str, float, str | None]]) -> None:
        self.outcomes += [(job.id, outcome) for job, outcome, _, _ in observed]


class Observers:
    def __init__(self, heard: Heard):
        self.heard = heard

    def outcomes(self, observed: list[tuple[ClaimedJob, str, float, str | None]]) -> None:
        self.heard.observe(observed)

    def lease_lost(self, job: ClaimedJob, action: str) -> None:
        self.heard.lost.append((job.id, action))

    def count(self, **counts: int) -> None:
        pass


def written_twice(
    ledger: Ledger, item: Finished, method: str, heard: Heard, when: float = 3
) -> Finished:
    """Write ``item`` with its answer lost (its commit stands), then write it again."""
    real = ledger.backend
    backend: list[Any] = [Losing(real, method)]
    recorder = Recorder(lambda: backend[0], "w", Observers(heard), lambda: at(when))
    with pytest.raises(BackendUnavailable):
        recorder.write([item])
    backend[0] = real
    recorder.write([item])
    return item


def refusals(ledger: Ledger, job_id: int) -> list[str]:
    return [e.kind for e in ledger.backend.history.events(job_id) if e.kind == "lease_lost"]


def claimed(ledger: Ledger) -> ClaimedJob:
    enqueue(ledger, 1)
    [job] = ledger.backend.jobs.claim(["q"], "w", 1, now=T0)
    return job


def failed(job: ClaimedJob, retry: bool, timed_out: bool = False) -> Finished:
    failure = Failure(
        lease_of(job), retry, at(60) if retry else None, "E", "boom", timed_out=timed_out
    )
    return Finished(LeaseHold(job), failure)


def test_a_completion_whose_answer_was_lost_counts_as_done(ledger, tasks):
    job = claimed(ledger)
    heard = Heard()
    item = written_twice(ledger, Finished(LeaseHold(job), result='{"sent": 1}'), "complete", heard)
    assert item.outcome == "done" and not item.hold.lost
    assert heard.outcomes == [(job.id, "done")] and heard.lost == []
    assert refusals(ledger, job.id) == []
    assert ledger.job(job.id).state is JobState.DONE
    assert [a.outcome for a in ledger.backend.history.attempts(job.id)] == [AttemptOutcome.DONE]


@pytest.mark.parametrize(
    ("retry", "timed_out", "state", "outcome"),
    [
        (True, False, JobState.PENDING, "retry"),
        (False, False, JobState.DEAD, "dead"),
        (True, True, JobState.PENDING, "timed_out"),
    ],
)
def test_a_failure_whose_answer_was_lost_counts_as_written(
    ledger, tasks, retry, timed_out, state, outcome
):
    job = claimed(ledger)
    heard = Heard()
    item = written_twice(ledger, failed(job, retry, timed_out), "fail", heard)
    assert item.outcome == outcome and heard.lost == [] and refusals(ledger, job.id) == []
    assert heard.outcomes == [(job.id, "retry" if state is JobState.PENDING else "dead")]
    assert ledger.job(job.id).state is state


def test_a_timed_out_last_attempt_whose_answer_was_lost_counts_as_dead(ledger, tasks):
    @ledger.task(queue="q", max_attempts=1)
    def last(ctx) -> None:
        pass

    ledger.enqueue(last, {}, key="last", now=T0)
    [job] = ledger.backend.jobs.claim(["q"], "w", 1, now=T0)
    heard = Heard()
    item = written_twice(ledger, failed(job, True, timed_out=True), "fail", heard)
    assert item.outcome == "timed_out" and heard.outcomes == [(job.id, "dead")]
    assert ledger.job(job.id).state is JobState.DEAD and heard.lost == []


def test_a_release_whose_answer_was_lost_counts_as_released(ledger, tasks):
    job = claimed(ledger)
    heard = Heard()
    item = written_twice(ledger, Finished(LeaseHold(job), released=True), "release", heard)
    assert item.outcome == "released" and heard.lost == [] and refusals(ledger, job.id) == []
    assert ledger.job(job.id).state is JobState.PENDING


def test_a_retried_failure_claimed_again_meanwhile_still_counts_as_written(ledger, tasks):
    """Between the lost answer and the second try, another worker claimed the retry: the first
    attempt is closed under its token as this failure closed it; the second is not touched."""
    job = claimed(ledger)
    item = failed(job, retry=True)
    heard = Heard()
    real = ledger.backend
    backend: list[Any] = [Losing(real, "fail")]
    recorder = Recorder(lambda: backend[0], "w", Observers(heard), lambda: at(3))
    with pytest.raises(BackendUnavailable):
        recorder.write([item])
    [again] = real.jobs.claim(["q"], "other", 1, now=at(61))
    assert again.id == job.id and again.attempt == 2
    backend[0] = real
    recorder.write([item])
    assert item.outcome == "retry" and heard.lost == []
    assert ledger.job(job.id).state is JobState.LEASED
    assert ledger.job(job.id).lease_token == again.lease_token


def test_a_write_made_stale_by_someone_else_is_still_refused(ledger, tasks):
    """The rescuer closed the attempt (lease expired) and another worker holds the job: the
    late completion, and a late failure, are refused and recorded as such."""
    job = claimed(ledger)
    ledger.backend.jobs.rescue(now=at(31))
    ledger.backend.jobs.claim(["q"], "other", 1, now=at(32))
    heard = Heard()
    recorder = Recorder(lambda: ledger.backend, "w", Observers(heard), lambda: at(33))
    done, fail = Finished(LeaseHold(job)), failed(job, retry=True)
    recorder.write([done])
    recorder.write([fail])
    assert (done.outcome, fail.outcome) == ("lease_lost", "lease_lost")
    assert heard.lost == [(job.id, "complete"), (job.id, "fail")] and heard.outcomes == []
    assert refusals(ledger, job.id) == ["lease_lost", "lease_lost"]


def test_a_failure_after_the_handler_completed_its_job_itself_counts_as_done(ledger, tasks):
    """The job is done under this very token — the handler's own transaction completed it — and
    the handler raised afterwards: the failure is not taken for written, nor for a lost lease;
    the attempt is done (as the ledger has it)."""
    job = claimed(ledger)
    assert ledger.backend.jobs.complete([lease_of(job)], now=at(2)) == []
    heard = Heard()
    recorder = Recorder(lambda: ledger.backend, "w", Observers(heard), lambda: at(3))
    item = failed(job, retry=True)
    recorder.write([item])
    assert item.outcome == "done" and heard.lost == [] and heard.outcomes == [(job.id, "done")]
    assert ledger.job(job.id).state is JobState.DONE and refusals(ledger, job.id) == []


def test_a_handler_whose_own_transaction_lost_its_commit_answer_is_done_once(ledger, monkeypatch):
    """``ctx.transaction()`` commits the handler's write and the completion together; the answer
    is lost, so the block raises and the handler with it. The job is done, once, and nothing
    in its history says a lease was lost."""

    @ledger.task(queue="w", lease_seconds=30)
    def book(ctx) -> None:
        losing.append(True)
        with ctx.transaction():
            pass

    losing: list[bool] = []
    backend = ledger.backend
    real = backend.transaction

    @contextmanager
    def transaction(*args: Any, **kwargs: Any) -> Iterator[Any]:
        lose = bool(losing) and losing.pop()
        with real(*args, **kwargs) as conn:
            yield conn
        if lose:
            raise BackendUnavailable("server closed the connection unexpectedly")

    monkeypatch.setattr(backend, "transaction", transaction)
    job_id, _ = ledger.enqueue(book, {}, key="booked")
    stats = ledger.run_worker(["w"], burst=True, handle_signals=False)
    assert stats.completed == 1 and stats.lease_lost == 0 and stats.retried == 0
    assert ledger.job(job_id).state is JobState.DONE
    assert [a.outcome for a in backend.history.attempts(job_id)] == [AttemptOutcome.DONE]
    assert refusals(ledger, job_id) == []


def test_a_worker_whose_completion_lost_its_answer_records_it_done_once(ledger, monkeypatch):
    """Through the worker's completer: the batch is kept, written again, and counted done, with
    no lease lost in the job's history."""
    ran = threading.Event()

    @ledger.task(queue="w", lease_seconds=30)
    def send(ctx) -> None:
        ran.set()

    job_id, _ = ledger.enqueue(send, {}, key="once")
    jobs = ledger.backend.jobs
    real: Callable[..., Any] = jobs.complete
    lost = []

    def complete(*args: Any, **kwargs: Any) -> Any:
        stale = real(*args, **kwargs)
        if not lost:
            lost.append(stale)
            raise BackendUnavailable("server closed the connection unexpectedly")
        return stale

    monkeypatch.setattr(jobs, "complete", complete)
    stats = ledger.run_worker(["w"], burst=True, handle_signals=False)
    assert ran.is_set() and lost == [[]]
    assert stats.completed == 1 and stats.lease_lost == 0
    assert ledger.job(job_id).state is JobState.DONE
    assert refusals(ledger, job_id) == []


def test_a_renewal_refused_after_a_completion_lost_its_answer_is_no_lost_lease(ledger, monkeypatch):
    """The completion committed and lost its answer; before the completer writes it again, the
    lease keeper renews the attempt and is refused (the job is done). That refusal is the
    completion's own write: no lease is lost, in the counts or the job's history."""
    from jobledger._runtime.worker import Worker

    @ledger.task(queue="w", lease_seconds=30)
    def send(ctx) -> None:
        pass

    job_id, _ = ledger.enqueue(send, {}, key="once")
    worker = Worker(ledger, ["w"], burst=True)
    jobs = ledger.backend.jobs
    real: Callable[..., Any] = jobs.complete
    renewed: list[list[Any]] = []

    def complete(*args: Any, **kwargs: Any) -> Any:
        stale = real(*args, **kwargs)
        if not renewed:
            holds = worker._held()
            renewed.append(holds)
            worker._renew(holds)  # refused: the job is done already
            raise BackendUnavailable("server closed the connection unexpectedly")
        return stale

    monkeypatch.setattr(jobs, "complete", complete)
    stats = worker.run()
    assert [h.job.id for h in renewed[0]] == [job_id]
    assert stats.completed == 1 and stats.lease_lost == 0
    assert ledger.job(job_id).state is JobState.DONE
    assert refusals(ledger, job_id) == []


def test_a_renewal_refused_after_a_completion_in_the_handlers_transaction_is_no_lost_lease(
    ledger,
):
    """The handler completed its job in the ledger's transaction (``ctx.transaction()``); before
    the runner lets go of the attempt, its lease is renewed (the keeper, or the handler's own
    ``ctx.heartbeat()``, as here) and refused: the job is done. That refusal is the handler's own
    completion: no lease is lost, in the counts or the job's history."""
    from jobledger._runtime.worker import Worker

    @ledger.task(queue="w", lease_seconds=30)
    def send(ctx) -> None:
        with ctx.transaction():
            pass
        ctx.heartbeat()  # refused: the job is done already

    job_id, _ = ledger.enqueue(send, {}, key="once")
    stats = Worker(ledger, ["w"], burst=True).run()
    assert stats.completed == 1 and stats.lease_lost == 0
    assert ledger.job(job_id).state is JobState.DONE
    assert refusals(ledger, job_id) == []


def test_settled_tells_a_lease_only_what_its_own_token_closed(ledger, tasks):
    """The recorder asks what a refused write's attempt came to, to tell its own write sent
    again from a write made stale by someone else: the answer must come from the attempt
    closed under that very token. A token that closed nothing gets no answer, even on a job
    whose other attempts ended or that another lease completed; and an attempt that timed out
    and was retried says "retry", even once a later attempt left the job dead."""
    jobs = ledger.backend.jobs
    forged_token = "0" * 32 if ledger.url.dialect == "sqlite" else str(uuid.UUID(int=0))
    job_id = enqueue(ledger, 1)
    [first] = jobs.claim(["q"], "w", 1, now=T0)
    timed_out = Failure(lease_of(first), True, at(1), "Timeout", "ran past", timed_out=True)
    jobs.fail([timed_out], now=at(1))
    [second] = jobs.claim(["q"], "w", 1, now=at(1))
    jobs.fail([Failure(lease_of(second), False, None, "HTTP 400", "no")], now=at(2))
    assert ledger.job(job_id).state is JobState.DEAD
    assert jobs.settled([lease_of(first)]) == {job_id: "retry"}
    assert jobs.settled([lease_of(second)]) == {job_id: "dead"}
    assert jobs.settled([Lease(job_id, forged_token, 2)]) == {}

    done_id = enqueue(ledger, 2)
    [third] = jobs.claim(["q"], "w", 1, now=at(3))
    assert jobs.complete([lease_of(third)], now=at(4)) == []
    assert jobs.settled([lease_of(third)]) == {done_id: "done"}
    assert jobs.settled([Lease(done_id, forged_token, 1)]) == {}
