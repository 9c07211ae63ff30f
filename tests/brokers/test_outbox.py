"""The outbox in the ledger, on both backends, without a broker: every time a job of a routed
queue becomes pending, one record is written in that transaction; claims by key; marks fenced
by the relay's lease."""

from __future__ import annotations

import math
import sqlite3
from datetime import datetime, timedelta

import psycopg
import pytest

from jobledger import ConfigError, JobFilter, JobState, LeadershipLost, Ledger, NotFound, Retry
from jobledger._records import Failure, Lease, OutboxReason
from jobledger.brokers.outbox import Outbox

from ..conformance.conftest import T0, at


@pytest.fixture
def box(ledger: Ledger) -> Outbox:
    @ledger.task(queue="digests", max_attempts=3, lease_seconds=30)
    def digest(ctx, n: int = 0) -> None:
        if n < 0:
            raise Retry(after=0)

    @ledger.task(queue="polled", max_attempts=3, lease_seconds=30)
    def polled(ctx, n: int = 0) -> None:
        pass

    outbox = Outbox(ledger)
    outbox.route("digests", actor="test", now=T0)
    return outbox


def records(ledger: Ledger, **kw):
    return list(reversed(Outbox(ledger).records(**kw)))


def app_connection(ledger: Ledger):
    if ledger.url.dialect == "sqlite":
        return sqlite3.connect(ledger.url.sqlite_path)
    return psycopg.connect(ledger.url.conninfo)


def claim(ledger: Ledger, key: str, now, worker: str = "w1"):
    [result] = ledger.backend.jobs.claim_keys([("digests", key)], worker, now)
    return result


def lease_of(job) -> Lease:
    return Lease(job.id, job.lease_token, job.attempt)


@pytest.mark.parametrize(
    "options",
    [
        {"job_id": ""},
        {"job_id": 1.5},
        {"job_id": float("inf")},
        {"queue": -1},
        {"queue": {}},
        {"queue": "not a queue"},
        {"unpublished": "yes"},
        {"limit": 0},
        {"limit": ""},
        {"limit": float("inf")},
        {"limit": 10_001},
    ],
    ids=repr,
)
def test_a_listing_of_records_with_an_argument_that_means_nothing_is_refused_alike(
    ledger, box, options
):
    """A ValueError or an OverflowError from int(), or the driver's refusal on PostgreSQL
    (a number as a queue: "operator does not exist: text = smallint")."""
    with pytest.raises(ConfigError):
        box.records(**options)


def test_records_of_an_id_no_job_can_have_are_none(ledger, box):
    """SQLite could not even be sent 2**70 (OverflowError)."""
    assert box.records(job_id=2**70) == [] and box.records(job_id=0) == []


def test_unrouting_or_reading_a_queue_by_a_name_no_queue_can_have(ledger, box):
    with pytest.raises(ConfigError):
        box.unroute(-1)
    with pytest.raises(ConfigError, match="^a queue's name must be a text"):
        ledger.queue_settings.get(-1)
    with pytest.raises(NotFound):
        ledger.queue_settings.get("no such queue")
    assert [r.queue for r in box.routes()] == ["digests"]


def test_a_route_with_u0000_in_its_actor_or_note_is_refused_alike(ledger, box):
    """PostgreSQL cannot store U+0000 and SQLite did: both refuse it, and nothing is routed."""
    for who in ({"actor": "ops\x00"}, {"actor": "ops", "note": "why\x00"}):
        with pytest.raises(ConfigError, match="may not contain U\\+0000"):
            box.route("polled", **who, now=T0)
    assert [r.queue for r in box.routes()] == ["digests"]


def test_a_routed_queue_gets_one_record_per_new_job_and_others_none(ledger, box):
    job_id, _ = ledger.enqueue("digest", {"n": 1}, key="4187:2026-W33", now=T0)
    assert not ledger.enqueue("digest", {"n": 1}, key="4187:2026-W33", now=at(1)).created
    ledger.enqueue("polled", {"n": 1}, key="4187:2026-W33", now=T0)
    delayed, _ = ledger.enqueue("digest", {"n": 2}, key="later", delay=60, now=T0)
    [first, second] = records(ledger)
    assert (first.job_id, first.queue, first.key, first.reason) == (
        job_id,
        "digests",
        "4187:2026-W33",
        OutboxReason.ENQUEUE,
    )
    assert first.available_at == T0 and first.published_at is None
    assert second.job_id == delayed and second.available_at == at(60)
    assert [r.id for r in ledger.backend.outbox.due(10, at(1))] == [first.id]
    assert [r.id for r in ledger.backend.outbox.due(10, at(60))] == [first.id, second.id]


