"""RabbitMQ through aio-pika: a durable queue per ledger queue, persistent messages, publisher
confirms, manual acknowledgements.

The relay publishes to the default exchange with the queue's name as routing key, ``mandatory``
set (an unroutable message is an error, not a silent drop), and waits for the broker's confirm,
which RabbitMQ sends for a persistent message on a durable queue once it is on disk. Consumers
take at most ``prefetch`` unacknowledged messages; when a consumer's connection closes, RabbitMQ
delivers what it held to another consumer at once (``redelivered`` set).

Queues are declared without a delivery limit or dead-letter exchange: the ledger's retry budget
decides when a job is dead, not the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from .._records import OutboxRecord
from ..errors import BrokerUnavailable
from .base import Connection, Delivery, Envelope, PublishOutcome, describe, headers_of, require
from .urls import BrokerURL

__all__ = ["RabbitPublisher", "RabbitSubscriber"]

log = logging.getLogger("jobledger.brokers")


class _Connected(Connection):
    """A connection and a channel, opened and closed together."""

    broker = "RabbitMQ"

    def __init__(self, url: BrokerURL):
        super().__init__(url)
        self._connection: Any = None
        self._channel: Any = None
        self._declared: set[str] = set()

    async def _open(self, confirms: bool) -> None:
        aio_pika = require("aio_pika")
        async with self.connecting(errors=_errors(aio_pika)):
            self._connection = await aio_pika.connect(self.url.client_url, timeout=self.url.timeout)
            self._channel = await self._connection.channel(
                publisher_confirms=confirms, on_return_raises=confirms
            )
        self._declared.clear()

    async def _declare(self, queue: str) -> Any:
        name = self.url.destination(queue)
        declared = await self._channel.declare_queue(
            name, durable=True, arguments={"x-queue-type": self.url.queue_type}
        )
        self._declared.add(queue)
        return declared

    @property
    def closed(self) -> bool:
        return (
            self._connection is None
            or self._connection.is_closed
            or self._channel is None
            or self._channel.is_closed
        )

    def _detach(self) -> Any:
        connection, self._connection, self._channel = self._connection, None, None
        return connection


def _errors(aio_pika: Any) -> tuple[type[BaseException], ...]:
    """What aio-pika raises when RabbitMQ cannot be reached or refuses."""
    return (TimeoutError, OSError, aio_pika.exceptions.AMQPError)


class RabbitPublisher(_Connected):
    """Publishes outbox records to RabbitMQ with publisher confirms."""

    async def connect(self) -> None:
        await self._open(confirms=True)

    async def publish(self, records: Sequence[OutboxRecord]) -> PublishOutcome:
        aio_pika = require("aio_pika")
        if self.closed:
            return PublishOutcome(0, error=BrokerUnavailable("the RabbitMQ connection is closed"))
        try:
            for queue in {r.queue for r in records} - self._declared:
                await self._declare(queue)
        except Exception as exc:  # noqa: BLE001 - reported to the relay, which reconnects
            return PublishOutcome(0, error=exc)
        exchange = self._channel.default_exchange
        # One channel keeps its frames in the order they were sent, and aio-pika sends them in
        # the order these tasks start: the confirms can be awaited together.
        tasks = [
            asyncio.ensure_future(
                exchange.publish(
                    _message(aio_pika, Envelope.of(r)),
                    routing_key=self.url.destination(r.queue),
                    mandatory=True,
                    timeout=self.url.timeout,
                )
            )
            for r in records
        ]
        return PublishOutcome.of(await asyncio.gather(*tasks, return_exceptions=True))


def _message(aio_pika: Any, envelope: Envelope) -> Any:
    return aio_pika.Message(
        envelope.body(),
        message_id=envelope.key,
        content_type="application/json",
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        headers=headers_of(envelope),
    )


class _RabbitDelivery(Delivery):
    def __init__(self, message: Any):
        self._message = message
        self.envelope = Envelope.parse(message.body)
        self.redelivered = bool(message.redelivered)

    async def ack(self) -> None:
        try:
            await self._message.ack()
        except Exception as exc:  # noqa: BLE001 - the channel it came on is gone
            log.debug("ack lost (%s); RabbitMQ will deliver the message again", describe(exc))

    async def release(self) -> None:
        with contextlib.suppress(Exception):
            await self._message.nack(requeue=True)


class RabbitSubscriber(_Connected):
    """Consumes the queues of some ledger queues, ``prefetch`` unacknowledged at a time."""

    def __init__(self, url: BrokerURL):
        super().__init__(url)
        self._inbox: asyncio.Queue[Any] = asyncio.Queue()

    async def connect(self, queues: Sequence[str], prefetch: int) -> None:
        aio_pika = require("aio_pika")
        await self._open(confirms=False)
        self._inbox = asyncio.Queue()
        async with self.connecting("cannot consume", errors=_errors(aio_pika)):
            await self._channel.set_qos(prefetch_count=max(1, prefetch))
            for queue in queues:
                declared = await self._declare(queue)
                await declared.consume(self._inbox.put, no_ack=False)
        wake = self._inbox
        self._connection.close_callbacks.add(lambda *_: wake.put_nowait(None))

    async def receive(self, limit: int, timeout: float) -> list[Delivery]:
        if self.closed:
            raise self.gone()
        try:
            first = await asyncio.wait_for(self._inbox.get(), timeout)
        except TimeoutError:
            return []
        messages = [first]
        while len(messages) < limit and not self._inbox.empty():
            messages.append(self._inbox.get_nowait())
        deliveries: list[Delivery] = [_RabbitDelivery(m) for m in messages if m is not None]
        if not deliveries and self.closed:
            raise self.gone()
        return deliveries
