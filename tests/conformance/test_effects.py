"""Effects and transactions: transactional completion, the effects table, ctx.once (SPEC §4)."""

from __future__ import annotations

import asyncio
import threading
from uuid import uuid4

import pytest

from jobledger import JobState, LeaseLost, PayloadError
from jobledger._records import Lease

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


def test_a_second_transactional_completion_is_refused_before_its_block_runs(ledger):
    _make_table(ledger)
    seen = []

    @ledger.task(queue="holds")
    def release_hold(ctx, hold_id: int) -> None:
        with ctx.transaction() as conn:
            conn.execute(_sql(ledger, "UPDATE holds SET released = true WHERE id = ?"), (hold_id,))
        try:
            with ctx.transaction() as conn:
                seen.append("the second block ran")
                conn.execute(
                    _sql(ledger, "UPDATE holds SET released = false WHERE id = ?"), (hold_id,)
                )
        except RuntimeError as exc:
            seen.append(str(exc))

    job_id, _ = ledger.enqueue(release_hold, {"hold_id": 1842}, key="h")
    assert run_burst(ledger).completed == 1
    assert seen == ["this job was already completed in a transaction"]
    assert _released(ledger) and ledger.job(job_id).state is JobState.DONE


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


def _due_now(ledger, job_id: int) -> None:
    with ledger.backend.transaction() as conn:
        conn.execute(
            _sql(ledger, "UPDATE jobledger_jobs SET run_at = created_at WHERE id = ?"), (job_id,)
        )


def test_aonce_awaits_the_effect_once_and_waits_off_the_loop(ledger):
    """An async handler's ``await ctx.aonce(...)``: the coroutine runs once, is recorded, and
    is not repeated by the retry; the lookups and records run on a thread, not on the loop."""
    sent: list[str] = []
    loop_threads: set[int] = set()
    lookup_threads: set[int] = set()
    effects = ledger.backend.effects
    get = effects.get

    def spying_get(*args, **kwargs):
        lookup_threads.add(threading.get_ident())
        return get(*args, **kwargs)

    effects.get = spying_get

    async def send(key: str) -> str:
        await asyncio.sleep(0)
        sent.append(key)
        return "queued"

    @ledger.task(queue="holds", max_attempts=3)
    async def notify(ctx, n: int) -> None:
        loop_threads.add(threading.get_ident())
        assert await ctx.aonce("email", send, ctx.idempotency_key("email")) in ("queued", None)
        assert await ctx.aeffect_recorded("email")
        await ctx.aheartbeat()
        if ctx.attempt == 1:
            raise TimeoutError("provider answered too late")

    job_id, _ = ledger.enqueue(notify, {"n": 1}, key="4187:2026-W33")
    run_burst(ledger)  # attempt 1: sends, records, then fails
    _due_now(ledger, job_id)
    run_burst(ledger)  # attempt 2: already recorded → not sent again
    assert sent == ["4187:2026-W33:email"]
    job = ledger.job(job_id)
    assert job.state is JobState.DONE and job.attempts == 2
    assert lookup_threads and not lookup_threads & loop_threads


def test_once_refuses_a_coroutine_it_would_not_await(ledger):
    """``ctx.once`` with a coroutine function would record an effect that never ran: it raises
    instead, and nothing is recorded (the attempt fails and is retried as usual)."""
    sent: list[str] = []

    async def send(key: str) -> None:
        sent.append(key)

    @ledger.task(queue="holds", max_attempts=1)
    async def notify(ctx, n: int) -> None:
        if n == 1:
            ctx.once("email", send, ctx.key)
        else:
            ctx.once("email", lambda: send(ctx.key))

    first, _ = ledger.enqueue(notify, {"n": 1}, key="a")
    second, _ = ledger.enqueue(notify, {"n": 2}, key="b")
    run_burst(ledger)
    for job_id in (first, second):
        job = ledger.job(job_id)
        assert job.state is JobState.DEAD and "await ctx.aonce" in (job.last_error or "")
        assert ledger.backend.effects.get("holds", job.key, "email") is None
    assert sent == []


# -- the effects role on its own ------------------------------------------------------------------


