"""The consumer without a broker: what it decides for a message whose job it could not claim,
what it does with messages an in-memory subscriber hands it (one for a queue it does not
consume, one whose claim finds the ledger unreachable, one kept for a paused group when it
stops, one whose job finishes while it stops), and how it stops when its broker cannot be used
at all."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

import pytest

from jobledger import ConfigError, JobState, Ledger
from jobledger._runtime.runtime import Runtime
from jobledger.brokers.base import Delivery, Envelope
from jobledger.brokers.consumer import BrokerConsumer
from jobledger.brokers.outbox import Outbox
from jobledger.errors import BackendUnavailable

from ..conformance.conftest import T0
from ..support.processes import wait_until

pytestmark = pytest.mark.parametrize("backend_name", ["sqlite"], indirect=True)


class Unusable:
    """A subscriber whose client library is missing."""

    url = None

    async def connect(self, queues, prefetch):
        raise ConfigError("the 'aio_pika' package is needed for this broker")

    async def close(self):
        pass


class InMemory:
    """A subscriber that hands out the messages put in its inbox, and keeps what the consumer
    acknowledged and released, in order."""

    url = None

    def __init__(self) -> None:
        self.inbox: list[Message] = []
        self.acked: list[Message] = []
        self.released: list[Message] = []

    def put(self, queue: str, key: str) -> Message:
        message = Message(self, queue, key)
        self.inbox.append(message)
        return message

    async def connect(self, queues, prefetch):
        pass

    async def receive(self, limit, timeout):
        taken, self.inbox = self.inbox[:limit], self.inbox[limit:]
        if not taken:
            await asyncio.sleep(min(timeout, 0.02))
        return taken

    async def close(self):
        pass


class Message(Delivery):
    redelivered = False

    def __init__(self, broker: InMemory, queue: str, key: str) -> None:
        self.broker = broker
        self.envelope = Envelope(queue, key, 0, 0, "enqueue")

    async def ack(self) -> None:
        self.broker.acked.append(self)

    async def release(self) -> None:
        self.broker.released.append(self)


@pytest.fixture
def consumer(ledger: Ledger) -> BrokerConsumer:
    ledger.task(lambda ctx, n: None, name="t", queue="q")
    Outbox(ledger).route("q", actor="test")
    return BrokerConsumer(ledger, "amqp://h", subscriber=Unusable(), clock=lambda: T0)


def test_what_a_message_for_an_unclaimable_job_gets(ledger, consumer):
    def job(key, **kw):
        ledger.enqueue("t", {"n": 1}, key=key, now=T0, **kw)
        return ledger.job_by_key(key, "q")

    assert consumer._decide(None) == ("unknown", 0.0)
    soon, later = job("soon", delay=1.5), job("later", delay=60)
    assert consumer._decide(soon) == ("waited", pytest.approx(1.5))
    assert consumer._decide(later) == ("stale", 0.0)
    [claimed] = ledger.backend.jobs.claim_keys([("q", "soon")], "w", T0 + timedelta(seconds=2))
    assert consumer._decide(ledger.job(claimed.job.id)) == ("held", 0.0)
    ledger.cancel("later", actor="ops", reason="no", queue="q", now=T0)
    assert consumer._decide(ledger.job_by_key("later", "q")) == ("finished", 0.0)


def test_a_message_for_a_job_of_a_paused_group_is_kept_until_the_pause_ends(ledger, consumer):
    ledger.enqueue("t", {"n": 1}, key="g1", group="acme", now=T0)
    job = ledger.job_by_key("g1", "q")
    # Paused for an hour: no new message would come when it ends, so it is never acknowledged.
    looks_again = max(1.0, consumer.not_due_wait)
    assert consumer._decide(job, T0 + timedelta(hours=1)) == ("waited", looks_again)
    assert consumer._decide(job, T0 + timedelta(seconds=0.3)) == ("waited", pytest.approx(0.3))


def test_a_broker_it_cannot_use_at_all_stops_it_with_the_error(ledger, consumer):
    with pytest.raises(ConfigError, match="aio_pika"):
        consumer.run()


def test_a_queue_that_is_not_routed_is_refused(ledger):
    ledger.task(lambda ctx, n: None, name="t", queue="polled")
    consumer = BrokerConsumer(ledger, "redis://h", queues=["polled"], subscriber=Unusable())
    with pytest.raises(ConfigError, match="not routed to a broker"):
        consumer.run()


def test_a_message_for_a_queue_it_does_not_consume_is_acked_and_its_job_left_alone(ledger, running):
    ledger.task(lambda ctx, n: None, name="t", queue="q")
    ledger.task(lambda ctx, n: None, name="other", queue="elsewhere")
    Outbox(ledger).route("q", actor="test")
    ledger.enqueue("t", {"n": 1}, key="mine")
    ledger.enqueue("other", {"n": 1}, key="theirs")
    broker = InMemory()
    stray, mine = broker.put("elsewhere", "theirs"), broker.put("q", "mine")
    outcomes: list[str] = []
    running.consumer(
        ledger,
        "redis://h",
        queues=["q"],
        subscriber=broker,
        on_delivery=lambda delivery, outcome: outcomes.append(outcome),
    )
    wait_until(lambda: mine in broker.acked, 10, what="the message of its own queue acked")
    assert stray in broker.acked
    assert outcomes == ["malformed", "claimed"]
    # The job of the other queue is its own consumers' to run: this one never claimed it.
    theirs = ledger.job_by_key("theirs", "elsewhere")
    assert (theirs.state, theirs.attempts) == (JobState.PENDING, 0)


def test_a_message_whose_claim_finds_the_ledger_unreachable_is_kept_and_its_job_runs_later(
    ledger, running, monkeypatch
):
    ran: list[str] = []
    ledger.task(lambda ctx, n: ran.append(ctx.key), name="t", queue="q")
    Outbox(ledger).route("q", actor="test")
    ledger.enqueue("t", {"n": 1}, key="k1")
    claims = 0

    def unreachable_once(runtime, wanted, *args, **kwargs):
        nonlocal claims
        claims += 1
        if claims == 1:
            raise BackendUnavailable("the ledger cannot be reached (staged by the test)")
        return Runtime.claim_keys(runtime, wanted, *args, **kwargs)

    monkeypatch.setattr(BrokerConsumer, "claim_keys", unreachable_once)
    broker = InMemory()
    message = broker.put("q", "k1")
    outcomes: list[str] = []
    running.consumer(
        ledger,
        "redis://h",
        subscriber=broker,
        on_delivery=lambda delivery, outcome: outcomes.append(outcome),
    )
    wait_until(lambda: message in broker.acked, 10, what="the message acked")
    # Acknowledged only once the job it names had run: an ack on the failed claim would have
    # lost the job's only message.
    assert outcomes == ["ledger_error", "claimed"]
    assert ran == ["k1"]
    assert ledger.job_by_key("k1", "q").state is JobState.DONE
    assert broker.acked == [message]


def test_a_message_kept_for_a_paused_group_is_given_back_when_the_consumer_stops(ledger, running):
    ledger.task(lambda ctx, n: None, name="t", queue="q")
    Outbox(ledger).route("q", actor="test")
    ledger.enqueue("t", {"n": 1}, key="g1", group="acme")
    ledger.pause_group("q", "acme", seconds=3600)
    broker = InMemory()
    message = broker.put("q", "g1")
    outcomes: list[str] = []
    consumer = running.consumer(
        ledger,
        "redis://h",
        subscriber=broker,
        on_delivery=lambda delivery, outcome: outcomes.append(outcome),
    )
    wait_until(lambda: "waited" in outcomes, 10, what="the message kept for the paused group")
    running.stop(consumer)
    # No new message comes when the pause ends: an ack would lose the job's only message, and
    # one neither acked nor given back waits for the broker's redelivery timeout.
    assert broker.released == [message]
    assert broker.acked == []
    assert ledger.job_by_key("g1", "q").state is JobState.PENDING


class SlowAcks(InMemory):
    """An in-memory broker whose acks take a while to be answered, and which keeps what it had
    acknowledged when the consumer closed its connection."""

    def __init__(self) -> None:
        super().__init__()
        self.acked_at_close: list[Message] | None = None

    def put(self, queue: str, key: str) -> Message:
        message = SlowAck(self, queue, key)
        self.inbox.append(message)
        return message

    async def close(self):
        self.acked_at_close = list(self.acked)


class SlowAck(Message):
    async def ack(self) -> None:
        await asyncio.sleep(0.3)
        await super().ack()


def test_the_ack_of_a_job_that_finishes_while_the_consumer_stops_is_sent_before_it_closes(
    ledger, running
):
    started, finish = threading.Event(), threading.Event()

    def handler(ctx, n):
        started.set()
        finish.wait(10)

    ledger.task(handler, name="t", queue="q")
    Outbox(ledger).route("q", actor="test")
    ledger.enqueue("t", {"n": 1}, key="k1")
    broker = SlowAcks()
    message = broker.put("q", "k1")
    consumer = running.consumer(ledger, "redis://h", subscriber=broker)
    wait_until(started.is_set, 10, what="the job to start")
    # The job finishes during the graceful stop: its message's ack is sent after the stop was
    # asked for, and must be answered before the connection closes (a lost ack is a
    # redelivery).
    consumer.stop()
    finish.set()
    running.stop(consumer)
    assert ledger.job_by_key("k1", "q").state is JobState.DONE
    assert broker.acked_at_close == [message]
    assert broker.released == []


@pytest.mark.parametrize(
    "body",
    [
        b"not json at all",
        b"[1, 2]",
        b'{"v": 2, "queue": "q", "key": "k1", "job_id": 1, "outbox_id": 1}',
        b'{"v": 1, "queue": "q", "job_id": 1, "outbox_id": 1}',
        b'{"v": 1, "queue": "q", "key": "k1", "job_id": "one", "outbox_id": 1}',
        b'{"v": 1, "queue": "q", "key": "k1", "job_id": null, "outbox_id": 1}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"v": 1, "queue": "q", "key": "k1\\u0000", "job_id": 1, "outbox_id": 1}',
        b'{"v": 1, "queue": "q", "key": "' + b"k" * 513 + b'", "job_id": 1, "outbox_id": 1}',
    ],
    ids=["text", "list", "version", "no-key", "bad-id", "null-id", "nested", "nul-key", "long-key"],
)
def test_a_message_that_is_not_a_jobledger_envelope_is_acked_and_its_job_left_alone(
    ledger, running, body
):
    """Something else written to the stream or queue (by hand, by another producer) is no job
    of this consumer's: it is acknowledged so that it does not come back, and counted as
    malformed; a failing on_delivery hook changes none of it."""
    ledger.task(lambda ctx, n: None, name="t", queue="q")
    Outbox(ledger).route("q", actor="test")
    ledger.enqueue("t", {"n": 1}, key="k1")
    assert Envelope.parse(body) is None
    broker = InMemory()
    foreign = broker.put("q", "k1")
    foreign.envelope = Envelope.parse(body)
    outcomes: list[str] = []

    def hook(delivery, outcome):
        outcomes.append(outcome)
        raise RuntimeError("a broken hook")

    consumer = running.consumer(ledger, "redis://h", subscriber=broker, on_delivery=hook)
    wait_until(lambda: foreign in broker.acked, 10, what="the foreign message acked")
    running.stop(consumer)
    assert outcomes == ["malformed"]
    assert consumer.deliveries.malformed == 1 and consumer.deliveries.claimed == 0
    job = ledger.job_by_key("k1", "q")
    assert (job.state, job.attempts) == (JobState.PENDING, 0)
