"""The relay without a broker: a publisher in the test process says which records the broker
confirmed, and the outbox shows which the relay marked published."""

from __future__ import annotations

import pytest

from jobledger import Ledger
from jobledger.brokers.base import PublishOutcome
from jobledger.brokers.outbox import Outbox
from jobledger.brokers.relay import Relay
from jobledger.errors import BrokerUnavailable

pytestmark = pytest.mark.parametrize("backend_name", ["sqlite"], indirect=True)


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
