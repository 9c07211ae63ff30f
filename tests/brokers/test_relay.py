"""The relay without a broker: a publisher in the test process says which records the broker
confirmed, and the outbox shows which the relay marked published."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobledger import ConfigError, Ledger
from jobledger.brokers.base import PublishOutcome
from jobledger.brokers.outbox import Outbox
from jobledger.brokers.relay import Relay
from jobledger.errors import BrokerUnavailable

pytestmark = pytest.mark.parametrize("backend_name", ["sqlite"], indirect=True)

T0 = datetime(2026, 8, 10, 6, 0, tzinfo=UTC)


class Refusing:
    """A publisher whose broker confirms the records of a batch up to the first one whose key
    it refuses, and none after it."""

    url = None

    def __init__(self, refused: str) -> None:
        self.refused = refused

    async def connect(self) -> None:
        pass

    async def publish(self, records) -> PublishOutcome:
        keys = [r.key for r in records]
        confirmed = keys.index(self.refused) if self.refused in keys else len(keys)
        return PublishOutcome(confirmed, error=ConnectionError(f"{self.refused} refused"))

    async def close(self) -> None:
        pass


def test_only_the_records_the_broker_confirmed_are_marked_published(ledger: Ledger):
    ledger.task(lambda ctx, n: None, name="t", queue="q")
    box = Outbox(ledger)
    box.route("q", actor="test")
    for key in ("a", "b", "c"):
        ledger.enqueue("t", {"n": 1}, key=key)
    relay = Relay(ledger, "redis://h", publisher=Refusing("b"), poll_interval=0.01)
    with pytest.raises(BrokerUnavailable, match="did not take everything"):
        relay.drain(timeout=1.0)
    # "c" reached the broker's client after "b" but was never confirmed: marking it would lose
    # its job's only message, as marking "b" would.
    published = {r.key: r.published_at is not None for r in box.records()}
    assert published == {"a": True, "b": False, "c": False}
    assert relay.stats.published == 1


class Confirming:
    """A publisher whose broker confirms every record, after ``meanwhile`` ran with the batch
    (what other relays did while this one was publishing)."""

    url = None

    def __init__(self, meanwhile) -> None:
        self.meanwhile = meanwhile

    async def connect(self) -> None:
        pass

    async def publish(self, records) -> PublishOutcome:
        self.meanwhile(records)
        return PublishOutcome(len(records))

    async def close(self) -> None:
        pass


def _routed(ledger: Ledger) -> Outbox:
    ledger.task(lambda ctx, n: None, name="t", queue="q")
    box = Outbox(ledger)
    box.route("q", actor="test")
    for key in ("a", "b", "c"):
        ledger.enqueue("t", {"n": 1}, key=key, now=T0)
    return box


def test_a_relay_that_lost_its_lease_while_publishing_marks_and_counts_nothing(ledger: Ledger):
    """Its lease ran out while the broker took the batch, and another relay of its name took
    over and marked a record: this one's mark is refused, and it reports nothing published."""
    box, clock = _routed(ledger), [T0]

    def taken_over(records) -> None:
        clock[0] = T0 + timedelta(seconds=20)  # past this relay's 15 s lease
        other = ledger.backend.leader.acquire("relay:default", "other", 15, now=clock[0])
        assert other is not None
        assert ledger.backend.outbox.mark([records[0].id], other, now=clock[0]) == 1

    relay = Relay(ledger, "redis://h", publisher=Confirming(taken_over), clock=lambda: clock[0])
    relay.drain(timeout=5.0)
    assert (relay.stats.published, relay.stats.leadership_lost) == (0, 1)
    published = {r.key: r.published_at is not None for r in box.records()}
    assert published == {"a": True, "b": False, "c": False}


def test_a_relay_counts_only_the_records_its_mark_found_unpublished(ledger: Ledger):
    """A relay of another name, whose queues overlap this one's, marked a record of the batch
    first: this relay's mark skips it, and so does its count."""
    box, clock = _routed(ledger), [T0]

    def marked_elsewhere(records) -> None:
        other = ledger.backend.leader.acquire("relay:other", "other", 15, now=clock[0])
        assert other is not None
        assert ledger.backend.outbox.mark([records[1].id], other, now=clock[0]) == 1

    relay = Relay(
        ledger, "redis://h", publisher=Confirming(marked_elsewhere), clock=lambda: clock[0]
    )
    relay.drain(timeout=5.0)
    assert (relay.stats.published, relay.stats.leadership_lost) == (2, 0)
    assert all(r.published_at is not None for r in box.records())


@pytest.mark.parametrize(
    "options, message",
    [
        ({"batch_size": 0}, "batch_size must be a whole number from 1 to 10000, got 0"),
        ({"batch_size": 10_001}, "batch_size must be a whole number from 1 to 10000, got 10001"),
        ({"batch_size": 2.5}, "batch_size must be a whole number from 1 to 10000, got 2.5"),
        ({"batch_size": True}, "batch_size must be a whole number from 1 to 10000, got True"),
        ({"poll_interval": 0}, "poll_interval must be > 0 seconds, got 0"),
        ({"poll_interval": float("nan")}, "poll_interval must be > 0 seconds, got nan"),
        ({"poll_interval": float("inf")}, "poll_interval must be > 0 seconds, got inf"),
        ({"poll_interval": "1"}, "poll_interval must be > 0 seconds, got '1'"),
        ({"lease_seconds": -1}, "lease_seconds must be > 0 seconds, got -1"),
    ],
)
def test_a_relay_with_a_setting_out_of_range_is_refused(ledger: Ledger, options, message):
    with pytest.raises(ConfigError) as info:
        Relay(ledger, "redis://h", publisher=Confirming(lambda records: None), **options)
    assert str(info.value) == message


def test_a_relay_at_its_bounds_is_built(ledger: Ledger):
    for size in (1, 10_000):
        relay = Relay(
            ledger, "redis://h", publisher=Confirming(lambda records: None), batch_size=size
        )
        assert relay.batch_size == size


def test_a_relay_prunes_the_records_published_longer_ago_than_it_keeps_them(ledger: Ledger):
    box, clock = _routed(ledger), [T0]
    relay = Relay(
        ledger, "redis://h", publisher=Confirming(lambda records: None), clock=lambda: clock[0]
    )
    relay.drain(timeout=5.0)
    assert relay.stats.published == 3 and relay.stats.pruned == 0
    # Published exactly a day (the default keep_published) ago, they are kept; a second more,
    # and the next relay's first pass deletes them.
    clock[0] = T0 + timedelta(days=1)
    kept = Relay(
        ledger, "redis://h", publisher=Confirming(lambda records: None), clock=lambda: clock[0]
    )
    kept.drain(timeout=5.0)
    assert kept.stats.pruned == 0 and len(box.records()) == 3
    clock[0] = T0 + timedelta(days=1, seconds=1)
    never = Relay(
        ledger,
        "redis://h",
        publisher=Confirming(lambda records: None),
        clock=lambda: clock[0],
        keep_published=None,
    )
    never.drain(timeout=5.0)
    assert never.stats.pruned == 0 and len(box.records()) == 3
    pruning = Relay(
        ledger, "redis://h", publisher=Confirming(lambda records: None), clock=lambda: clock[0]
    )
    pruning.drain(timeout=5.0)
    assert pruning.stats.pruned == 3 and box.records() == []
