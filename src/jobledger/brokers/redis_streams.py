"""Redis Streams through redis-py: a stream per ledger queue and one consumer group.

The relay appends with ``XADD`` (pipelined, in order); the reply is the confirmation. That
reply means the entry is in Redis's memory: it survives a Redis restart only if Redis writes an
append-only file (``appendonly yes``), and a crash of the host loses nothing only with
``appendfsync always`` — see docs/transports.md.

Consumers read with ``XREADGROUP`` in the group (``group`` option, default the prefix; created
from the start of the stream, so nothing appended before the first consumer is skipped),
acknowledge with ``XACK`` and then delete the entry (``XDEL``), so the stream holds only what is
still owed. An entry a consumer took and never acknowledged (it crashed) is taken over with
``XAUTOCLAIM`` by another consumer once it has been idle for ``reclaim_after`` seconds.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

from .._records import OutboxRecord
from ..errors import BrokerUnavailable
from .base import Connection, Delivery, Envelope, PublishOutcome, describe, require
from .urls import BrokerURL

__all__ = ["RedisPublisher", "RedisSubscriber"]

log = logging.getLogger("jobledger.brokers")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _Connected(Connection):
    broker = "Redis"

    def __init__(self, url: BrokerURL):
        super().__init__(url)
        self._redis: Any = None
        self._groups: set[str] = set()

    async def _open(self) -> None:
        aioredis = require("redis.asyncio")
        # redis-py's errors all mean "not now".
        async with self.connecting():
            self._redis = aioredis.Redis.from_url(
                self.url.client_url,
                socket_connect_timeout=self.url.timeout,
                socket_timeout=self.url.timeout + 5,
                retry_on_timeout=False,
            )
            await self._redis.ping()
        self._groups.clear()

    async def _ensure_group(self, stream: str) -> None:
        if stream in self._groups:
            return
        redis_exceptions = require("redis.exceptions")
        try:
            await self._redis.xgroup_create(stream, self.url.group, id="0", mkstream=True)
        except redis_exceptions.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._groups.add(stream)

    def _detach(self) -> Any:
        client, self._redis = self._redis, None
        return client

    async def _shut(self, client: Any) -> None:
        await client.aclose()


class RedisPublisher(_Connected):
    """Appends outbox records to Redis streams."""

    async def connect(self) -> None:
        await self._open()

    async def publish(self, records: Sequence[OutboxRecord]) -> PublishOutcome:
        if self._redis is None:
            return PublishOutcome(0, error=BrokerUnavailable("not connected to Redis"))
        try:
            for queue in {r.queue for r in records}:
                await self._ensure_group(self.url.destination(queue))
            pipe = self._redis.pipeline(transaction=False)
            for record in records:
                envelope = Envelope.of(record)
                pipe.xadd(
                    self.url.destination(record.queue),
                    {
                        "message_id": envelope.key,
                        "outbox_id": str(envelope.outbox_id),
                        "body": envelope.body(),
                    },
                )
            results = await pipe.execute(raise_on_error=False)
        except Exception as exc:  # noqa: BLE001 - reported to the relay, which reconnects
            return PublishOutcome(0, error=exc)
        return PublishOutcome.of(results)


class _RedisDelivery(Delivery):
    def __init__(
        self, owner: RedisSubscriber, stream: str, entry_id: str, fields: Any, again: bool
    ):
        self._owner = owner
        self.stream = stream
        self.entry_id = entry_id
        body = fields.get(b"body", fields.get("body")) if isinstance(fields, dict) else None
        self.envelope = Envelope.parse(body) if isinstance(body, bytes | str) else None
        self.redelivered = again

    async def ack(self) -> None:
        await self._owner._ack(self)

    async def release(self) -> None:
        # Redis has no "give back": the entry stays pending until another consumer (or this
        # one) reclaims it after reclaim_after seconds of idleness.
        self._owner._in_flight.discard(self.entry_id)

    async def extend(self) -> None:
        await self._owner._extend(self)


class RedisSubscriber(_Connected):
    """Reads the streams of some ledger queues as one consumer of the group."""

    def __init__(self, url: BrokerURL, consumer: str):
        super().__init__(url)
        self.consumer = consumer
        self._streams: list[str] = []
        self._in_flight: set[str] = set()
        self._next_reclaim = 0.0

    async def connect(self, queues: Sequence[str], prefetch: int) -> None:
        await self._open()
        self._streams = [self.url.destination(q) for q in queues]
        async with self.connecting("cannot create the consumer group"):
            for stream in self._streams:
                await self._ensure_group(stream)
        self._in_flight.clear()
        self._next_reclaim = 0.0

    async def receive(self, limit: int, timeout: float) -> list[Delivery]:
        if self._redis is None:
            raise BrokerUnavailable(f"not connected to Redis at {self.url.redacted}")
        limit = max(1, limit)
        try:
            taken = await self._reclaim(limit)
            if taken:
                return taken
            reply = await self._redis.xreadgroup(
                self.url.group,
                self.consumer,
                dict.fromkeys(self._streams, ">"),
                count=limit,
                block=max(1, int(timeout * 1000)),
            )
        except Exception as exc:  # noqa: BLE001
            raise self.unavailable(exc, "read failed") from None
        deliveries: list[Delivery] = []
        for stream, entries in _streams_of(reply):
            for entry_id, fields in entries:
                if fields is None:  # deleted meanwhile
                    continue
                deliveries.append(self._delivery(stream, entry_id, fields, again=False))
        return deliveries

    async def _reclaim(self, limit: int) -> list[Delivery]:
        """Entries other consumers took and left unacknowledged for ``reclaim_after``."""
        if time.monotonic() < self._next_reclaim:
            return []
        self._next_reclaim = time.monotonic() + max(0.05, self.url.reclaim_after / 4)
        idle_ms = int(self.url.reclaim_after * 1000)
        taken: list[Delivery] = []
        for stream in self._streams:
            reply = await self._redis.xautoclaim(
                stream, self.url.group, self.consumer, idle_ms, "0-0", count=limit
            )
            for entry_id, fields in reply[1]:
                entry = _text(entry_id)
                if fields is None or entry in self._in_flight:
                    continue  # deleted meanwhile, or ours and still being worked on
                taken.append(self._delivery(stream, entry_id, fields, again=True))
        return taken

    def _delivery(self, stream: Any, entry_id: Any, fields: Any, again: bool) -> _RedisDelivery:
        delivery = _RedisDelivery(self, _text(stream), _text(entry_id), fields, again)
        self._in_flight.add(delivery.entry_id)
        return delivery

    async def _extend(self, delivery: _RedisDelivery) -> None:
        """Claim the entry again for ourselves: that resets its idle time."""
        if self._redis is None:
            return
        with contextlib.suppress(Exception):
            await self._redis.xclaim(
                delivery.stream,
                self.url.group,
                self.consumer,
                0,
                [delivery.entry_id],
                justid=True,
            )

    async def _ack(self, delivery: _RedisDelivery) -> None:
        self._in_flight.discard(delivery.entry_id)
        if self._redis is None:
            return
        try:
            pipe = self._redis.pipeline(transaction=True)
            pipe.xack(delivery.stream, self.url.group, delivery.entry_id)
            pipe.xdel(delivery.stream, delivery.entry_id)
            await pipe.execute()
        except Exception as exc:  # noqa: BLE001
            log.debug("ack lost (%s); the entry will be reclaimed and skipped", describe(exc))


def _streams_of(reply: Any) -> list[tuple[Any, Any]]:
    """XREADGROUP's reply as (stream, entries) pairs, in RESP2 (a list) or RESP3 (a dict)."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return [(k, v[0] if v and isinstance(v[0], list) else v) for k, v in reply.items()]
    return [(stream, entries) for stream, entries in reply]
