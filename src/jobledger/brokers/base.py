"""What every broker adapter does, and the message jobledger puts on the wire.

A message says "job ``key`` of ``queue`` is pending": it carries no payload, because the
consumer claims the job in the ledger (which has the payload and decides whether the job runs).
The body is JSON::

    {"v": 1, "queue": "digests", "key": "4187:2026-W33", "job_id": 17, "outbox_id": 42,
     "reason": "enqueue"}

The job key is the message id (RabbitMQ ``message_id``, a ``message_id`` field on Redis; on
NATS ``Nats-Msg-Id`` is ``queue/key/outbox_id``, so that JetStream drops a relay's repeat of one
record but not a redrive's new record).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import importlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar, Protocol

from .._records import OutboxRecord, decode_json, validate_key
from ..errors import BrokerUnavailable, ConfigError
from .urls import BrokerURL

__all__ = [
    "Connection",
    "Delivery",
    "Envelope",
    "PublishOutcome",
    "Publisher",
    "Subscriber",
    "publisher_for",
    "require",
    "subscriber_for",
]


@dataclass(frozen=True, slots=True)
class Envelope:
    """What one message says."""

    queue: str
    key: str
    job_id: int
    outbox_id: int
    reason: str

    @classmethod
    def of(cls, record: OutboxRecord) -> Envelope:
        return cls(record.queue, record.key, record.job_id, record.id, record.reason.value)

    def body(self) -> bytes:
        return json.dumps(
            {
                "v": 1,
                "queue": self.queue,
                "key": self.key,
                "job_id": self.job_id,
                "outbox_id": self.outbox_id,
                "reason": self.reason,
            },
            separators=(",", ":"),
        ).encode()

    @property
    def dedupe_id(self) -> str:
        """Unique per outbox record: a relay's repeat of a record has the same one."""
        return f"{self.queue}/{self.key}/{self.outbox_id}"

    @classmethod
    def parse(cls, body: bytes | str) -> Envelope | None:
        """The envelope in a message body, or None when it is not one of ours (a key no job
        could have included: on PostgreSQL one with U+0000 failed the claim, and the consumer
        with it)."""
        try:
            data = decode_json(body)
            if not isinstance(data, dict) or data.get("v") != 1:
                return None
            return cls(
                str(data["queue"]),
                validate_key(str(data["key"])),
                int(data["job_id"]),
                int(data["outbox_id"]),
                str(data.get("reason", "")),
            )
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True, slots=True)
class PublishOutcome:
    """What publishing a batch did. The broker confirmed the first ``confirmed`` records (in
    order); ``error`` says why the rest were not (None when all were)."""

    confirmed: int
    duplicates: int = 0
    """Of the confirmed, how many the broker said it already had (JetStream's dedupe)."""
    error: BaseException | None = None

    @classmethod
    def of(cls, replies: Sequence[object]) -> PublishOutcome:
        """The outcome of the broker's replies to a batch, in order: confirmed up to the first
        reply that is an exception."""
        for confirmed, reply in enumerate(replies):
            if isinstance(reply, BaseException):
                return cls(confirmed, error=reply)
        return cls(len(replies))


class Connection(abc.ABC):
    """A client's connection to one broker, as every adapter holds it: opened whole or not at
    all, and closed quietly. ``broker`` names the broker in messages."""

    broker: ClassVar[str]
    url: BrokerURL

    def __init__(self, url: BrokerURL):
        self.url = url

    def unavailable(self, exc: BaseException, doing: str | None = None) -> BrokerUnavailable:
        """``<broker> at <url> is unavailable: <error>``, or ``…: <doing>: <error>``."""
        where = f"{self.broker} at {self.url.redacted}"
        if doing is None:
            return BrokerUnavailable(f"{where} is unavailable: {describe(exc)}")
        return BrokerUnavailable(f"{where}: {doing}: {describe(exc)}")

    def gone(self) -> BrokerUnavailable:
        return BrokerUnavailable(f"the connection to {self.broker} at {self.url.redacted} closed")

    @contextlib.asynccontextmanager
    async def connecting(
        self, doing: str | None = None, errors: tuple[type[BaseException], ...] = (Exception,)
    ) -> AsyncIterator[None]:
        """Around opening a connection (or subscribing on it): on one of ``errors`` the
        connection is closed and ``unavailable(error, doing)`` raised; so is a
        ``BrokerUnavailable``, as it is."""
        try:
            yield
        except BrokerUnavailable:
            await self.close()
            raise
        except errors as exc:
            await self.close()
            raise self.unavailable(exc, doing) from None

    async def close(self) -> None:
        """Close the connection (waiting 5 s at most, never raising); closing twice is fine."""
        client = self._detach()
        if client is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._shut(client), 5)

    @abc.abstractmethod
    def _detach(self) -> Any:
        """Forget the connection; return the client to close (None when there is none)."""

    async def _shut(self, client: Any) -> None:
        await client.close()


