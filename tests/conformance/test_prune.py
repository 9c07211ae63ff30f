"""Prune: finished jobs go in batches with their history; their keys keep blocking duplicates
until the tombstone's horizon, also against an enqueue that races the prune."""

from __future__ import annotations

import sqlite3
import threading
from datetime import timedelta

import psycopg
import pytest

from jobledger import JobFilter, JobState, KeyConflict, NotFound
from jobledger._records import Failure, encode_payload, payload_digest

from ..support.async_api import app_connection
from ..support.processes import wait_until
from .conftest import T0, at, enqueue, lease_of

DAY = 24 * 3600.0


def finish(ledger, n: int, *, ok: bool = True, now=T0) -> int:
    """Enqueue job ``k<n>`` and run it to done (or dead) at ``now``, recording an effect."""
    job_id = enqueue(ledger, n, now=now)
    [job] = [j for j in ledger.backend.jobs.claim(["q"], "w", 100, now=now) if j.id == job_id]
    ledger.backend.effects.record("q", job.key, "email", lease_of(job), now=now)
    if ok:
        ledger.backend.jobs.complete([lease_of(job)], now=now)
    else:
        ledger.backend.jobs.fail([Failure(lease_of(job), False, None, "HTTP 400", "no")], now=now)
    return job_id


def test_prune_removes_old_finished_jobs_with_their_history(api, tasks):
    old_done = finish(api, 1)
    old_dead = finish(api, 2, ok=False)
    old_cancelled = enqueue(api, 3)
    api.cancel(old_cancelled, actor="ana", reason="not needed", now=T0)
    old_pending = enqueue(api, 4)
    recent_done = finish(api, 5, now=at(29 * DAY))

    # Finished longer ago than any time a datetime holds: none, said without an error.
    for age in (1e12, timedelta(days=999_999_999)):
        assert api.prune(age, now=at(31 * DAY)).jobs == 0
    result = api.prune(timedelta(days=30), now=at(31 * DAY))

    assert (result.jobs, result.by_state) == (2, {"done": 1, "cancelled": 1})
    assert (result.attempts, result.events, result.effects, result.tombstones) == (1, 1, 1, 2)
    left = {j.id for j in api.jobs()}
    assert left == {old_dead, old_pending, recent_done}
    assert api.backend.history.attempts(old_done) == []
    assert api.backend.history.events(old_cancelled) == []
    assert api.backend.effects.all("q", "k1") == []
    assert api.backend.effects.all("q", "k5") != []


def test_dead_jobs_are_pruned_only_when_asked(api, tasks):
    dead = finish(api, 1, ok=False)
    assert api.prune(30 * DAY, now=at(31 * DAY)).jobs == 0
    assert api.job(dead).state is JobState.DEAD
    result = api.prune(30 * DAY, include_dead=True, now=at(31 * DAY))
    assert result.by_state == {"dead": 1}
    with pytest.raises(NotFound):
        api.job(dead)


def test_prune_by_queue(api, tasks):
    finish(api, 1)
    other = api.enqueue("elsewhere", {"n": 9}, key="k9", now=T0).id
    api.cancel(other, actor="ana", reason="r", now=T0)
    assert api.prune(DAY, queue="other", now=at(2 * DAY)).jobs == 1
    assert [j.key for j in api.jobs()] == ["k1"]


def test_dry_run_counts_and_removes_nothing(api, tasks):
    for n in range(3):
        finish(api, n)
    preview = api.prune(DAY, dry_run=True, now=at(2 * DAY))
    assert (preview.jobs, preview.by_state) == (3, {"done": 3, "cancelled": 0})
    assert len(api.jobs()) == 3


def test_prune_works_in_batches(api, tasks):
    for n in range(5):
        finish(api, n, now=at(n))
    seen = []
    result = api.prune(DAY, batch=2, now=at(2 * DAY), progress=lambda r: seen.append(r.jobs))
    assert result.jobs == 5 and seen == [2, 4, 5]
    assert api.jobs() == []


