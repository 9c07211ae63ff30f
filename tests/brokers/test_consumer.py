"""The consumer without a broker: what it decides for a message whose job it could not claim,
and how it stops when its broker cannot be used at all."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobledger import ConfigError, Ledger
from jobledger.brokers.consumer import BrokerConsumer
from jobledger.brokers.outbox import Outbox

from ..conformance.conftest import T0

pytestmark = pytest.mark.parametrize("backend_name", ["sqlite"], indirect=True)


class Unusable:
    """A subscriber whose client library is missing."""

    url = None

    async def connect(self, queues, prefetch):
        raise ConfigError("the 'aio_pika' package is needed for this broker")

    async def close(self):
        pass


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
