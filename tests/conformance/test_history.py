"""The history role's reads: a job by id or key, the filters operators select jobs with, the
orders of a listing, attempts and events in order; and events recorded by hand."""

from __future__ import annotations

import pytest

from jobledger import ConfigError, JobFilter, JobState
from jobledger._records import Failure
from jobledger.errors import NotFound

from .conftest import T0, at, enqueue, lease_of


@pytest.fixture
def history(ledger, tasks):
    return ledger.backend.history


def test_a_job_is_found_by_id_by_key_or_by_key_in_any_queue(api, history):
    job_id = enqueue(api, 1)
    other, _ = api.enqueue("elsewhere", {"n": 1}, key="k1", now=T0)
    assert history.get(job_id).key == "k1"
    assert history.get_by_key("other", "k1").id == other
    assert [j.id for j in history.find_key("k1")] == [job_id, other]
    assert history.find_key("nothing") == []
    with pytest.raises(NotFound):
        history.get(10**9)
    with pytest.raises(NotFound):
        history.get_by_key("q", "nothing")


def test_filters_narrow_a_selection_and_each_combines_with_the_others(api, history):
    ids = [enqueue(api, n, now=at(n)) for n in range(6)]
    other, _ = api.enqueue("elsewhere", {"n": 9}, key="x9", now=at(9))
    jobs = api.backend.jobs
    claimed = jobs.claim(["q"], "w", 2, now=at(10))  # k0, k1
    jobs.fail(
        [Failure(lease_of(claimed[0]), False, None, "Permanent", "HTTP 400: 50%_off")], at(11)
    )
    jobs.fail(
        [Failure(lease_of(claimed[1]), False, None, "Timeout", "Zeitüberschreitung: ÄRGER")], at(12)
    )

    def found(**where) -> list[int]:
        return [j.id for j in history.find(JobFilter(**where))]

    assert found(queue="q") == ids
    assert found(queue="q", states=(JobState.DEAD,)) == ids[:2]
    assert found(states=(JobState.PENDING,), task="elsewhere") == [other]
    assert found(task="work", states=(JobState.PENDING,)) == ids[2:]
    assert found(key_prefix="k") == ids and found(key_prefix="x") == [other]
    # A case-insensitive substring; % and _ are plain characters in it.
    assert found(error_contains="50%_OFF") == [ids[0]]
    assert found(error_contains="50_%") == []
    # The case of any letter, not ASCII only (SQLite's LIKE folded ASCII alone: "ärger"
    # found nothing there, and the job on PostgreSQL).
    assert found(error_contains="ZEITÜBER") == found(error_contains="ärger") == [ids[1]]
    assert found(since=at(11)) == ids[:2]
    assert found(since=at(11), until=at(12)) == [ids[0]]
    assert found(ids=(ids[3], ids[1])) == [ids[1], ids[3]]
    assert found(ids=()) == []
    assert found(queue="q", after_id=ids[3]) == ids[4:]
    assert found(queue="q", limit=2) == ids[:2]


def test_a_listing_comes_in_the_order_asked_for(api, history):
    ids = [enqueue(api, n, now=T0, run_at=at(100 - n)) for n in range(3)]
    api.backend.history.cancel(ids[0], "ops", "not needed", now=at(5))
    where = JobFilter(queue="q")
    assert [j.id for j in history.find(where, "id")] == ids
    assert [j.id for j in history.find(where, "-id")] == ids[::-1]
    assert [j.id for j in history.find(where, "run_at")] == ids[::-1]
    assert [j.id for j in history.find(where, "updated")] == [ids[0], ids[2], ids[1]]


def test_attempts_and_events_are_listed_in_the_order_they_happened(api, history):
    job_id = enqueue(api, 1)
    jobs = api.backend.jobs
    [first] = jobs.claim(["q"], "host-a", 1, now=at(1))
    jobs.fail([Failure(lease_of(first), True, at(2), "Timeout", "slow")], now=at(1))
    [second] = jobs.claim(["q"], "host-b", 1, now=at(3))
    jobs.complete([lease_of(second)], now=at(4))
    attempts = history.attempts(job_id)
    assert [(a.attempt, a.worker, a.outcome.value) for a in attempts] == [
        (1, "host-a", "retry"),
        (2, "host-b", "done"),
    ]
    assert attempts[0].lease_token == first.lease_token
    assert (attempts[0].error_class, attempts[0].error_message) == ("Timeout", "slow")
    assert (attempts[1].started_at, attempts[1].finished_at) == (at(3), at(4))
    history.record_event(job_id, "note", "ops:ana", "checked by hand", {"ticket": 42}, now=at(5))
    history.record_event(job_id, "note", None, None, now=at(6))
    events = history.events(job_id)
    assert [(e.at, e.actor, e.note, e.detail) for e in events] == [
        (at(5), "ops:ana", "checked by hand", {"ticket": 42}),
        (at(6), None, None, None),
    ]
    assert history.attempts(10**9) == [] and history.events(10**9) == []


def test_a_purge_deletes_jobs_whatever_their_state_and_leaves_no_tombstone(api, history):
    ids = [enqueue(api, n) for n in range(3)]
    [job] = api.backend.jobs.claim(["q"], "w", 1, now=T0)
    api.backend.effects.record("q", job.key, "email", lease_of(job), None, now=at(1))
    assert history.purge([ids[0], ids[1], 10**9]) == 2
    assert history.purge([]) == 0
    assert [j.id for j in history.find(JobFilter(queue="q"))] == [ids[2]]
    assert history.tombstones("k0") == [] and history.attempts(ids[0]) == []
    assert api.backend.effects.all("q", "k0") == []
    assert enqueue(api, 0, now=at(2)) != ids[0]  # the key is free at once


@pytest.mark.parametrize("order", ["bogus", "", "ID", None, ["id"]])
def test_an_order_that_is_not_one_of_the_orders_is_refused(api, history, order):
    """It was a bare ``KeyError`` (or ``TypeError``) from the listing's lookup."""
    enqueue(api, 1)
    with pytest.raises(ConfigError, match="order must be one of id, -id, updated, run_at"):
        api.jobs(order=order)
