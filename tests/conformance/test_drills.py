"""SPEC §8 drills 1–4 with real worker processes killed by SIGKILL at named fault points.

Drill 1 (same key twice → one row) is ``test_enqueue.test_same_key_twice_makes_one_row``; drill 5
is ``test_retries.test_429_three_times_then_400_is_dead_after_three_backoffs`` plus
``test_drill5_redrive_does_not_repeat_the_effect`` below.
"""

from __future__ import annotations

import pytest

from jobledger import JobState
from jobledger._records import AttemptOutcome
from jobledger.testing.fakeprovider import FakeProvider

from ..support.processes import (
    killed_by_sigkill,
    terminate,
    wait_exit,
    wait_until,
    worker_process,
)


@pytest.fixture
def provider():
    with FakeProvider() as p:
        yield p


def drill_worker(db_url, provider, *args, faults=None, lease=2.0):
    return worker_process(
        "tests.apps.drill_app:ledger",
        db_url,
        "--concurrency",
        "1",
        "--batch-size",
        "1",
        "--poll-interval",
        "0.05",
        "--rescue-interval",
        "0.1",
        *args,
        faults=faults,
        env={"PROVIDER_URL": provider.url, "DRILL_LEASE_SECONDS": str(lease)},
    )


def run_until(ledger, db_url, provider, ids, lease=2.0):
    """Run a worker until every job in ``ids`` is finished, then stop it with SIGTERM."""
    proc = drill_worker(db_url, provider, lease=lease)
    try:
        wait_until(
            lambda: all(ledger.job(i).state.is_final for i in ids),
            timeout=60,
            what="the jobs to finish",
            progress=lambda: sum(ledger.job(i).state.is_final for i in ids),
        )
    finally:
        terminate(proc)
    code, _, err = wait_exit(proc)
    assert code == 0, err


def enqueue_sends(ledger, count: int, lease: float = 2.0) -> list[int]:
    ledger.task(
        lambda ctx, n: None, name="send", queue="drill", lease_seconds=lease, max_attempts=5
    )
    return [ledger.enqueue("send", {"n": n}, key=f"customer-{n}:2026-W33").id for n in range(count)]


def test_drill2_killed_after_claim_is_reclaimed_only_after_the_lease_expires(
    ledger, db_url, provider
):
    [job_id] = enqueue_sends(ledger, 1)
    victim = drill_worker(db_url, provider, faults="worker.after_claim=kill")
    code, _, err = wait_exit(victim)
    assert killed_by_sigkill(code), err
    held = ledger.job(job_id)
    assert held.state is JobState.LEASED
    run_until(ledger, db_url, provider, [job_id])
    first, second = ledger.backend.history.attempts(job_id)
    assert first.outcome is AttemptOutcome.LEASE_EXPIRED
    assert second.started_at >= held.lease_until, "reclaimed before the lease expired"
    assert second.outcome is AttemptOutcome.DONE and second.worker != first.worker
    assert provider.stats()["accepted"] == 1


def test_drill3_killed_between_effect_and_completion_effect_happens_once(ledger, db_url, provider):
    [job_id] = enqueue_sends(ledger, 1)
    victim = drill_worker(db_url, provider, faults="effect.after_call=kill")
    code, _, err = wait_exit(victim)
    assert killed_by_sigkill(code), err
    assert provider.stats()["accepted"] == 1  # the effect happened, then the worker died
    run_until(ledger, db_url, provider, [job_id])
    job = ledger.job(job_id)
    assert job.state is JobState.DONE and job.attempts == 2
    stats = provider.stats()
    assert stats["accepted"] == 1 and stats["duplicates"] == 1  # the retry carried the same key
    effects = ledger.backend.effects.all("drill", job.key)
    assert [(e["effect"], e["attempt"]) for e in effects] == [("email", 2)]


def test_drill4_staging(ledger, db_url, provider):
    """10 jobs; lease 3; complete 2; let 1 lease expire; restart → 10 done, the expired job with 2 attempts."""
    ids = enqueue_sends(ledger, 10, lease=3.0)
    victim = drill_worker(db_url, provider, faults="worker.after_claim=kill@3", lease=3.0)
    code, _, err = wait_exit(victim)
    assert killed_by_sigkill(code), err
    states = [ledger.job(i).state for i in ids]
    assert states.count(JobState.DONE) == 2 and states.count(JobState.LEASED) == 1
    expired = ids[states.index(JobState.LEASED)]
    run_until(ledger, db_url, provider, ids, lease=3.0)
    jobs = [ledger.job(i) for i in ids]
    assert all(j.state is JobState.DONE for j in jobs)
    assert {j.id: j.attempts for j in jobs if j.attempts != 1} == {expired: 2}
    assert provider.stats()["accepted"] == 10 and provider.stats()["duplicates"] == 0


def test_drill5_redrive_does_not_repeat_the_effect(ledger, db_url, provider):
    """Drill 5, second half: a dead job whose effect already happened is redriven; the effect is
    not repeated. (The first half — 429 three times, then 400 — is in test_retries.)"""
    [job_id] = enqueue_sends(ledger, 1)
    # Attempt 1 reaches the provider and records the effect; the provider's answer to a later
    # call was a 400, so the job is dead — the state an operator finds.
    from jobledger._records import Failure, Lease

    [job] = ledger.backend.jobs.claim(["drill"], "earlier-worker", 1)
    lease = Lease(job.id, job.lease_token, job.attempt)
    provider._handle(f"{job.key}:email", {"to": "customer-0"})
    ledger.backend.effects.record("drill", job.key, "email", lease)
    ledger.backend.jobs.fail([Failure(lease, False, None, "HTTP 400", "rejected")])
    assert ledger.job(job_id).state is JobState.DEAD
    assert ledger.redrive(ids=[job_id], actor="ana", reason="drill 5").ids == [job_id]
    code, _, err = wait_exit(drill_worker(db_url, provider, "--burst"))
    assert code == 0, err
    job = ledger.job(job_id)
    assert job.state is JobState.DONE and job.attempts == 2
    assert provider.stats()["requests"] == 1  # the redriven attempt did not call the provider
