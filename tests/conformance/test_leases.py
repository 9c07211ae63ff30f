"""Claims, leases, fencing and rescue (SPEC §2)."""

from __future__ import annotations

import threading

import pytest

from jobledger import JobState, LeaseLost
from jobledger._records import AttemptOutcome, Failure, Lease

from .conftest import T0, at, enqueue, lease_of


def test_claim_leases_with_a_new_token_and_opens_an_attempt(ledger, tasks):
    job_id = enqueue(ledger, 1)
    [job] = ledger.backend.jobs.claim(["q"], "worker-a", 10, now=T0)
    assert (job.id, job.attempt, job.lease_until) == (job_id, 1, at(30))
    row = ledger.job(job_id)
    assert (
        row.state is JobState.LEASED
        and row.leased_by == "worker-a"
        and row.lease_token == job.lease_token
    )
    [attempt] = ledger.backend.history.attempts(job_id)
    assert (
        attempt.attempt,
        attempt.worker,
        attempt.lease_token,
        attempt.started_at,
        attempt.outcome,
    ) == (
        1,
        "worker-a",
        job.lease_token,
        T0,
        None,
    )


def test_a_leased_job_is_not_claimed_again(ledger, tasks):
    enqueue(ledger, 1)
    assert len(ledger.backend.jobs.claim(["q"], "a", 10, now=T0)) == 1
    assert ledger.backend.jobs.claim(["q"], "b", 10, now=at(1000)) == []


def test_claim_takes_only_the_named_queues_and_the_limit(ledger, tasks):
    for n in range(5):
        enqueue(ledger, n)
    enqueue(ledger, 99, queue="other")
    assert len(ledger.backend.jobs.claim(["q"], "a", 3, now=T0)) == 3
    assert len(ledger.backend.jobs.claim(["q"], "a", 3, now=T0)) == 2
    assert [j.queue for j in ledger.backend.jobs.claim(["q", "other"], "a", 3, now=T0)] == ["other"]


def test_a_claim_over_several_queues_takes_the_best_across_them_claim_after_claim(ledger, tasks):
    """Each queue is scanned on its own (one row per queue in the claim), and the batch is the
    best across them by priority, then run time, then id — the first claim from the start of
    every queue, the next ones from the positions the first reached; what this process puts
    ahead of a position is found by the next claim."""
    ids = {
        "low": [enqueue(ledger, n, queue="low", now=at(n)) for n in range(3)],
        "high": [enqueue(ledger, 10 + n, queue="high", priority=5, now=at(n)) for n in range(2)],
        "mid": [enqueue(ledger, 20, queue="mid", priority=1)],
    }
    claim = ledger.backend.jobs.claim
    queues = ["low", "high", "mid"]
    first = claim(queues, "a", 4, now=at(10))
    assert [j.id for j in first] == [*ids["high"], *ids["mid"], ids["low"][0]]
    assert [j.id for j in claim(queues, "a", 1, now=at(10))] == [ids["low"][1]]
    urgent = enqueue(ledger, 30, queue="mid", priority=9, now=at(10))
    assert [j.id for j in claim(queues, "a", 5, now=at(10))] == [urgent, ids["low"][2]]
    assert claim(queues, "a", 5, now=at(10)) == []


def test_every_claim_gets_a_new_token(ledger, tasks):
    job_id = enqueue(ledger, 1)
    tokens = set()
    for i in range(3):
        [job] = ledger.backend.jobs.claim(["q"], "a", 1, now=at(i * 100))
        tokens.add(job.lease_token)
        ledger.backend.jobs.fail(
            [Failure(lease_of(job), True, at(i * 100), "E", "again")], now=at(i * 100)
        )
    assert len(tokens) == 3
    assert {a.lease_token for a in ledger.backend.history.attempts(job_id)} == tokens


def test_two_claimers_racing_never_share_a_job(ledger, tasks):
    ledger.enqueue_many("work", [{"payload": {"n": n}, "key": f"k{n}"} for n in range(300)], now=T0)
    got: dict[str, list[int]] = {"a": [], "b": [], "c": []}
    barrier = threading.Barrier(3)

    def claim(name: str) -> None:
        barrier.wait()
        while True:
            jobs = ledger.backend.jobs.claim(["q"], name, 7, now=T0)
            if not jobs:
                return
            got[name].extend(j.id for j in jobs)

    threads = [threading.Thread(target=claim, args=(n,)) for n in got]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = got["a"] + got["b"] + got["c"]
    assert len(everything) == 300 and len(set(everything)) == 300


