"""Effects and transactions: transactional completion, the effects table, ctx.once (SPEC §4)."""

from __future__ import annotations

import pytest

from jobledger import JobState, LeaseLost

from .conftest import T0, at


def _make_table(ledger) -> None:
    with ledger.backend.transaction() as conn:
        conn.execute(
            _sql(ledger, "CREATE TABLE holds (id integer PRIMARY KEY, released boolean NOT NULL)")
        )
        conn.execute(_sql(ledger, "INSERT INTO holds (id, released) VALUES (1842, false)"))


def _released(ledger) -> bool:
    with ledger.backend.transaction() as conn:
        return bool(
            conn.execute(_sql(ledger, "SELECT released FROM holds WHERE id = 1842")).fetchone()[0]
        )


def _sql(ledger, text: str) -> str:
    """The test's SQL in the backend's dialect; on PostgreSQL the table lives in the test's schema."""
    if ledger.url.dialect == "postgres":
        return (
            text.replace("?", "%s")
            .replace(" holds", f" {ledger.url.schema}.holds")
            .replace(" jobledger_jobs", f" {ledger.url.schema}.jobledger_jobs")
        )
    return text


def run_burst(ledger):
    return ledger.run_worker(["holds"], concurrency=1, burst=True, handle_signals=False)


def test_transactional_completion_commits_both(ledger):
    _make_table(ledger)

    @ledger.task(queue="holds")
    def release_hold(ctx, hold_id: int) -> None:
        with ctx.transaction() as conn:
            conn.execute(_sql(ledger, "UPDATE holds SET released = true WHERE id = ?"), (hold_id,))
            ctx.record_effect("release", conn=conn)

    job_id, _ = ledger.enqueue(
        release_hold, {"hold_id": 1842}, key="lease-expiry:property-1842:lease-77"
    )
    stats = run_burst(ledger)
    assert stats.completed == 1
    assert _released(ledger) and ledger.job(job_id).state is JobState.DONE
    assert (
        ledger.backend.effects.get("holds", "lease-expiry:property-1842:lease-77", "release")
        is not None
    )


def test_transactional_completion_rolled_back_with_the_handler(ledger):
    _make_table(ledger)

    @ledger.task(queue="holds", max_attempts=1)
    def release_hold(ctx, hold_id: int) -> None:
        with ctx.transaction() as conn:
            conn.execute(_sql(ledger, "UPDATE holds SET released = true WHERE id = ?"), (hold_id,))
            raise RuntimeError("validation failed after the write")

    job_id, _ = ledger.enqueue(release_hold, {"hold_id": 1842}, key="h")
    run_burst(ledger)
    assert not _released(ledger)
    row = ledger.job(job_id)
    assert row.state is JobState.DEAD and "validation failed" in row.last_error


def test_transactional_completion_with_a_lost_lease_commits_nothing(ledger):
    _make_table(ledger)
    ledger.task(lambda ctx, hold_id: None, name="release_hold", queue="holds")
    job_id, _ = ledger.enqueue("release_hold", {"hold_id": 1842}, key="h", now=T0)
    [old] = ledger.backend.jobs.claim(["holds"], "a", 1, now=T0)
    ledger.backend.jobs.rescue(now=at(120))
    ledger.backend.jobs.claim(["holds"], "b", 1, now=at(121))

    from jobledger._runtime.context import JobContext, LeaseHold

    ctx = JobContext(LeaseHold(old), ledger.backend, lambda hold: None, lambda: at(122))
    with pytest.raises(LeaseLost), ctx.transaction() as conn:
        conn.execute(_sql(ledger, "UPDATE holds SET released = true WHERE id = ?"), (1842,))
    assert not _released(ledger)
    assert ledger.job(job_id).state is JobState.LEASED


def test_once_skips_an_effect_already_recorded(ledger):
    calls = []

    @ledger.task(queue="holds", max_attempts=3)
    def notify(ctx, n: int) -> None:
        ctx.once("email", calls.append, ctx.idempotency_key("email"))
        if ctx.attempt == 1:
            raise TimeoutError("provider answered too late")

    job_id, _ = ledger.enqueue(notify, {"n": 1}, key="4187:2026-W33")
    run_burst(ledger)  # attempt 1: sends, records, then fails
    assert ledger.job(job_id).state is JobState.PENDING
    with ledger.backend.transaction() as conn:  # make the retry due now
        conn.execute(
            _sql(ledger, "UPDATE jobledger_jobs SET run_at = created_at WHERE id = ?"), (job_id,)
        )
    run_burst(ledger)  # attempt 2: effect already recorded → not sent again
    assert calls == ["4187:2026-W33:email"]
    assert ledger.job(job_id).state is JobState.DONE and ledger.job(job_id).attempts == 2