def test_a_pruned_key_keeps_blocking_duplicates(api, tasks):
    job_id = finish(api, 1)
    api.prune(DAY, keep_keys=timedelta(days=365), now=at(2 * DAY))

    again = api.enqueue("work", {"n": 1}, key="k1", now=at(3 * DAY))
    assert (again.id, again.created) == (job_id, False)
    [result] = api.enqueue_many("work", [{"payload": {"n": 1}, "key": "k1"}], now=at(3 * DAY))
    assert result.pruned and not result.created and result.id == job_id
    with pytest.raises(KeyConflict):
        api.enqueue("work", {"n": 2}, key="k1", now=at(3 * DAY))
    with pytest.raises(KeyConflict):
        api.enqueue("elsewhere", {"n": 1}, key="k1", queue="q", now=at(3 * DAY))
    report = api.enqueue_many(
        "work",
        [{"payload": {"n": 2}, "key": "k1"}, {"payload": {"n": 3}, "key": "k3"}],
        on_conflict="report",
        now=at(3 * DAY),
    )
    assert [(r.created, r.conflict, r.pruned) for r in report] == [
        (False, True, True),
        (True, False, False),
    ]
    assert [j.key for j in api.jobs()] == ["k3"]
    with pytest.raises(NotFound, match="pruned"):
        api.find("k1")


def test_a_pruned_key_blocks_it_in_a_large_batch(api, tasks):
    """A batch large enough for PostgreSQL's COPY path (150) with a tombstoned key in it."""
    job_id = finish(api, 1)
    api.prune(DAY, keep_keys=timedelta(days=365), now=at(2 * DAY))
    batch = [{"payload": {"n": i}, "key": f"k{i}"} for i in range(150)]
    results = api.enqueue_many("work", batch, now=at(3 * DAY))
    assert (results[1].id, results[1].created, results[1].pruned) == (job_id, False, True)
    assert all(r.created for i, r in enumerate(results) if i != 1)
    batch[1]["payload"] = {"n": -1}
    with pytest.raises(KeyConflict):
        api.enqueue_many("work", batch, now=at(3 * DAY))
    assert len(api.jobs(JobFilter(queue="q", limit=1000))) == 149


def test_the_key_is_free_again_after_the_horizon(api, tasks):
    finish(api, 1)  # finished at T0
    result = api.prune(DAY, keep_keys=10 * DAY, now=at(2 * DAY))
    assert result.tombstones == 1
    assert not api.enqueue("work", {"n": 1}, key="k1", now=at(9 * DAY)).created
    # The horizon counts from when the job finished: T0 + 10 days.
    assert api.enqueue("work", {"n": 1}, key="k1", now=at(10 * DAY + 1)).created
    # A later prune deletes the expired tombstone.
    assert api.prune(DAY, now=at(10 * DAY + 2)).expired_tombstones == 1
    assert api.backend.history.tombstones("k1") == []


def test_at_its_horizon_a_tombstone_no_longer_holds_its_key_on_any_path(ledger, tasks):
    """A tombstone holds its key until its horizon, not at it: the instant a prune counts it
    expired, an enqueue creates the job, whichever way it goes in — alone, in the caller's
    transaction (PostgreSQL's checked path: its insert, then its look at the tombstones) or
    published over the HTTP API."""
    from jobledger._records import NewJob, PublishItem

    for n in (1, 2, 3):
        finish(ledger, n)  # finished at T0
    assert ledger.prune(DAY, keep_keys=10 * DAY, now=at(2 * DAY)).tombstones == 3
    horizon = at(10 * DAY)
    assert ledger.enqueue("work", {"n": 1}, key="k1", now=horizon).created
    conn = app_connection(ledger)
    try:
        assert ledger.enqueue("work", {"n": 2}, key="k2", conn=conn, now=horizon).created
        conn.commit()
    finally:
        conn.close()
    job = NewJob("q", "k3", "work", encode_payload({"n": 3}), 0, None, 3, 30.0)
    [published] = ledger.backend.jobs.publish([PublishItem(job, "fp")], now=horizon)
    assert published.status == "created"
    assert sorted(j.key for j in ledger.jobs()) == ["k1", "k2", "k3"]
    assert ledger.prune(DAY, now=horizon).expired_tombstones == 3


def test_without_keep_keys_the_key_is_free_at_once(api, tasks):
    finish(api, 1)
    result = api.prune(DAY, keep_keys=None, now=at(2 * DAY))
    assert (result.jobs, result.tombstones) == (1, 0)
    assert api.enqueue("work", {"n": 2}, key="k1", now=at(2 * DAY)).created