def test_complete_with_the_current_token(ledger, tasks):
    job_id = enqueue(ledger, 1)
    [job] = ledger.backend.jobs.claim(["q"], "a", 1, now=T0)
    assert ledger.backend.jobs.complete([lease_of(job)], now=at(3)) == []
    row = ledger.job(job_id)
    assert row.state is JobState.DONE and row.finished_at == at(3) and row.lease_until is None
    [attempt] = ledger.backend.history.attempts(job_id)
    assert attempt.outcome is AttemptOutcome.DONE and attempt.finished_at == at(3)


def _expire_and_reclaim(ledger):
    """Claim as A, let the lease expire, rescue, claim as B. Returns (A's job, B's job)."""
    enqueue(ledger, 1)
    [old] = ledger.backend.jobs.claim(["q"], "a", 1, now=T0)
    rescued = ledger.backend.jobs.rescue(now=at(31))
    assert [(r.job_id, r.state) for r in rescued] == [(old.id, JobState.PENDING)]
    [new] = ledger.backend.jobs.claim(["q"], "b", 1, now=at(32))
    assert new.id == old.id and new.attempt == 2 and new.lease_token != old.lease_token
    return old, new


def test_stale_complete_changes_nothing(ledger, tasks):
    old, new = _expire_and_reclaim(ledger)
    before = ledger.job(old.id)
    assert ledger.backend.jobs.complete([lease_of(old)], now=at(33)) == [old.id]
    assert ledger.job(old.id) == before
    assert [a.outcome for a in ledger.backend.history.attempts(old.id)] == [
        AttemptOutcome.LEASE_EXPIRED,
        None,
    ]
    # The current holder still completes.
    assert ledger.backend.jobs.complete([lease_of(new)], now=at(34)) == []


def test_stale_fail_changes_nothing(ledger, tasks):
    old, _new = _expire_and_reclaim(ledger)
    before = ledger.job(old.id)
    [result] = ledger.backend.jobs.fail(
        [Failure(lease_of(old), False, None, "E", "late")], now=at(33)
    )
    assert result.state is None
    assert ledger.job(old.id) == before


def test_stale_heartbeat_changes_nothing(ledger, tasks):
    old, new = _expire_and_reclaim(ledger)
    assert ledger.backend.jobs.heartbeat([lease_of(old)], now=at(33)) == {}
    assert ledger.job(old.id).lease_until == new.lease_until


def test_stale_effect_record_raises_lease_lost(ledger, tasks):
    old, new = _expire_and_reclaim(ledger)
    with pytest.raises(LeaseLost):
        ledger.backend.effects.record("q", old.key, "email", lease_of(old), now=at(33))
    assert ledger.backend.effects.get("q", old.key, "email") is None
    assert ledger.backend.effects.record("q", new.key, "email", lease_of(new), now=at(33)) is True
    assert ledger.backend.effects.record("q", new.key, "email", lease_of(new), now=at(34)) is False


def test_wrong_token_on_a_pending_or_done_job_changes_nothing(ledger, tasks):
    job_id = enqueue(ledger, 1)
    forged = Lease(
        job_id,
        "0" * 32 if ledger.url.dialect == "sqlite" else "00000000-0000-0000-0000-000000000000",
        1,
    )
    assert ledger.backend.jobs.complete([forged], now=T0) == [job_id]
    assert ledger.job(job_id).state is JobState.PENDING
    [job] = ledger.backend.jobs.claim(["q"], "a", 1, now=T0)
    ledger.backend.jobs.complete([lease_of(job)], now=T0)
    assert ledger.backend.jobs.complete([lease_of(job)], now=T0) == [job_id]  # twice: refused