class Delivery(abc.ABC):
    """One message as a consumer received it."""

    envelope: Envelope | None
    """None when the body is not a jobledger message."""
    redelivered: bool
    """The broker delivered it before (to this or another consumer)."""

    @abc.abstractmethod
    async def ack(self) -> None:
        """Tell the broker the message is dealt with. Never raises: a lost ack means the
        message comes again, which the ledger makes harmless."""

    @abc.abstractmethod
    async def release(self) -> None:
        """Give the message back so that it is delivered again (now or, on Redis, once
        ``reclaim_after`` has passed). Never raises."""

    async def extend(self) -> None:
        """Tell the broker the message is still being worked on, so that it is not delivered
        to another consumer meanwhile (JetStream's ``ack_wait``, Redis's ``reclaim_after``).
        Never raises. RabbitMQ needs nothing: it redelivers only when a connection closes."""
        return None


class Publisher(Protocol):
    """Publishes outbox records with the broker's confirmation."""

    url: BrokerURL

    async def connect(self) -> None:
        """Connect (``BrokerUnavailable`` when the broker cannot be reached)."""
        ...

    async def publish(self, records: Sequence[OutboxRecord]) -> PublishOutcome:
        """Send the records in order and wait for the broker to confirm them."""
        ...

    async def close(self) -> None: ...


class Subscriber(Protocol):
    """Receives the messages of some ledger queues."""

    url: BrokerURL

    async def connect(self, queues: Sequence[str], prefetch: int) -> None:
        """Connect and subscribe; at most ``prefetch`` unacknowledged messages at a time where
        the broker pushes (RabbitMQ)."""
        ...

    async def receive(self, limit: int, timeout: float) -> list[Delivery]:
        """Up to ``limit`` messages, waiting at most ``timeout`` seconds for the first.
        ``BrokerUnavailable`` when the connection is gone."""
        ...

    async def close(self) -> None: ...


def require(module: str) -> ModuleType:
    """Import a broker client library, or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(
            f"the {module.split('.')[0]!r} package is needed for this broker: "
            "pip install 'jobledger[brokers]'"
        ) from None


def publisher_for(url: str | BrokerURL) -> Publisher:
    """The publisher for a broker URL."""
    parsed = url if isinstance(url, BrokerURL) else BrokerURL.parse(url)
    if parsed.kind == "rabbitmq":
        from .rabbitmq import RabbitPublisher

        return RabbitPublisher(parsed)
    if parsed.kind == "jetstream":
        from .jetstream import JetStreamPublisher

        return JetStreamPublisher(parsed)
    from .redis_streams import RedisPublisher

    return RedisPublisher(parsed)


def subscriber_for(url: str | BrokerURL, consumer: str) -> Subscriber:
    """The subscriber for a broker URL; ``consumer`` names this consumer (Redis uses it)."""
    parsed = url if isinstance(url, BrokerURL) else BrokerURL.parse(url)
    if parsed.kind == "rabbitmq":
        from .rabbitmq import RabbitSubscriber

        return RabbitSubscriber(parsed)
    if parsed.kind == "jetstream":
        from .jetstream import JetStreamSubscriber

        return JetStreamSubscriber(parsed)
    from .redis_streams import RedisSubscriber

    return RedisSubscriber(parsed, consumer)


def describe(exc: BaseException) -> str:
    """One line about a client library's exception."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def headers_of(envelope: Envelope) -> dict[str, Any]:
    return {
        "jobledger-queue": envelope.queue,
        "jobledger-key": envelope.key,
        "jobledger-outbox-id": str(envelope.outbox_id),
    }