def test_a_key_pruned_again_gets_a_fresh_tombstone(api, tasks):
    finish(api, 1)
    api.prune(DAY, keep_keys=2.5 * DAY, now=at(2 * DAY))
    # The horizon passed; the tombstone is still in the table until a prune deletes it.
    second = api.enqueue("work", {"n": 1}, key="k1", now=at(3 * DAY)).id
    assert len(api.backend.history.tombstones("k1")) == 1
    [job] = api.backend.jobs.claim(["q"], "w", 1, now=at(3 * DAY))
    api.backend.jobs.complete([lease_of(job)], now=at(3 * DAY))
    api.prune(DAY, keep_keys=3 * DAY, now=at(5 * DAY))
    [tomb] = api.backend.history.tombstones("k1")
    assert tomb.job_id == second and tomb.expires_at == at(6 * DAY)


def test_prune_validates_its_arguments(api, tasks):
    from jobledger import ConfigError

    with pytest.raises(ConfigError):
        api.prune(-1)
    with pytest.raises(ConfigError):
        api.prune(DAY, keep_keys=-5)
    with pytest.raises(ConfigError):
        api.prune(DAY, batch=0)


def test_prune_refuses_a_batch_out_of_bounds_or_an_invalid_queue_name_and_deletes_nothing(
    api, tasks
):
    """A batch is a whole number from 1 to 10000 (one transaction each), as the CLI's --batch
    is; a queue name is checked as everywhere else, rather than matching no job. A queue with a
    valid name and no jobs is pruned of nothing, without an error."""
    from jobledger import ConfigError

    finish(api, 1)
    for batch in (10_001, True, 2.0):
        with pytest.raises(ConfigError, match="batch must be a whole number from 1 to 10000"):
            api.prune(DAY, batch=batch, now=at(2 * DAY))
    with pytest.raises(ConfigError, match="queue name 'no such queue!' is invalid"):
        api.prune(DAY, queue="no such queue!", now=at(2 * DAY))
    assert [j.key for j in api.jobs()] == ["k1"]
    assert api.prune(DAY, queue="nowhere", now=at(2 * DAY)).jobs == 0
    assert api.prune(DAY, batch=10_000, now=at(2 * DAY)).jobs == 1


def test_expired_tombstones_go_at_most_a_batch_a_pass_until_none_is_left(api, tasks):
    """Each pass deletes at most the batch; prune passes again until a pass comes back short."""
    for n in range(5):
        finish(api, n)  # finished at T0
    assert api.prune(DAY, keep_keys=2 * DAY, now=at(DAY + 1)).tombstones == 5
    history = api.backend.history
    assert history.prune_tombstones(now=at(3 * DAY), limit=2) == 2
    assert api.prune(DAY, batch=2, now=at(3 * DAY)).expired_tombstones == 3
    assert [history.tombstones(f"k{n}") for n in range(5)] == [[]] * 5


def _prune_without_commit(ledger, db_url, key: str, now):
    """Open a connection that deletes the job of ``key`` and writes its tombstone, as prune
    does, and return it with the transaction still open."""
    backend = ledger.backend
    job = ledger.job_by_key(key, "q")
    horizon = (now + timedelta(days=365)).timestamp()
    if backend.dialect == "sqlite":
        conn = sqlite3.connect(backend.path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO jobledger_tombstones VALUES (?, ?, ?, ?, ?, 'done', ?, ?, ?)",
            (
                "q",
                key,
                job.id,
                job.task,
                payload_digest(encode_payload(job.payload)),
                now.timestamp(),
                now.timestamp(),
                horizon,
            ),
        )
        conn.execute("DELETE FROM jobledger_jobs WHERE id = ?", (job.id,))
        return conn
    conn = psycopg.connect(db_url.split("?")[0])
    schema = ledger.url.schema
    conn.execute(
        f'INSERT INTO "{schema}".jobledger_tombstones'
        " SELECT queue, key, id, task, md5(payload::text), state, finished_at, %s, %s"
        f' FROM "{schema}".jobledger_jobs WHERE id = %s',
        (now, now + timedelta(days=365), job.id),
    )
    conn.execute(f'DELETE FROM "{schema}".jobledger_jobs WHERE id = %s', (job.id,))
    return conn


def _wait_for_the_insert_to_wait(ledger, db_url, inserter: threading.Thread) -> None:
    """Return once ``inserter``'s insert waits on a key's lock (PostgreSQL), held by a prune
    that has not committed yet."""
    if ledger.url.dialect == "postgres":
        with psycopg.connect(db_url.split("?")[0], autocommit=True) as watch:
            wait_until(
                lambda: watch.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE wait_event_type = 'Lock'"
                    " AND (query LIKE '%%INSERT INTO%%' OR query LIKE 'COPY %%')"
                ).fetchone()[0],
                what="the insert to wait on the key's lock",
            )
    else:
        # SQLite: the insert waits for the write lock (BEGIN IMMEDIATE); nothing to observe,
        # and the outcome must hold whether it started waiting already or not.
        inserter.join(0.2)