def test_a_heartbeat_under_the_token_of_an_ended_attempt_changes_nothing(ledger, tasks):
    """A renewal names the lease's own token, but its attempt already ended under it (the job
    completed, or failed for good): the renewal is refused, so the worker learns it holds no
    lease, and the finished job gets no lease time back."""
    done_id, dead_id = enqueue(ledger, 1), enqueue(ledger, 2)
    done, dead = ledger.backend.jobs.claim(["q"], "w", 2, now=T0)
    assert [done.id, dead.id] == [done_id, dead_id]
    assert ledger.backend.jobs.complete([lease_of(done)], now=at(1)) == []
    ledger.backend.jobs.fail([Failure(lease_of(dead), False, None, "E", "no")], now=at(1))
    before = [ledger.job(done_id), ledger.job(dead_id)]
    assert ledger.backend.jobs.heartbeat([lease_of(done), lease_of(dead)], now=at(2)) == {}
    assert [ledger.job(done_id), ledger.job(dead_id)] == before


def test_heartbeat_extends_the_lease(ledger, tasks):
    job_id = enqueue(ledger, 1)
    [job] = ledger.backend.jobs.claim(["q"], "a", 1, now=T0)
    assert ledger.backend.jobs.heartbeat([lease_of(job)], now=at(20)) == {job_id: at(50)}
    assert ledger.backend.jobs.rescue(now=at(40)) == []
    assert ledger.job(job_id).state is JobState.LEASED


def test_rescue_only_touches_expired_leases(ledger, tasks):
    a, b = enqueue(ledger, 1), enqueue(ledger, 2)
    [ja] = ledger.backend.jobs.claim(["q"], "w", 1, now=T0)
    [jb] = ledger.backend.jobs.claim(["q"], "w", 1, now=at(20))
    assert [
        r.job_id for r in ledger.backend.jobs.rescue(now=at(30))
    ] == []  # at lease_until: not yet past
    assert [r.job_id for r in ledger.backend.jobs.rescue(now=at(31))] == [ja.id]
    assert ledger.job(jb.id).state is JobState.LEASED
    row = ledger.job(ja.id)
    assert (
        row.state is JobState.PENDING
        and row.run_at == at(31)
        and row.last_error_class == "LeaseExpired"
    )
    assert {a, b} == {ja.id, jb.id}


def test_a_job_made_pending_again_has_no_finish_time(ledger, tasks):
    """A finish time says a job ended: one rescued with budget left, or redriven after it died,
    is live again and shows none (operators read it; prune takes finished jobs by it)."""
    rescued_id = enqueue(ledger, 1)
    [job] = ledger.backend.jobs.claim(["q"], "w", 1, now=T0)
    [rescued] = ledger.backend.jobs.rescue(now=at(31))
    assert rescued.state is JobState.PENDING
    assert ledger.job(rescued_id).finished_at is None
    dead_id = enqueue(ledger, 2)
    [job] = ledger.backend.jobs.claim(["q"], "w", 1, now=at(40))  # due since T0: first
    ledger.backend.jobs.fail([Failure(lease_of(job), False, None, "E", "no")], now=at(41))
    assert job.id == dead_id and ledger.job(dead_id).finished_at == at(41)
    assert ledger.backend.history.redrive([dead_id], "ana", "fixed", now=at(50)) == [dead_id]
    assert ledger.job(dead_id).finished_at is None


def test_rescue_is_idempotent(ledger, tasks):
    enqueue(ledger, 1)
    ledger.backend.jobs.claim(["q"], "w", 1, now=T0)
    assert len(ledger.backend.jobs.rescue(now=at(31))) == 1
    assert ledger.backend.jobs.rescue(now=at(31)) == []


def test_lease_expiries_count_as_attempts_and_a_poison_pill_dies(ledger, tasks):
    job_id = enqueue(ledger, 1)  # max_attempts=3
    for i in range(3):
        [job] = ledger.backend.jobs.claim(["q"], "crashy", 1, now=at(i * 100))
        assert job.attempt == i + 1
        [rescued] = ledger.backend.jobs.rescue(now=at(i * 100 + 31))
    assert rescued.state is JobState.DEAD
    row = ledger.job(job_id)
    assert (
        row.state is JobState.DEAD and row.attempts == 3 and row.last_error_class == "LeaseExpired"
    )
    assert [a.outcome for a in ledger.backend.history.attempts(job_id)] == [
        AttemptOutcome.LEASE_EXPIRED
    ] * 3
    assert ledger.backend.jobs.claim(["q"], "w", 1, now=at(1000)) == []


