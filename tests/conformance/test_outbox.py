"""The outbox role on its own: routes, the records triggers write for routed queues, the relay's
view of what is due, marks fenced by its lease, republishing and pruning. (The outbox through
the broker service, transactional enqueue and claims by key: tests/brokers/test_outbox.py.)"""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobledger._records import Failure, Lease, OutboxReason
from jobledger.errors import LeadershipLost, NotFound

from .conftest import T0, at


@pytest.fixture
def outbox(ledger):
    for queue in ("digests", "invoices", "polled"):
        ledger.task(lambda ctx, n=0: None, name=f"t_{queue}", queue=queue)
    return ledger.backend.outbox


def enqueue(ledger, queue: str, key: str, now=T0, delay: float = 0, group=None) -> int:
    job_id, created = ledger.enqueue(
        f"t_{queue}", {}, key=key, now=now, delay=delay or None, group=group
    )
    assert created
    return job_id


@pytest.fixture
def relay(ledger):
    lease = ledger.backend.leader.acquire("relay", "relay-1", 3600, now=T0)
    assert lease is not None
    return lease


def test_routing_a_queue_backfills_its_pending_jobs_once_and_only_it(ledger, outbox):
    before = [enqueue(ledger, "digests", f"k{n}") for n in range(3)]
    before.append(enqueue(ledger, "digests", "grouped", group="tenant-1"))
    enqueue(ledger, "polled", "p0")
    route, backfilled = outbox.route_add("digests", "ops:ana", "to rabbit", now=at(1))
    assert (route.queue, route.routed_by, route.note, route.routed_at) == (
        "digests",
        "ops:ana",
        "to rabbit",
        at(1),
    )
    assert backfilled == 4  # with a group or without
    again, more = outbox.route_add("digests", "ops:ben", None, now=at(2))
    assert more == 0 and again == route  # routed already: nothing changes
    assert [r.queue for r in outbox.routes()] == ["digests"]
    recs = outbox.records(queue="digests")
    assert sorted(r.job_id for r in recs) == before
    assert {r.reason for r in recs} == {OutboxReason.ROUTE}
    assert outbox.records(queue="polled") == []


def test_a_large_batch_into_a_routed_queue_gets_one_record_per_job(ledger, outbox):
    """150 jobs: PostgreSQL's COPY path, whose insert fires the same statement trigger."""
    outbox.route_add("digests", "ops", now=T0)
    results = ledger.enqueue_many(
        "t_digests", [{"payload": {"n": n}, "key": f"b{n}"} for n in range(150)], now=at(1)
    )
    recs = outbox.records(queue="digests", limit=1000)
    assert sorted(r.job_id for r in recs) == [r.id for r in results]
    assert {(r.reason, r.available_at) for r in recs} == {(OutboxReason.ENQUEUE, at(1))}


def test_due_records_come_in_time_order_of_the_queues_asked_for(ledger, outbox):
    outbox.route_add("digests", "ops", now=T0)
    outbox.route_add("invoices", "ops", now=T0)
    late = enqueue(ledger, "digests", "late", delay=60)
    first = enqueue(ledger, "invoices", "i1", now=at(1))
    second = enqueue(ledger, "digests", "d1", now=at(2))
    assert [r.job_id for r in outbox.due(10, now=at(5))] == [first, second]
    assert [r.job_id for r in outbox.due(1, now=at(5))] == [first]
    assert [r.job_id for r in outbox.due(10, now=at(60))] == [first, second, late]
    assert [r.job_id for r in outbox.due(10, now=at(60), queues=["digests"])] == [second, late]
    assert outbox.due(10, now=at(60), queues=[]) == []
    assert outbox.due(10, now=at(60), queues=["polled"]) == []