def _racing_a_prune_of_k1(ledger, db_url, insert):  # type: ignore[no-untyped-def]
    """``insert()``'s answer, called in a thread while a prune of key ``k1`` holds the key in
    its open transaction, and once its insert waits on the key, the prune committed."""
    prune = _prune_without_commit(ledger, db_url, "k1", at(2 * DAY))
    answers = []
    started = threading.Event()

    def go() -> None:
        started.set()
        answers.append(insert())

    inserter = threading.Thread(target=go)
    inserter.start()
    started.wait()
    _wait_for_the_insert_to_wait(ledger, db_url, inserter)
    prune.commit()
    prune.close()
    inserter.join(10)
    [answer] = answers
    return answer


@pytest.mark.parametrize("others", [0, 150])
def test_an_enqueue_racing_a_prune_of_its_key_creates_nothing(api, db_url, tasks, others):
    """The enqueue starts while the prune's transaction holds the key, and goes on when the
    prune commits: it must see the tombstone, not the now free key. With 150 other new keys
    in the batch, PostgreSQL's COPY path: it rolls back and the checked path answers."""
    job_id = finish(api, 1)
    extra = [{"payload": {"n": i}, "key": f"other{i}"} for i in range(others)]
    [result, *rest] = _racing_a_prune_of_k1(
        api,
        db_url,
        lambda: api.enqueue_many("work", [{"payload": {"n": 1}, "key": "k1"}, *extra]),
    )
    assert (result.id, result.created, result.pruned) == (job_id, False, True)
    assert [r.created for r in rest] == [True] * others
    assert [j.key for j in api.jobs(JobFilter(queue="q", limit=1000))] == [e["key"] for e in extra]


def test_a_publish_racing_a_prune_of_its_key_creates_nothing(ledger, db_url, tasks):
    """As an enqueue (above), a publish over the HTTP API that waited on the key while a prune
    deleted its job goes ahead once the prune commits; the prune's tombstone, visible then,
    wins: the publish takes its insert back and answers a replay of the pruned job."""
    from jobledger._records import NewJob, PublishItem

    job_id = finish(ledger, 1)
    job = NewJob("q", "k1", "work", encode_payload({"n": 1}), 0, None, 3, 30.0)
    [outcome] = _racing_a_prune_of_k1(
        ledger,
        db_url,
        lambda: ledger.backend.jobs.publish([PublishItem(job, "fp")], now=at(3 * DAY)),
    )
    assert (outcome.status, outcome.job_id, outcome.state) == ("replayed", job_id, JobState.DONE)
    assert ledger.jobs() == []


def test_prune_walks_the_primary_key_and_stops_at_newer_jobs(api, tasks):
    """No index on the jobs table for prune: it walks ids from the oldest job, one window per
    transaction, and stops at the first window of jobs created after the cut-off."""
    for n in range(4):
        finish(api, n)  # created and finished at T0
    for n in range(4, 8):
        enqueue(api, n, now=at(10 * DAY))
    backend = api.backend
    windows, after = [], 0
    while after is not None:
        result, after = backend.history.prune(
            at(5 * DAY), [JobState.DONE], None, limit=2, after_id=after, now=at(5 * DAY)
        )
        windows.append((result.jobs, after))
    kept = api.jobs()
    assert [j.key for j in kept] == ["k4", "k5", "k6", "k7"]
    first = kept[0].id  # k0..k3 had the four ids before it
    assert windows == [(2, first - 3), (2, first - 1), (0, None)]


def test_a_prune_window_with_one_newer_job_does_not_end_the_walk(api, tasks):
    """Ids follow the order of inserts, not of the times the jobs were created at (an enqueue
    may be given its time, hosts' clocks differ): only a window of newer jobs alone ends the
    walk, so an old finished job after a newer one is still pruned."""
    old = finish(api, 0)  # created and finished at T0
    enqueue(api, 1, now=at(10 * DAY))
    late_id = finish(api, 2)  # inserted after k1, with an older time: created and finished at T0
    backend, after, pruned = api.backend, 0, 0
    while after is not None:
        result, after = backend.history.prune(
            at(5 * DAY), [JobState.DONE], None, limit=2, after_id=after, now=at(5 * DAY)
        )
        pruned += result.jobs
    assert pruned == 2
    assert [j.key for j in api.jobs()] == ["k1"]
    assert {old, late_id}.isdisjoint(j.id for j in api.jobs())


