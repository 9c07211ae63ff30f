"""A PostgreSQL claim whose answer is lost: the claim committed — its jobs are leased, their
attempts opened — but the connection failed before the rows reached the claimer (the server
went away at the commit), or ``quick_prepared`` sent the claim again on another connection after the
first send had committed. Nobody holds those jobs' tokens. Each claim draws its tokens from a
random value of its own (``lease_set``), so the claimer can name its own lost jobs and give
them back — pending, the attempt not charged — at its next claim, instead of leaving them
leased to nobody until their leases expire and charging them an attempt (a job allowed one
attempt would go dead without ever running).

The lost answer is made here by letting the real statement commit and then raising, as a
dropped connection does between the server's commit and its reply.
"""

from __future__ import annotations

from typing import Any

import pytest

from jobledger import JobState, Ledger
from jobledger._records import AttemptOutcome, Lease
from jobledger.errors import BackendUnavailable

pytestmark = pytest.mark.postgres_only


@pytest.fixture
def ledger(pg):
    schema, url = pg.new_schema_url()
    led = Ledger(url)
    led.task(lambda ctx, n: None, name="once", queue="q", max_attempts=1, lease_seconds=300)
    try:
        yield led
    finally:
        led.close()
        pg.drop_schema(schema)


def fill(ledger: Ledger, n: int, group: str | None = None) -> list[int]:
    specs = [{"payload": {"n": i}, "key": f"k{i}", "group": group} for i in range(n)]
    return [r.id for r in ledger.enqueue_many("once", specs)]