def test_marks_count_what_they_marked_and_are_fenced_by_the_relays_lease(ledger, outbox, relay):
    outbox.route_add("digests", "ops", now=T0)
    for n in range(3):
        enqueue(ledger, "digests", f"k{n}")
    ids = [r.id for r in outbox.due(10, now=at(1))]
    assert outbox.mark(ids[:2], relay, now=at(2)) == 2
    assert outbox.mark(ids[:2], relay, now=at(3)) == 0  # published already
    assert outbox.mark([], relay, now=at(3)) == 0
    assert [r.id for r in outbox.due(10, now=at(4))] == ids[2:]
    published = {r.id: r.published_at for r in outbox.records(queue="digests")}
    assert published == {ids[0]: at(2), ids[1]: at(2), ids[2]: None}
    taken = ledger.backend.leader.acquire("relay", "relay-2", 60, now=at(3600))
    assert taken is not None
    with pytest.raises(LeadershipLost):
        outbox.mark(ids[2:], relay, now=at(3601))
    assert [r.id for r in outbox.due(10, now=at(3601))] == ids[2:]


def test_records_are_listed_newest_first_by_job_queue_and_state(ledger, outbox, relay):
    outbox.route_add("digests", "ops", now=T0)
    outbox.route_add("invoices", "ops", now=T0)
    d = enqueue(ledger, "digests", "d")
    i = enqueue(ledger, "invoices", "i")
    everything = outbox.records()
    assert [r.job_id for r in everything] == [i, d]
    assert [r.job_id for r in outbox.records(job_id=d)] == [d]
    assert [r.job_id for r in outbox.records(queue="invoices")] == [i]
    outbox.mark([everything[0].id], relay, now=at(1))
    assert [r.job_id for r in outbox.records(unpublished=True)] == [d]
    assert len(outbox.records(limit=1)) == 1


def test_stats_count_what_the_relay_owes_per_queue(ledger, outbox, relay):
    outbox.route_add("digests", "ops", now=T0)
    outbox.route_add("invoices", "ops", now=T0)
    enqueue(ledger, "digests", "d1")
    enqueue(ledger, "digests", "d2", delay=600)
    i = enqueue(ledger, "invoices", "i1", now=at(10))
    [inv] = [r.id for r in outbox.records(job_id=i)]
    outbox.mark([inv], relay, now=at(20))
    stats = {s.queue: s for s in outbox.stats(now=at(100))}
    assert list(stats) == ["digests", "invoices"]
    digests, invoices = stats["digests"], stats["invoices"]
    assert (digests.unpublished, digests.due) == (2, 1)
    assert digests.oldest_due_seconds == pytest.approx(100.0)
    assert digests.last_published_at is None
    assert (invoices.unpublished, invoices.due, invoices.oldest_due_seconds) == (0, 0, None)
    assert invoices.last_published_at == at(20)


def test_unrouting_discards_the_unpublished_records_and_says_how_many(ledger, outbox, relay):
    outbox.route_add("digests", "ops", now=T0)
    for n in range(3):
        enqueue(ledger, "digests", f"k{n}")
    [first, *_] = outbox.due(10, now=at(1))
    outbox.mark([first.id], relay, now=at(1))
    assert outbox.route_remove("digests") == 2
    assert outbox.routes() == []
    assert [r.id for r in outbox.records(queue="digests")] == [first.id]  # published: kept
    enqueue(ledger, "digests", "after")
    assert len(outbox.records(queue="digests")) == 1  # no route, no record
    with pytest.raises(NotFound):
        outbox.route_remove("digests")


def test_republish_writes_one_record_for_each_due_job_without_one_waiting(ledger, outbox, relay):
    outbox.route_add("digests", "ops", now=T0)
    lost = enqueue(ledger, "digests", "lost")
    waiting = enqueue(ledger, "digests", "waiting")
    enqueue(ledger, "digests", "later", delay=3600)
    enqueue(ledger, "polled", "polled")  # due, and no record: its queue is not routed
    [rec] = outbox.records(job_id=lost)
    outbox.mark([rec.id], relay, now=at(1))  # published, and then the broker lost it
    assert outbox.republish("digests", due_before=at(60), now=at(120)) == 1
    [new, old] = outbox.records(job_id=lost)
    assert (new.reason, new.available_at, new.published_at) == (
        OutboxReason.REPUBLISH,
        at(120),
        None,
    )
    assert old.id == rec.id
    assert len(outbox.records(job_id=waiting)) == 1
    assert outbox.republish("digests", due_before=at(60), now=at(121)) == 0
    assert outbox.republish("polled", due_before=at(60), now=at(121)) == 0  # not routed