def test_a_bulk_enqueue_writes_a_record_per_created_job_in_its_order(ledger, box):
    ledger.enqueue("digest", {"n": 0}, key="k0", now=T0)
    results = ledger.enqueue_many(
        "digest", [{"payload": {"n": n}, "key": f"k{n}"} for n in range(5)], now=T0
    )
    assert [r.created for r in results] == [False, True, True, True, True]
    assert [r.key for r in records(ledger)] == ["k0", "k1", "k2", "k3", "k4"]


@pytest.mark.parametrize("commit", [True, False])
def test_transactional_enqueue_writes_the_record_in_the_callers_transaction(ledger, box, commit):
    conn = app_connection(ledger)
    try:
        ledger.enqueue("digest", {"n": 1}, key="tx", conn=conn, now=T0)
        assert records(ledger) == []  # nothing visible before the caller commits
        conn.commit() if commit else conn.rollback()
    finally:
        conn.close()
    assert [r.key for r in records(ledger)] == (["tx"] if commit else [])
    assert len(ledger.jobs()) == (1 if commit else 0)


def publish_everything(ledger: Ledger) -> None:
    """What a relay does, minus the broker."""
    lease = ledger.backend.leader.acquire("relay:test", "relay", 3600, T0)
    lease = lease or next(x for x in ledger.backend.leader.leases(T0) if x.name == "relay:test")
    due = ledger.backend.outbox.due(1000, at(10_000))
    ledger.backend.outbox.mark([r.id for r in due], lease, T0)


def test_every_way_back_to_pending_writes_a_record_in_its_transaction(ledger, box):
    job_id, _ = ledger.enqueue("digest", {"n": 1}, key="k", now=T0)
    be = ledger.backend
    publish_everything(ledger)
    # A transient failure: due again at the retry time.
    job = claim(ledger, "k", at(1)).job
    be.jobs.fail([Failure(lease_of(job), True, at(30), "X", "boom")], at(2))
    publish_everything(ledger)
    # A rescue of an expired lease.
    claim(ledger, "k", at(30))
    be.jobs.rescue(at(100))
    publish_everything(ledger)
    # A worker giving the job back unstarted (its run time stays).
    job = claim(ledger, "k", at(101)).job
    be.jobs.release([lease_of(job)], at(102))
    publish_everything(ledger)
    # A permanent failure writes nothing; a redrive does; a cancel and a redrive again.
    job = claim(ledger, "k", at(103)).job
    be.jobs.fail([Failure(lease_of(job), False, None, "Permanent", "no")], at(104))
    ledger.redrive(actor="ops", reason="fixed", ids=[job_id], now=at(105))
    publish_everything(ledger)
    ledger.cancel(job_id, actor="ops", reason="not now", now=at(106))
    ledger.redrive(
        actor="ops",
        reason="now",
        ids=[job_id],
        where=JobFilter(states=(JobState.CANCELLED,)),
        now=at(107),
    )
    publish_everything(ledger)
    # An operator moves a pending job's run time.
    ledger.resolve(job_id, actor="ops", note="sooner", state=JobState.PENDING, now=at(108))

    every = records(ledger, job_id=job_id)
    assert [(r.reason.value, r.available_at, r.created_at) for r in every] == [
        ("enqueue", T0, T0),
        ("retry", at(30), at(2)),
        ("retry", at(100), at(100)),
        ("retry", at(100), at(102)),
        ("redrive", at(105), at(105)),
        ("redrive", at(107), at(107)),
        ("reschedule", at(108), at(108)),
    ]
    assert [r.published_at is None for r in every] == [False] * 6 + [True]


