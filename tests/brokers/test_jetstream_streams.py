"""The JetStream stream a relay and its consumers share: one that exists under the name but takes
other subjects, or another stream that already takes the subjects, is refused with what to
change, by the publisher and the subscriber alike."""

from __future__ import annotations

import asyncio

import pytest

from jobledger.brokers.base import publisher_for, subscriber_for
from jobledger.errors import BrokerUnavailable

from .conftest import QUEUE

pytestmark = pytest.mark.parametrize("broker_kind", ["nats"])


async def _with_stream(broker, name: str, subjects: list[str], connect) -> BaseException | None:
    import nats

    nc = await nats.connect(f"nats://{broker.host}:{broker.port}", connect_timeout=5)
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=subjects)
    try:
        await connect()
    except BrokerUnavailable as exc:
        return exc
    finally:
        await js.delete_stream(name)
        await nc.close()
    return None


def _connects(broker, side: str):
    url = broker.url()

    async def connect() -> None:
        if side == "relay":
            client = publisher_for(url)
            try:
                await client.connect()
            finally:
                await client.close()
        else:
            client = subscriber_for(url, "c")
            try:
                await client.connect([QUEUE], 1)
            finally:
                await client.close()

    return connect


@pytest.mark.parametrize("side", ["relay", "consumer"])
def test_a_stream_of_that_name_taking_other_subjects_is_refused(broker, side):
    stream, wanted = broker.prefix.upper(), f"{broker.prefix}.>"
    error = asyncio.run(
        _with_stream(broker, stream, [f"other{broker.prefix}.>"], _connects(broker, side))
    )
    assert error is not None
    assert f"stream {stream!r} exists but does not take the subjects {wanted!r}" in str(error)
    assert str(error).endswith("choose another stream= or prefix=")


@pytest.mark.parametrize("side", ["relay", "consumer"])
def test_another_stream_taking_the_subjects_is_refused_with_what_to_change(broker, side):
    stream, wanted = broker.prefix.upper(), f"{broker.prefix}.>"
    error = asyncio.run(_with_stream(broker, f"OTHER{stream}", [wanted], _connects(broker, side)))
    assert error is not None
    assert str(error) == (
        f"NATS at {broker.url()}: stream {stream!r} cannot be created for the subjects "
        f"{wanted!r} (subjects overlap with an existing stream); choose another stream= or prefix="
    )