def _leased(ledger, key: str = "4187:2026-W33"):
    ledger.task(lambda ctx: None, name="hold", queue="holds")
    ledger.enqueue("hold", {}, key=key, now=T0)
    [job] = ledger.backend.jobs.claim(["holds"], "w", 1, now=T0)
    return job, Lease(job.id, job.lease_token, job.attempt)


def test_an_effect_is_recorded_once_for_its_key_under_the_lease(ledger):
    job, lease = _leased(ledger)
    effects = ledger.backend.effects
    assert effects.record("holds", job.key, "email", lease, {"message_id": "m-1"}, now=at(1))
    assert not effects.record("holds", job.key, "email", lease, {"message_id": "m-2"}, now=at(2))
    assert effects.record("holds", job.key, "sms", lease, None, now=at(3))
    email = effects.get("holds", job.key, "email")
    assert email == {
        "queue": "holds",
        "key": job.key,
        "effect": "email",
        "job_id": job.id,
        "attempt": 1,
        "recorded_at": at(1),
        "detail": {"message_id": "m-1"},
    }
    assert [e["effect"] for e in effects.all("holds", job.key)] == ["email", "sms"]
    assert effects.get("holds", job.key, "fax") is None
    assert effects.all("holds", "other") == []


@pytest.mark.parametrize("name", [7, "", "e\x00", "e\n", "e" * 513], ids=repr)
def test_an_effect_s_name_no_effect_can_have_is_refused_alike(ledger, name):
    """SQLite stored a number, an empty name, U+0000 and any length; PostgreSQL refused U+0000
    (and a lookup by it). The name is checked before anything is read or written, so
    ``ctx.once`` refuses it before calling the effect."""
    job, lease = _leased(ledger)
    effects = ledger.backend.effects
    with pytest.raises(PayloadError, match="an effect's name"):
        effects.record("holds", job.key, name, lease, None, now=at(1))
    with pytest.raises(PayloadError, match="an effect's name"):
        effects.get("holds", job.key, name)
    assert effects.all("holds", job.key) == []


@pytest.mark.parametrize(
    "detail",
    [{"ratio": float("nan")}, {"note": "a\x00b"}, {"at": object()}, {"big": "x" * 300_000}],
    ids=["nan", "nul", "object", "big"],
)
def test_an_effect_whose_detail_cannot_be_kept_is_recorded_without_it(ledger, detail, caplog):
    """The effect happened: a record refused for its detail would have it repeated by the
    next attempt. SQLite stored NaN and U+0000 (NaN is no JSON), PostgreSQL's server refused
    them (psycopg's errors reached the handler), both raised for the others. Now one rule:
    recorded, its detail left out, a warning saying why."""
    job, lease = _leased(ledger)
    effects = ledger.backend.effects
    assert effects.record("holds", job.key, "email", lease, detail, now=at(1))
    assert effects.get("holds", job.key, "email")["detail"] is None
    assert "recorded without its detail" in caplog.text
    assert not effects.record("holds", job.key, "email", lease, {"ok": 1}, now=at(2))


def test_an_effect_under_a_stale_lease_is_refused_and_not_recorded(ledger):
    job, lease = _leased(ledger)
    effects = ledger.backend.effects
    ledger.backend.jobs.complete([lease], now=at(1))
    with pytest.raises(LeaseLost):
        effects.record("holds", job.key, "email", lease, None, now=at(2))
    stale = Lease(job.id, str(uuid4()), 1)  # a token no lease ever had
    with pytest.raises(LeaseLost):
        effects.record("holds", job.key, "sms", stale, None, now=at(2))
    assert effects.all("holds", job.key) == []


def test_an_effect_in_the_callers_transaction_goes_with_it(ledger):
    job, lease = _leased(ledger)
    effects = ledger.backend.effects
    with pytest.raises(RuntimeError), ledger.backend.transaction() as conn:
        assert effects.record("holds", job.key, "email", lease, None, now=at(1), conn=conn)
        raise RuntimeError("the handler's own write failed")
    assert effects.get("holds", job.key, "email") is None
    with ledger.backend.transaction() as conn:
        assert effects.record("holds", job.key, "email", lease, None, now=at(2), conn=conn)
    assert effects.get("holds", job.key, "email")["recorded_at"] == at(2)