def test_a_job_of_a_queue_not_routed_writes_no_record_when_it_is_pending_again(ledger, box):
    """Another queue is routed ("digests"); a job of "polled" going back to pending (a retry, a
    rescue, a release, a redrive) is for the polling workers only."""
    job_id, _ = ledger.enqueue("polled", {"n": 1}, key="k", now=T0)
    be = ledger.backend
    [job] = be.jobs.claim(["polled"], "w1", 1, at(1))
    be.jobs.fail([Failure(lease_of(job), True, at(30), "X", "boom")], at(2))
    be.jobs.claim(["polled"], "w1", 1, at(30))
    assert [r.job_id for r in be.jobs.rescue(at(100))] == [job_id]
    [job] = be.jobs.claim(["polled"], "w1", 1, at(101))
    be.jobs.release([lease_of(job)], at(102))
    [job] = be.jobs.claim(["polled"], "w1", 1, at(103))
    be.jobs.fail([Failure(lease_of(job), False, None, "Permanent", "no")], at(104))
    ledger.redrive(actor="ops", reason="fixed", ids=[job_id], now=at(105))
    assert ledger.job(job_id).state is JobState.PENDING
    assert records(ledger) == []


def test_a_new_record_supersedes_one_not_yet_published(ledger, box):
    job_id, _ = ledger.enqueue("digest", {"n": 1}, key="k", delay=60, now=T0)
    ledger.cancel(job_id, actor="ops", reason="not now", now=at(1))
    ledger.redrive(
        actor="ops",
        reason="now",
        ids=[job_id],
        where=JobFilter(states=(JobState.CANCELLED,)),
        now=at(2),
    )
    old, new = records(ledger, job_id=job_id)
    assert old.reason is OutboxReason.ENQUEUE and old.superseded_at == at(2)
    assert new.reason is OutboxReason.REDRIVE and new.superseded_at is None
    # Only the newer one is published, now; the older one never is, even when it falls due.
    assert [r.id for r in ledger.backend.outbox.due(10, at(100))] == [new.id]
    assert [r.id for r in records(ledger, unpublished=True)] == [new.id]
    [stats] = box.status(now=at(100))
    assert stats.unpublished == 1


def test_published_records_are_kept_and_a_new_one_follows_them(ledger, box):
    job_id, _ = ledger.enqueue("digest", {"n": 1}, key="k", now=T0)
    lease = ledger.backend.leader.acquire("relay:default", "relay-1", 60, T0)
    [record] = ledger.backend.outbox.due(10, T0)
    assert ledger.backend.outbox.mark([record.id], lease, at(1)) == 1
    assert ledger.backend.outbox.mark([record.id], lease, at(2)) == 0  # once
    job = claim(ledger, "k", at(3)).job
    ledger.backend.jobs.fail([Failure(lease_of(job), True, at(10), "X", "boom")], at(4))
    published, retry = records(ledger, job_id=job_id)
    assert published.published_at == at(1) and published.reason is OutboxReason.ENQUEUE
    assert retry.published_at is None and retry.reason is OutboxReason.RETRY


def test_marks_are_fenced_by_the_relays_lease(ledger, box):
    ledger.enqueue("digest", {"n": 1}, key="k", now=T0)
    old = ledger.backend.leader.acquire("relay:default", "relay-1", 10, T0)
    new = ledger.backend.leader.acquire("relay:default", "relay-2", 10, at(11))
    assert new is not None and new.term == old.term + 1
    [record] = ledger.backend.outbox.due(10, at(11))
    with pytest.raises(LeadershipLost):
        ledger.backend.outbox.mark([record.id], old, at(12))
    assert records(ledger)[0].published_at is None
    assert ledger.backend.outbox.mark([record.id], new, at(12)) == 1


def test_claim_by_key_leases_only_a_due_pending_job(ledger, box):
    job_id, _ = ledger.enqueue("digest", {"n": 1}, key="k", delay=10, now=T0)
    early = claim(ledger, "k", at(5))
    assert early.job is None and early.current.state is JobState.PENDING
    first = claim(ledger, "k", at(10)).job
    assert (first.id, first.attempt, first.key) == (job_id, 1, "k")
    assert first.payload == {"n": 1} and first.lease_until == at(40)
    held = claim(ledger, "k", at(11), worker="w2")
    assert held.job is None and held.current.state is JobState.LEASED
    assert held.current.leased_by == "w1"
    assert ledger.backend.jobs.complete([lease_of(first)], at(12)) == []
    done = claim(ledger, "k", at(13), worker="w2")
    assert done.job is None and done.current.state is JobState.DONE
    assert claim(ledger, "nope", at(13)).job is None
    assert claim(ledger, "nope", at(13)).current is None
    [attempt] = ledger.backend.history.attempts(job_id)
    assert attempt.lease_token == first.lease_token and attempt.worker == "w1"