@pytest.mark.parametrize("value", [0, -1, True, "5", 7 * 24 * 3600.0 + 1])
def test_a_bad_lease_is_refused_when_the_task_is_built(ledger, value):
    # A lease of 0 seconds would be expired as soon as it is taken: every claim would be
    # rescued and charged an attempt while its handler still runs.
    from jobledger import ConfigError

    with pytest.raises(ConfigError, match="lease_seconds"):
        ledger.task(lambda ctx: None, name="bad", lease_seconds=value)


def test_a_lease_of_exactly_seven_days_is_accepted(ledger):
    task = ledger.task(lambda ctx: None, name="long", lease_seconds=7 * 24 * 3600)
    assert task.lease_seconds == 7 * 24 * 3600.0


def test_lease_seconds_can_be_given_at_claim(ledger, tasks):
    enqueue(ledger, 1)
    [job] = ledger.backend.jobs.claim(["q"], "w", 1, now=T0, lease_seconds=5)
    assert job.lease_until == at(5)


def test_release_gives_the_job_back_without_charging_it(ledger, tasks):
    job_id = enqueue(ledger, 1)
    [job] = ledger.backend.jobs.claim(["q"], "w", 1, now=T0)
    assert ledger.backend.jobs.release([lease_of(job)], now=at(1)) == []
    row = ledger.job(job_id)
    assert row.state is JobState.PENDING and row.budget_left == 3
    assert [a.outcome for a in ledger.backend.history.attempts(job_id)] == [AttemptOutcome.RELEASED]


def test_a_token_that_is_no_uuid_is_a_stale_token_for_every_write(ledger, tasks):
    """A token as a pull consumer may send it, of the receipt's characters but no UUID: every
    write by a lease refuses it as stale (on PostgreSQL, rather than fail the whole batch on
    the cast), and writes the other leases of the batch."""
    ids = [enqueue(ledger, n) for n in range(4)]
    jobs = ledger.backend.jobs
    held = {j.id: lease_of(j) for j in jobs.claim(["q"], "w", 4, now=T0)}
    odd = "-" * 4 + "9b2f0c3e5d6a47b8a1c2d3e4f5a6b7c8"
    a, b, c, d = (held[i] for i in ids)
    bad = [Lease(i, odd, 1) for i in ids]
    assert jobs.heartbeat([bad[1], a], now=at(1)) == {ids[0]: at(31)}
    assert jobs.complete([bad[1], a], now=at(2)) == [ids[1]]
    assert jobs.release([bad[2], b], now=at(2)) == [ids[2]]
    failures = [Failure(lease, True, None, "X", "boom") for lease in (bad[3], c)]
    assert [r.state for r in jobs.fail(failures, now=at(2))] == [None, JobState.PENDING]
    assert jobs.complete([bad[2], d], results={ids[3]: "1"}, now=at(2)) == [ids[2]]
    assert jobs.store_result(bad[3], "2") is False
    states = [JobState.DONE, JobState.PENDING, JobState.PENDING, JobState.DONE]
    assert [ledger.job(i).state for i in ids] == states
    assert ledger.job(ids[3]).result == 1


def test_a_release_under_the_token_of_an_ended_attempt_changes_nothing(ledger, tasks):
    """A give-back names the lease's own token, but the attempt already ended under it: the job
    completed, failed for good, or was given back already (a give-back sent again). A job done
    or dead must not be made pending again (its effect would run twice), and a job given back
    once must not get a second free attempt."""
    done_id, dead_id, given_id = enqueue(ledger, 1), enqueue(ledger, 2), enqueue(ledger, 3)
    done, dead, given = ledger.backend.jobs.claim(["q"], "w", 3, now=T0)
    assert [done.id, dead.id, given.id] == [done_id, dead_id, given_id]
    assert ledger.backend.jobs.complete([lease_of(done)], now=at(1)) == []
    ledger.backend.jobs.fail([Failure(lease_of(dead), False, None, "E", "no")], now=at(1))
    assert ledger.backend.jobs.release([lease_of(given)], now=at(1)) == []
    before = {job_id: ledger.job(job_id) for job_id in (done_id, dead_id, given_id)}
    leases = [lease_of(done), lease_of(dead), lease_of(given)]
    assert ledger.backend.jobs.release(leases, now=at(2)) == [done_id, dead_id, given_id]
    assert {job_id: ledger.job(job_id) for job_id in before} == before
    assert ledger.job(given_id).budget_left == 3
    assert [a.outcome for a in ledger.backend.history.attempts(given_id)] == [
        AttemptOutcome.RELEASED
    ]
