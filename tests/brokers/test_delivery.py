"""Relays and consumers against the real brokers (RabbitMQ, NATS JetStream, Redis Streams), on
both backends: retries and dead jobs through the outbox; a relay killed between the broker's
confirmation and the mark; a consumer killed between the outcome and the ack; the order of
one key's messages; a message a stopping consumer gives back."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time

import pytest

from jobledger import JobState, Ledger, Permanent, Retry
from jobledger._records import OutboxReason
from jobledger.brokers.base import Envelope, publisher_for
from jobledger.brokers.outbox import Outbox
from jobledger.brokers.relay import Relay

from ..support.brokers import jobledger_process
from ..support.processes import killed_by_sigkill, wait_exit, wait_until
from .conftest import QUEUE

WEEK = "2026-W33"


def key_of(customer: int) -> str:
    return f"{customer}:{WEEK}"


def routed(ledger: Ledger) -> Outbox:
    box = Outbox(ledger)
    box.route(QUEUE, actor="test")
    return box


def publish_again(url: str, records) -> None:
    """Put old records on the broker again, as a broker that redelivers an old message would
    (with other outbox ids, so that JetStream's dedupe does not drop them)."""

    async def go() -> None:
        publisher = publisher_for(url)
        await publisher.connect()
        try:
            outcome = await publisher.publish(
                [dataclasses.replace(r, id=r.id + 1_000_000) for r in records]
            )
            assert outcome.error is None, outcome.error
        finally:
            await publisher.close()

    asyncio.run(go())


def test_jobs_run_once_with_retries_and_a_dead_job_is_run_again_only_by_a_redrive(
    ledger, broker, running
):
    calls: list[tuple[str, int]] = []
    lock = threading.Lock()

    @ledger.task(queue=QUEUE, max_attempts=3, lease_seconds=10, key="{customer_id}:{week}")
    def send_digest(ctx, customer_id: int, week: str) -> None:
        with lock:
            calls.append((ctx.key, ctx.attempt))
        if customer_id == 3 and ctx.attempt == 1:
            raise Permanent("customer 3 has no address yet")
        if customer_id % 5 == 0 and ctx.attempt == 1:
            raise Retry(after=0)

    box = routed(ledger)
    customers = range(20)
    ids = {c: send_digest.enqueue({"customer_id": c, "week": WEEK}).id for c in customers}
    url = broker.url()
    running.relay(ledger, url)
    consumer = running.consumer(ledger, url, concurrency=3)

    def settled() -> bool:
        states = {c: ledger.job(i).state for c, i in ids.items()}
        return states[3] is JobState.DEAD and all(
            s is JobState.DONE for c, s in states.items() if c != 3
        )

    wait_until(
        settled,
        30,
        what="19 jobs done and one dead",
        progress=lambda: sum(ledger.job(i).state.is_final for i in ids.values()),
    )
    assert sorted(calls) == sorted(
        [(key_of(c), 1) for c in customers] + [(key_of(c), 2) for c in (0, 5, 10, 15)]
    )

    # A stale message for the dead job (a broker redelivering an old message) runs nothing.
    first = box.records(job_id=ids[3])[-1]
    assert first.reason is OutboxReason.ENQUEUE and first.published_at is not None
    finished = consumer.deliveries.finished
    publish_again(url, [first])
    wait_until(lambda: consumer.deliveries.finished > finished, 15, what="the stale message")
    assert ledger.job(ids[3]).state is JobState.DEAD
    assert [a for k, a in calls if k == key_of(3)] == [1]

    # The redrive republishes through the outbox, and the job runs once more.
    ledger.redrive(actor="ops", reason="address fixed", ids=[ids[3]])
    wait_until(lambda: ledger.job(ids[3]).state is JobState.DONE, 15, what="the redriven job")
    assert [a for k, a in calls if k == key_of(3)] == [1, 2]
    reasons = [r.reason for r in reversed(box.records(job_id=ids[3]))]
    assert reasons == [OutboxReason.ENQUEUE, OutboxReason.REDRIVE]
    running.stop_all()
    assert consumer.stats.completed == 20 and consumer.stats.dead == 1
    assert broker.backlog() == 0


@pytest.mark.parametrize("backend_name", ["sqlite"], indirect=True)
def test_a_message_nested_too_deeply_to_read_is_dropped_and_the_next_job_runs(
    ledger, broker, running, monkeypatch
):
    """A body nested past Python's recursion limit (a foreign producer's, or a hostile one) is
    dropped as malformed, as any other message that is not a jobledger envelope is: the
    consumer does not stop on it, and runs the job whose message comes after it."""
    ran: list[str] = []

    @ledger.task(queue=QUEUE, lease_seconds=10)
    def step(ctx, n: int) -> None:
        ran.append(ctx.key)

    box = routed(ledger)
    job = step.enqueue({"n": 1}, key="after")
    url = broker.url()
    with monkeypatch.context() as patched:
        patched.setattr(Envelope, "body", lambda self: b"[" * 100_000 + b"]" * 100_000)
        publish_again(url, box.records(queue=QUEUE))
    consumer = running.consumer(ledger, url)
    running.relay(ledger, url)
    wait_until(lambda: ledger.job(job.id).state is JobState.DONE, 30, what="the job after it")
    running.stop_all()
    assert ran == ["after"]
    assert (consumer.deliveries.malformed, consumer.deliveries.claimed) == (1, 1)
    assert broker.backlog() == 0


def test_relay_killed_between_publish_and_mark_publishes_twice_and_the_job_runs_once(
    db_url, ledger, broker, running
):
    calls: list[int] = []

    @ledger.task(queue=QUEUE, lease_seconds=10, key="{customer_id}:{week}")
    def send_digest(ctx, customer_id: int, week: str) -> None:
        calls.append(ctx.attempt)

    box = routed(ledger)
    job_id = send_digest.enqueue({"customer_id": 4187, "week": WEEK}).id
    url = broker.url()
    victim = jobledger_process(
        db_url,
        "relay",
        "--to",
        url,
        "--lease-seconds",
        "1",
        "--poll-interval",
        "0.05",
        faults="relay.after_publish=kill",
    )
    code, _, err = wait_exit(victim, 30)
    assert killed_by_sigkill(code), err
    [record] = box.records()
    assert record.published_at is None, "marked although the relay died before marking"
    assert broker.backlog() == 1, "the broker confirmed the message before the kill"

    # The next relay takes over once the dead one's lease has expired, and publishes it again.
    relay = Relay(ledger, url, lease_seconds=1, poll_interval=0.02)
    relay.drain(timeout=60)
    assert relay.stats.published == 1
    [record] = box.records()
    assert record.published_at is not None
    if broker.kind == "nats":
        # JetStream recognised the repeat by its Nats-Msg-Id and stored it once.
        assert relay.stats.duplicates == 1 and broker.backlog() == 1
        deliveries = 1
    else:
        assert relay.stats.duplicates == 0 and broker.backlog() == 2
        deliveries = 2

    # One message at a time: the repeat comes after the job is done, and is skipped.
    consumer = running.consumer(ledger, url, concurrency=1)
    wait_until(
        lambda: (
            consumer.deliveries.received >= deliveries and ledger.job(job_id).state is JobState.DONE
        ),
        15,
        what="both messages handled",
    )
    running.stop(consumer)
    assert calls == [1], "the job ran more than once"
    assert consumer.deliveries.claimed == 1
    assert consumer.deliveries.finished == deliveries - 1
    assert broker.backlog() == 0


def test_consumer_killed_after_the_outcome_before_the_ack_is_redelivered_and_skipped(
    db_url, ledger, broker, running, provider
):
    calls: list[int] = []

    # The same task as the consumer process's app; here it must never run.
    @ledger.task(queue=QUEUE, lease_seconds=2, max_attempts=5, key="{customer_id}:{week}")
    def send_digest(ctx, customer_id: int, week: str) -> None:
        calls.append(ctx.attempt)

    routed(ledger)
    job_id = send_digest.enqueue({"customer_id": 4187, "week": WEEK}).id
    url = broker.url()
    Relay(ledger, url).drain(timeout=60)
    victim = jobledger_process(
        db_url,
        "consume",
        "tests.apps.broker_app:ledger",
        "--from",
        url,
        "--concurrency",
        "1",
        env={"PROVIDER_URL": provider.url},
        faults="consumer.before_ack=kill",
    )
    code, _, err = wait_exit(victim, 30)
    assert killed_by_sigkill(code), err
    job = ledger.job(job_id)
    assert job.state is JobState.DONE and job.attempts == 1
    assert ledger.backend.effects.get(QUEUE, key_of(4187), "email") is not None
    assert broker.backlog() == 1, "the message was acknowledged before the kill"

    consumer = running.consumer(ledger, url, concurrency=1)
    wait_until(lambda: consumer.deliveries.finished == 1, 20, what="the redelivery")
    running.stop(consumer)
    assert consumer.deliveries.redelivered == 1
    assert consumer.deliveries.claimed == 0 and calls == []
    assert ledger.job(job_id).attempts == 1
    assert provider.stats()["accepted"] == 1 and provider.stats()["requests"] == 1
    assert broker.backlog() == 0


def test_the_messages_of_one_key_are_handled_in_the_order_the_ledger_wrote_them(
    ledger, broker, running
):
    runs: list[tuple[str, int]] = []
    claimed: list[tuple[str, int]] = []

    @ledger.task(queue=QUEUE, max_attempts=5, lease_seconds=10)
    def step(ctx, n: int) -> None:
        runs.append((ctx.key, ctx.attempt))
        if ctx.attempt < 3:
            raise Retry(after=0)

    def seen(delivery, outcome: str) -> None:
        if outcome == "claimed":
            claimed.append((delivery.envelope.key, delivery.envelope.outbox_id))

    box = routed(ledger)
    keys = [f"k{n:02d}" for n in range(12)]
    ledger.enqueue_many(step, [{"payload": {"n": n}, "key": k} for n, k in enumerate(keys)])
    url = broker.url()
    # One consumer taking one message at a time sees the broker's order as it is.
    consumer = running.consumer(ledger, url, concurrency=1, on_delivery=seen)
    running.relay(ledger, url, batch_size=5)
    wait_until(
        lambda: all(j.state is JobState.DONE for j in ledger.jobs()),
        30,
        what="every job",
        progress=lambda: len(runs),
    )
    running.stop_all()

    # The relay published in the ledger's order: the first runs follow the enqueue order.
    assert [k for k, attempt in runs if attempt == 1] == keys
    for key in keys:
        # Each key's three runs, in order, each from the record its previous run wrote.
        assert [a for k, a in runs if k == key] == [1, 2, 3]
        written = sorted(r.id for r in box.records(queue=QUEUE, limit=1000) if r.key == key)
        assert [i for k, i in claimed if k == key] == written
    assert consumer.deliveries.claimed == 3 * len(keys)


@pytest.mark.parametrize("backend_name", ["sqlite"], indirect=True)
def test_a_job_running_longer_than_the_redelivery_time_keeps_its_message(ledger, broker, running):
    """JetStream redelivers after ack_wait, Redis lets others reclaim after reclaim_after (1 s
    in these tests): a consumer keeps the message of a job that runs for 2.5 s."""
    started = threading.Event()

    @ledger.task(queue=QUEUE, lease_seconds=10)
    def slow(ctx, n: int) -> None:
        started.set()
        time.sleep(2.5)

    routed(ledger)
    job_id = ledger.enqueue(slow, {"n": 1}, key="slow").id
    url = broker.url()
    running.relay(ledger, url)
    first = running.consumer(ledger, url, concurrency=1)
    wait_until(started.is_set, 10, what="the slow job to start")
    second = running.consumer(ledger, url, concurrency=1)
    wait_until(lambda: ledger.job(job_id).state is JobState.DONE, 10, what="the slow job")
    running.stop_all()
    assert first.deliveries.claimed == 1 and first.deliveries.received == 1
    assert second.deliveries.received == 0, "the message went to another consumer meanwhile"
    assert broker.backlog() == 0


def test_a_message_a_stopping_consumer_gives_back_comes_to_the_next_consumer(
    ledger, broker, running
):
    """A consumer that stops while it keeps a message for a paused group gives it back (a
    requeue on RabbitMQ, a nak on JetStream; on Redis the entry stays pending and is reclaimed
    after reclaim_after): no new message comes when the pause ends, so the next consumer must
    get this one."""
    ran: list[str] = []

    @ledger.task(queue=QUEUE)
    def grouped(ctx, n: int) -> None:
        ran.append(ctx.key)

    routed(ledger)
    ledger.enqueue(grouped, {"n": 1}, key="g1", group="acme")
    ledger.pause_group(QUEUE, "acme", seconds=3600)
    url = broker.url()
    Relay(ledger, url).drain(timeout=60)
    first = running.consumer(ledger, url, concurrency=1)
    wait_until(lambda: first.deliveries.waited >= 1, 20, what="the message kept for the pause")
    running.stop(first)
    ledger.resume_group(QUEUE, "acme")
    running.consumer(ledger, url, concurrency=1)
    wait_until(lambda: ran == ["g1"], 20, what="the job run from the message given back")
    running.stop_all()
    assert ledger.job_by_key("g1", QUEUE).state is JobState.DONE