def test_claims_by_key_in_one_batch_answer_each_message_in_order(ledger, box):
    for key in ("a", "b", "c"):
        ledger.enqueue("digest", {"n": 1}, key=key, now=T0)
    ledger.enqueue("digest", {"n": 1}, key="later", delay=60, now=T0)
    claim(ledger, "c", at(1), worker="w0")
    wanted = [("digests", k) for k in ("b", "a", "b", "c", "later", "nope")]
    results = ledger.backend.jobs.claim_keys(wanted, "w1", at(2))
    assert [r.job.key if r.job else None for r in results] == ["b", "a", None, None, None, None]
    assert [r.current.state if r.current else None for r in results[2:]] == [
        JobState.LEASED,  # "b" named twice: claimed once
        JobState.LEASED,  # "c" leased by w0
        JobState.PENDING,  # "later" not due
        None,
    ]
    assert results[2].current.leased_by == "w1" and results[3].current.leased_by == "w0"
    assert {r.job.attempt for r in results[:2]} == {1}
    assert ledger.backend.jobs.claim_keys([], "w1", at(2)) == []


def test_a_dead_job_is_never_claimed_from_a_stale_message(ledger, box):
    job_id, _ = ledger.enqueue("digest", {"n": 1}, key="k", now=T0)
    job = claim(ledger, "k", at(1)).job
    ledger.backend.jobs.fail([Failure(lease_of(job), False, None, "Permanent", "no")], at(2))
    stale = claim(ledger, "k", at(3))
    assert stale.job is None and stale.current.state is JobState.DEAD
    ledger.redrive(actor="ops", reason="fixed", ids=[job_id], now=at(4))
    assert records(ledger, job_id=job_id)[-1].reason is OutboxReason.REDRIVE
    assert claim(ledger, "k", at(5)).job.attempt == 2


def test_routing_a_queue_backfills_its_pending_jobs_once(ledger, box):
    ledger.enqueue("polled", {"n": 1}, key="a", now=T0)
    ledger.enqueue("polled", {"n": 2}, key="b", now=T0)
    ledger.enqueue("polled", {"n": 3}, key="c", now=T0)
    ledger.backend.jobs.claim(["polled"], "w", 1, at(1))  # "a" is leased: not backfilled
    result = box.route("polled", actor="ops", note="moving to RabbitMQ", now=at(2))
    assert result.created and result.backfilled == 2
    assert result.route.routed_by == "ops" and result.route.note == "moving to RabbitMQ"
    assert [(r.key, r.reason.value) for r in records(ledger, queue="polled")] == [
        ("b", "route"),
        ("c", "route"),
    ]
    again = box.route("polled", actor="ops", now=at(3))
    assert not again.created and again.backfilled == 0
    assert sorted(r.queue for r in box.routes()) == ["digests", "polled"]


def test_unrouting_discards_unpublished_records_and_stops_new_ones(ledger, box):
    ledger.enqueue("digest", {"n": 1}, key="a", now=T0)
    assert box.unroute("digests") == 1
    ledger.enqueue("digest", {"n": 2}, key="b", now=T0)
    assert records(ledger) == []
    with pytest.raises(NotFound, match="not routed"):
        box.unroute("digests")
    with pytest.raises(ConfigError, match="actor"):
        box.route("digests", actor="")


def test_status_counts_what_the_relay_owes(ledger, box):
    ledger.enqueue("digest", {"n": 1}, key="a", now=T0)
    ledger.enqueue("digest", {"n": 2}, key="b", now=at(5))
    ledger.enqueue("digest", {"n": 3}, key="c", delay=100, now=T0)
    [stats] = box.status(now=at(10))
    assert (stats.queue, stats.unpublished, stats.due) == ("digests", 3, 2)
    assert stats.oldest_due_seconds == pytest.approx(10)
    assert stats.last_published_at is None


def test_republish_writes_records_for_pending_jobs_the_broker_lost(ledger, box):
    lease = ledger.backend.leader.acquire("relay:default", "r", 600, T0)
    for key in ("a", "b", "c"):
        ledger.enqueue("digest", {"n": 1}, key=key, now=T0)
    ledger.backend.outbox.mark([r.id for r in ledger.backend.outbox.due(10, T0)], lease, T0)
    claim(ledger, "a", at(1))  # running: not lost
    ledger.enqueue("digest", {"n": 1}, key="d", now=at(400))  # unpublished record: not lost
    written = box.republish("digests", due_for=300, now=at(400))
    assert written == 2
    assert [r.key for r in records(ledger, unpublished=True)] == ["d", "b", "c"]
    assert {r.reason for r in records(ledger, unpublished=True)} >= {OutboxReason.REPUBLISH}
    assert box.republish("digests", due_for=300, now=at(400)) == 0
    # Due for longer than any time a datetime holds: none, said without an error.
    ledger.enqueue("digest", {"n": 1}, key="e", now=T0)
    ledger.backend.outbox.mark([r.id for r in ledger.backend.outbox.due(10, at(400))], lease, T0)
    assert box.republish("digests", due_for=1e12, now=at(400)) == 0
    with pytest.raises(ConfigError, match="not routed"):
        box.republish("polled", due_for=0)