def test_republish_takes_a_job_due_at_due_before_and_not_one_due_a_microsecond_later(
    ledger, outbox, relay
):
    """A job due at due_before itself, due exactly as long as the threshold, is republished,
    with a group or without (docs/transports.md: "each pending job due that long or longer");
    one due a microsecond later is not."""
    outbox.route_add("digests", "ops", now=T0)
    edge, after = at(60), at(60) + timedelta(microseconds=1)
    jobs = {}
    for group in (None, "tenant-1"):
        for name, run_at in (("edge", edge), ("after", after)):
            job_id, created = ledger.enqueue(
                "t_digests", {}, key=f"{name}-{group}", run_at=run_at, group=group, now=T0
            )
            assert created
            jobs[name, group] = job_id
    outbox.mark([r.id for r in outbox.records(queue="digests")], relay, now=at(1))
    assert outbox.republish("digests", due_before=edge, now=at(120)) == 2
    republished = {
        r.job_id for r in outbox.records(queue="digests") if r.reason is OutboxReason.REPUBLISH
    }
    assert republished == {jobs["edge", None], jobs["edge", "tenant-1"]}


def test_republish_counts_only_a_record_waiting_to_be_published(ledger, outbox, relay):
    """A record superseded before it was published is not waiting: a job whose newer record
    was published and then lost by the broker is published again. So is a job with a group."""
    outbox.route_add("digests", "ops", now=T0)
    job_id = enqueue(ledger, "digests", "moved", delay=30)
    grouped = enqueue(ledger, "digests", "grouped", group="tenant-1")
    ledger.cancel(job_id, actor="ops", reason="not now", now=at(1))
    ledger.backend.history.redrive([job_id], "ops", "now", now=at(2))
    superseded, newer = sorted(outbox.records(job_id=job_id), key=lambda r: r.id)
    assert superseded.superseded_at == at(2) and superseded.published_at is None
    [for_group] = outbox.records(job_id=grouped)
    outbox.mark([newer.id, for_group.id], relay, now=at(3))  # then lost by the broker
    assert outbox.republish("digests", due_before=at(60), now=at(120)) == 2
    assert sorted(r.job_id for r in outbox.due(10, now=at(120))) == sorted([job_id, grouped])


def test_prune_deletes_superseded_records_too(ledger, outbox, relay):
    """A superseded record is never published, so it goes by the time it was superseded;
    otherwise the outbox would keep every one of them for ever."""
    outbox.route_add("digests", "ops", now=T0)
    job_id = retried_before_its_record_was_published(ledger, outbox, "retried")
    assert outbox.prune(published_before=at(2)) == 0
    assert outbox.prune(published_before=at(3)) == 1
    [left] = outbox.records(job_id=job_id)
    assert left.reason is OutboxReason.RETRY


def retried_before_its_record_was_published(ledger, outbox, key: str) -> int:
    """A job whose first record was never published: a worker claimed it and it failed with a
    retry, so that record is superseded (never to be published) and a newer one waits."""
    job_id = enqueue(ledger, "digests", key)
    [job] = ledger.backend.jobs.claim(["digests"], "w", 1, now=at(1))
    lease = Lease(job.id, job.lease_token, job.attempt)
    ledger.backend.jobs.fail([Failure(lease, True, at(2), "E", "try again")], now=at(2))
    newer, superseded = outbox.records(job_id=job_id)
    assert superseded.superseded_at == at(2) and superseded.published_at is None
    assert newer.reason is OutboxReason.RETRY and newer.superseded_at is None
    return job_id


def test_prune_deletes_published_records_before_a_time_in_batches(ledger, outbox, relay):
    outbox.route_add("digests", "ops", now=T0)
    for n in range(4):
        enqueue(ledger, "digests", f"k{n}")
    ids = [r.id for r in outbox.due(10, now=at(1))]
    outbox.mark(ids[:3], relay, now=at(10))
    assert outbox.prune(published_before=at(10)) == 0
    assert outbox.prune(published_before=at(11), limit=2) == 2
    assert outbox.prune(published_before=at(11)) == 1
    assert [r.id for r in outbox.records()] == [ids[3]]