def test_the_prune_window_reads_the_primary_key(api, tasks):
    backend = api.backend
    text = backend.db.sql["job_prune_window"].replace("{limit}", "1000")
    with backend.transaction() as conn:
        if backend.dialect == "sqlite":
            plan = " ".join(
                str(r[-1]) for r in conn.execute("EXPLAIN QUERY PLAN " + text, {"after": 0})
            )
            assert "PRIMARY KEY" in plan, plan
        else:
            conn.execute("SET LOCAL enable_seqscan = off")
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + text, {"after": 0}))
            assert "jobledger_jobs_pkey" in plan, plan


def test_prune_keeps_jobs_within_their_queues_retention(api, tasks):
    """A declared queue promises its retention (the Idempotency-Key replay window of the HTTP
    API): prune never takes its jobs earlier, whatever --older-than says."""
    from jobledger._records import QueueSettings

    api.backend.api.queue_put(QueueSettings(name="q", retention_seconds=60 * DAY), now=T0)
    kept = finish(api, 1)
    other = finish(api, 2, now=T0)
    result = api.prune(timedelta(days=30), now=at(31 * DAY))
    assert result.jobs == 0 and {kept, other} <= {j.id for j in api.jobs()}
    result = api.prune(timedelta(days=30), now=at(61 * DAY))
    assert result.jobs == 2


def test_prune_takes_jobs_finished_more_than_older_than_ago_and_keeps_one_at_the_cut_off(
    api, tasks
):
    at_cut_off = finish(api, 1, now=at(DAY))
    older = finish(api, 2, now=at(DAY - 1))
    result = api.prune(timedelta(days=30), now=at(31 * DAY))
    assert result.jobs == 1
    assert [j.id for j in api.jobs()] == [at_cut_off]
    with pytest.raises(NotFound):
        api.job(older)


def test_a_queues_retention_keeps_a_job_that_finished_exactly_that_long_ago(api, tasks):
    from jobledger._records import QueueSettings

    api.backend.api.queue_put(QueueSettings(name="q", retention_seconds=60 * DAY), now=T0)
    kept = finish(api, 1)
    assert api.prune(timedelta(days=30), now=at(60 * DAY)).jobs == 0
    assert api.job(kept).state is JobState.DONE
    assert api.prune(timedelta(days=30), now=at(60 * DAY + 1)).jobs == 1


def test_prune_deletes_the_publish_record_with_its_job(api, tasks):
    from jobledger._records import NewJob, PublishItem, QueueSettings

    api.backend.api.queue_put(QueueSettings(name="q", retention_seconds=DAY), now=T0)
    job = NewJob("q", "pub-1", "work", encode_payload({"n": 1}), 0, T0, 3, 30.0)
    [outcome] = api.backend.jobs.publish([PublishItem(job, "fingerprint-1")], now=T0)
    [claimed] = api.backend.jobs.claim(["q"], "w", 1, now=T0)
    api.backend.jobs.complete([lease_of(claimed)], now=T0)
    assert api.prune(timedelta(days=1), now=at(2 * DAY)).jobs == 1
    with api.backend.transaction() as conn:
        table = "jobledger_publish_requests"
        if api.url.dialect == "postgres":
            table = f"{api.url.schema}.{table}"
        assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0
    assert outcome.status == "created"


def test_publishing_a_pruned_key_replays_or_conflicts(api, tasks):
    """The HTTP publish path honours tombstones like enqueue: no second job for a pruned key."""
    from jobledger._records import NewJob, PublishItem, QueueSettings

    api.backend.api.queue_put(QueueSettings(name="q", retention_seconds=DAY), now=T0)
    job_id = finish(api, 1)  # key k1, task "work", payload {"n": 1}
    assert api.prune(timedelta(days=1), now=at(2 * DAY)).jobs == 1

    def publish(payload, task="work"):
        job = NewJob("q", "k1", task, encode_payload(payload), 0, None, 3, 30.0)
        [outcome] = api.backend.jobs.publish([PublishItem(job, "fp")], now=at(3 * DAY))
        return outcome

    again = publish({"n": 1})
    assert (again.status, again.job_id, again.state) == ("replayed", job_id, JobState.DONE)
    assert publish({"n": 2}).status == "conflict"
    # The same payload for another task (the queue's task changed since) is no replay either.
    assert publish({"n": 1}, task="elsewhere").status == "conflict"
    assert api.jobs() == []
