"""Broker URLs: the broker they name, the names they imply, and one clear error for each
mistake."""

from __future__ import annotations

import pytest

from jobledger import ConfigError
from jobledger.brokers.urls import BrokerURL


def test_each_scheme_names_its_broker_and_its_destinations():
    amqp = BrokerURL.parse("amqp://guest:secret@mq:5672/%2F?prefix=acme&heartbeat=30")
    assert amqp.kind == "rabbitmq" and amqp.destination("digests") == "acme.digests"
    assert amqp.client_url == "amqp://guest:secret@mq:5672/%2F?heartbeat=30"
    assert amqp.redacted == "amqp://guest:***@mq:5672/%2F?prefix=acme&heartbeat=30"
    assert amqp.queue_type == "classic" and amqp.timeout == 10

    nats = BrokerURL.parse("nats://127.0.0.1:4222?ack_wait=5")
    assert nats.kind == "jetstream" and nats.client_url == "nats://127.0.0.1:4222"
    assert nats.stream == "JOBLEDGER" and nats.destination("digests") == "jobledger.digests"
    assert (nats.ack_wait, nats.duplicate_window) == (5, 120)

    redis = BrokerURL.parse("rediss://:pw@cache:6380/2?group=workers&reclaim_after=30")
    assert redis.kind == "redis" and redis.destination("digests") == "jobledger:digests"
    assert (redis.group, redis.reclaim_after) == ("workers", 30)
    assert "pw" not in redis.redacted


def test_consumer_names_keep_queues_with_dots_apart():
    url = BrokerURL.parse("nats://h:4222")
    assert url.consumer_name("digests") == "jobledger-digests"
    dotted, underscored = url.consumer_name("a.b"), url.consumer_name("a_b")
    assert dotted != underscored and "." not in dotted and dotted.startswith("jobledger-a_b-")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "broker URL is empty"),
        ("kafka://h:9092", "unsupported scheme 'kafka'"),
        ("amqp://", "names no host"),
        ("amqp://h:notaport", "cannot be parsed"),
        ("amqp://h?prefix=a.b", "prefix 'a.b' must be"),
        ("amqp://h?queue_type=stream", "queue_type must be classic or quorum"),
        ("redis://h?reclaim_after=-1", "reclaim_after must be a number of seconds > 0"),
        ("nats://h?timeout=soon", "timeout must be a number of seconds > 0"),
        ("nats://h?user=me", "unknown option(s) user"),
        ("nats://h?stream=a.b", "stream 'a.b' must be"),
        ("redis://:pw@h?group=", "group must not be empty"),
    ],
)
def test_each_mistake_gets_one_clear_error(url, message):
    with pytest.raises(ConfigError) as error:
        BrokerURL.parse(url)
    assert message in str(error.value)
    assert "pw" not in str(error.value)


def test_a_broker_url_s_repr_and_text_show_no_password():
    # A repr reaches logs and tracebacks (a logged %r, an error tracker's local variables):
    # neither the URL nor the client's URL shows the password there.
    url = BrokerURL.parse("amqp://guest:secret@mq:5672/%2F?prefix=acme")
    assert "secret" not in repr(url) and "secret" not in str(url)
    assert repr(url) == "BrokerURL('amqp://guest:***@mq:5672/%2F?prefix=acme', kind='rabbitmq')"
    assert str(url) == "amqp://guest:***@mq:5672/%2F?prefix=acme"