def lose_the_answer_of_the_next(db: Any, monkeypatch: pytest.MonkeyPatch, method: str) -> list[Any]:
    """The next claim through ``db.<method>`` commits, and raises as a lost reply does."""
    real = getattr(db, method)
    lost: list[Any] = []

    def committed_then_lost(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        if not lost and claims(*args):
            lost.append(result)
            raise BackendUnavailable("server closed the connection unexpectedly")
        return result

    monkeypatch.setattr(db, method, committed_then_lost)
    return lost


def claims(*args: Any) -> bool:
    """Whether a call of ``quick_prepared(statement, params)`` is a claim (a grouped claim
    always is)."""
    return len(args) < 2 or not isinstance(args[1], dict) or "claim" in args[1]


def test_the_jobs_of_a_claim_whose_answer_was_lost_are_given_back_uncharged(ledger, monkeypatch):
    ids = fill(ledger, 6)
    jobs = ledger.backend.jobs
    lost = lose_the_answer_of_the_next(ledger.backend.db, monkeypatch, "quick_prepared")
    with pytest.raises(BackendUnavailable):
        jobs.claim(["q"], "w", 4)
    assert len(lost[0]) == 4  # leased in the database, never seen by the claimer
    assert {ledger.job(i).state for i in ids} == {JobState.LEASED, JobState.PENDING}

    # The next claim gives them back first, then claims as usual: every job, none charged.
    claimed = jobs.claim(["q"], "w", 10)
    assert sorted(j.id for j in claimed) == ids
    for job in claimed:
        row = ledger.job(job.id)
        assert row.state is JobState.LEASED and row.lease_token == job.lease_token
    again = {j.id for j in claimed if j.attempt == 2}
    assert again == {r[0] for r in lost[0]}
    for job_id in again:
        outcomes = [a.outcome for a in ledger.backend.history.attempts(job_id)]
        assert outcomes == [AttemptOutcome.RELEASED, None]
    # Allowed one attempt, each runs to its end: nothing went dead for a lost answer.
    leases = [Lease(j.id, j.lease_token, j.attempt) for j in claimed]
    assert jobs.complete(leases) == []
    assert {ledger.job(i).state for i in ids} == {JobState.DONE}


def test_a_claim_sent_again_after_its_first_send_committed_gives_back_the_first(
    ledger, monkeypatch
):
    """``quick_prepared`` sends a claim again when the connection failed; here the first send
    had committed. The claimer gets the second send's jobs and gives the first's back at once."""
    ids = fill(ledger, 6)
    db = ledger.backend.db
    real = db.quick_prepared
    sent: list[Any] = []

    def twice(statement: Any, params: dict[str, Any]) -> Any:
        if not sent and "claim" in params:
            sent.append(real(statement, params))  # committed; its answer lost
            db.resent += 1
        return real(statement, params)

    monkeypatch.setattr(db, "quick_prepared", twice)
    claimed = ledger.backend.jobs.claim(["q"], "w", 3)
    first = {r[0] for r in sent[0]}
    assert len(claimed) == 3 and len(first) == 3 and not first & {j.id for j in claimed}
    for job_id in first:
        row = ledger.job(job_id)
        assert row.state is JobState.PENDING and row.attempts == 1 and row.attempt_limit == 2
    assert {ledger.job(j.id).state for j in claimed} == {JobState.LEASED}
    assert sorted([j.id for j in claimed] + sorted(first)) == ids


def test_a_grouped_claim_whose_commit_lost_its_answer_is_given_back(ledger, monkeypatch):
    ids = fill(ledger, 4, group="tenant-1")
    jobs = ledger.backend.jobs
    lose_the_answer_of_the_next(jobs._grouped, monkeypatch, "claim")  # type: ignore[attr-defined]
    with pytest.raises(BackendUnavailable):
        jobs.claim(["q"], "w", 2)
    assert sum(ledger.job(i).state is JobState.LEASED for i in ids) == 2
    claimed = jobs.claim(["q"], "w", 10)
    assert sorted(j.id for j in claimed) == ids


def test_the_give_back_never_touches_a_lease_someone_holds(ledger, monkeypatch):
    """Another runtime under the same worker name holds jobs (names are the operator's to
    choose): their tokens come from its own claims, and the give-back leaves them leased."""
    fill(ledger, 6)
    jobs = ledger.backend.jobs
    held = jobs.claim(["q"], "w", 2)  # the other holder's claim (same name), answered
    lose_the_answer_of_the_next(ledger.backend.db, monkeypatch, "quick_prepared")
    with pytest.raises(BackendUnavailable):
        jobs.claim(["q"], "w", 2)
    jobs.claim(["q"], "w", 10)
    for job in held:
        row = ledger.job(job.id)
        assert row.state is JobState.LEASED and row.lease_token == job.lease_token
        assert row.attempts == 1


def test_the_failed_claims_of_an_outage_do_not_pile_up(ledger, monkeypatch):
    """Every claim of a long outage fails. The first, caught at its commit, committed; the
    others never reached the server. Each claim first tries to give back what is kept, which
    fails while the database is away, so nothing more is kept (and at most MAX_UNANSWERED in
    any case): after the outage one statement gives the first claim's jobs back."""
    from jobledger.backends.postgres.jobs import MAX_UNANSWERED

    ids = fill(ledger, 3)
    jobs = ledger.backend.jobs
    db = ledger.backend.db
    lose_the_answer_of_the_next(db, monkeypatch, "quick_prepared")
    with pytest.raises(BackendUnavailable):
        jobs.claim(["q"], "w", 2)  # committed, the answer lost
    real_quick, real_run = db.quick_prepared, db.run
    calls: list[str] = []

    def quick_away(statement: Any, params: dict[str, Any]) -> Any:
        raise BackendUnavailable("connection refused")

    def run(name: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        if away:
            raise BackendUnavailable("connection refused")
        return real_run(name, *args, **kwargs)

    away = True
    monkeypatch.setattr(db, "quick_prepared", quick_away)
    monkeypatch.setattr(db, "run", run)
    for _ in range(3 * MAX_UNANSWERED):
        with pytest.raises(BackendUnavailable):
            jobs.claim(["q"], "w", 2)
    assert len(jobs._unanswered) == 1  # type: ignore[attr-defined]
    away = False
    monkeypatch.setattr(db, "quick_prepared", real_quick)
    calls.clear()
    claimed = jobs.claim(["q"], "w", 10)
    assert calls.count("job_claim_unanswered") == 1
    assert sorted(j.id for j in claimed) == ids  # the first claim's two jobs, given back