def test_prune_deletes_only_old_published_records(ledger, box):
    lease = ledger.backend.leader.acquire("relay:default", "r", 600, T0)
    ledger.enqueue("digest", {"n": 1}, key="a", now=T0)
    ledger.enqueue("digest", {"n": 1}, key="b", now=T0)
    [a, _] = ledger.backend.outbox.due(10, T0)
    ledger.backend.outbox.mark([a.id], lease, T0)
    assert box.prune(timedelta(hours=1), now=at(3599)) == 0
    assert box.prune(timedelta(days=999_999_999), now=at(3601)) == 0
    assert box.prune(timedelta(hours=1), now=at(3601)) == 1
    assert [r.key for r in records(ledger)] == ["b"]


def test_postgres_lookups_of_a_jobs_records_never_walk_the_relays_index(pg):
    """Statistics taken while nothing waited to be published make the relay's index of waiting
    records look empty. The trigger that supersedes a job's waiting record when the job becomes
    pending again (a retry, a rescue, a redrive) must still find it by the index on job_id:
    through ``jobledger_outbox_due`` each one walked every record the relay owes, and a broker
    outage (a growing backlog) made every retry of a routed job slower (015)."""
    schema, url = pg.new_schema_url()
    try:
        ledger = Ledger(url)
        ledger.task(lambda ctx, n: None, name="t", queue="digests")
        Outbox(ledger).route("digests", actor="test")
        table = f"{schema}.jobledger_outbox"
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute(f"ANALYZE {table}")  # while nothing waits to be published
        ledger.enqueue_many("t", [{"payload": {"n": n}, "key": f"k{n}"} for n in range(3000)])
        # The trigger's own condition (migrations/006_outbox.sql, jobledger_outbox_pending).
        supersede = (
            f"UPDATE {table} SET superseded_at = now() WHERE job_id = 5"
            " AND published_at IS NULL AND superseded_at IS NULL"
        )
        due = ledger.backend.db.sql["outbox_due"].replace("{queue_in}", "1 = 1")
        due = due.replace("{limit}", "100")
        with psycopg.connect(pg.url) as conn:
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + supersede))
            assert "jobledger_outbox_due" not in plan, plan
            assert "jobledger_outbox_job" in plan, plan
            # The relay's own read still walks it.
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + due, {"now": None}))
            assert "jobledger_outbox_due" in plan, plan
        ledger.close()
    finally:
        pg.drop_schema(schema)


@pytest.mark.parametrize("due_for", [math.nan, -1, "300", True], ids=repr)
def test_a_republish_due_for_that_is_no_number_of_seconds_is_refused(ledger, box, due_for):
    """NaN was due for nothing at all and a text of digits was read as seconds."""
    ledger.enqueue("digest", {"n": 1}, key="a", now=T0)
    with pytest.raises(ConfigError, match="^due_for must be >= 0 seconds"):
        box.republish("digests", due_for=due_for, now=at(400))
    assert box.republish("digests", due_for=math.inf, now=at(400)) == 0


@pytest.mark.parametrize(
    "now", [datetime(2026, 8, 10, 9, 0), "2026-08-10", 5], ids=["naive", "text", "int"]
)
def test_an_outbox_call_with_a_now_that_is_no_aware_datetime_is_refused(ledger, box, now):
    """As every call of the ledger that takes one (tests/conformance/test_operators.py)."""
    for call in (
        lambda: box.route("polled", actor="ops", now=now),
        lambda: box.status(now=now),
        lambda: box.prune(timedelta(hours=1), now=now),
        lambda: box.republish("digests", due_for=300, now=now),
    ):
        with pytest.raises(ConfigError, match="^now must be an aware datetime"):
            call()
    assert [r.queue for r in box.routes()] == ["digests"]
