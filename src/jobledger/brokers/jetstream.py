"""NATS JetStream through nats-py: one file-backed stream, a subject and a durable pull consumer
per ledger queue.

The stream (``stream`` option, default ``JOBLEDGER``) takes the subjects ``<prefix>.>`` with
work-queue retention (a message is removed once acknowledged) and discards *new* messages when
full, so that a full stream refuses a publication (the relay retries) instead of silently
dropping old ones. Every publication carries ``Nats-Msg-Id: <queue>/<key>/<outbox id>``:
within the duplicate window JetStream stores a relay's repeat of the same record once (the
repeat's acknowledgement says ``duplicate``), while a redrive's new record, having a new outbox
id, is stored again.

All consumer processes of a queue share its durable consumer (``<prefix>-<queue>``), which has
no delivery limit: a message not acknowledged within ``ack_wait`` is delivered again.
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

__all__ = ["JetStreamPublisher", "JetStreamSubscriber"]

log = logging.getLogger("jobledger.brokers")


async def _quiet(*_: Any) -> None:
    """nats-py reports connection trouble through callbacks; ours show up as exceptions."""


class _Connected(Connection):
    broker = "NATS"

    def __init__(self, url: BrokerURL):
        super().__init__(url)
        self._nc: Any = None
        self._js: Any = None

    async def _open(self) -> None:
        nats = require("nats")
        require("nats.js")
        # nats-py raises many kinds of exception; all of them mean "not now".
        async with self.connecting():
            self._nc = await nats.connect(
                servers=[self.url.client_url],
                connect_timeout=self.url.timeout,
                allow_reconnect=False,
                max_reconnect_attempts=0,
                error_cb=_quiet,
                disconnected_cb=_quiet,
                closed_cb=_quiet,
            )
            self._js = self._nc.jetstream(timeout=self.url.timeout)
            await self._ensure_stream()

    async def _ensure_stream(self) -> None:
        js_api = require("nats.js.api")
        js_errors = require("nats.js.errors")
        name = self.url.stream
        wanted = f"{self.url.prefix}.>"
        try:
            info = await self._js.stream_info(name)
        except js_errors.NotFoundError:
            config = js_api.StreamConfig(
                name=name,
                subjects=[wanted],
                retention=js_api.RetentionPolicy.WORK_QUEUE,
                storage=js_api.StorageType.FILE,
                discard=js_api.DiscardPolicy.NEW,
                duplicate_window=self.url.duplicate_window,
            )
            try:
                await self._js.add_stream(config)
                return
            except js_errors.BadRequestError as exc:
                refused = exc
            try:
                info = await self._js.stream_info(name)  # created meanwhile by another process
            except js_errors.NotFoundError:
                # Not created meanwhile: the server refused it, most often because another
                # stream already takes these subjects. Say so, and what to change, rather than
                # report the stream missing as if the server were down.
                reason = getattr(refused, "description", None) or describe(refused)
                raise BrokerUnavailable(
                    f"NATS at {self.url.redacted}: stream {name!r} cannot be created for the "
                    f"subjects {wanted!r} ({reason}); choose another stream= or prefix="
                ) from None
        if wanted not in (info.config.subjects or []):
            raise BrokerUnavailable(
                f"NATS at {self.url.redacted}: stream {name!r} exists but does not take the "
                f"subjects {wanted!r} (it takes {info.config.subjects}); choose another "
                "stream= or prefix="
            )

    @property
    def closed(self) -> bool:
        return self._nc is None or self._nc.is_closed or not self._nc.is_connected

    def _detach(self) -> Any:
        nc, self._nc, self._js = self._nc, None, None
        return nc


class JetStreamPublisher(_Connected):
    """Publishes outbox records to JetStream and waits for its acknowledgements."""

    async def connect(self) -> None:
        await self._open()

    async def publish(self, records: Sequence[OutboxRecord]) -> PublishOutcome:
        if self.closed:
            return PublishOutcome(0, error=BrokerUnavailable("the NATS connection is closed"))
        futures = []
        try:
            for record in records:
                envelope = Envelope.of(record)
                headers = headers_of(envelope) | {"Nats-Msg-Id": envelope.dedupe_id}
                futures.append(
                    await self._js.publish_async(
                        self.url.destination(record.queue),
                        envelope.body(),
                        headers=headers,
                        wait_stall=self.url.timeout,
                    )
                )
            await self._nc.flush(timeout=self.url.timeout)
            done, _ = await asyncio.wait(futures, timeout=self.url.timeout) if futures else ((), ())
        except Exception as exc:  # noqa: BLE001 - reported to the relay, which reconnects
            error: BaseException | None = exc
            done = {f for f in futures if f.done()}
        else:
            error = None
        confirmed = duplicates = 0
        for future in futures:
            if future not in done:
                error = error or TimeoutError("no acknowledgement from JetStream in time")
                break
            if future.cancelled() or future.exception() is not None:
                error = future.exception() or asyncio.CancelledError()
                break
            confirmed += 1
            duplicates += bool(future.result().duplicate)
        for future in futures:
            future.cancel()
        return PublishOutcome(confirmed, duplicates, error)


class _JetStreamDelivery(Delivery):
    def __init__(self, message: Any):
        self._message = message
        self.envelope = Envelope.parse(message.data)
        try:
            self.redelivered = message.metadata.num_delivered > 1
        except Exception:  # noqa: BLE001 - not a JetStream message
            self.redelivered = False

    async def ack(self) -> None:
        try:
            await self._message.ack()
        except Exception as exc:  # noqa: BLE001
            log.debug("ack lost (%s); JetStream will deliver the message again", describe(exc))

    async def release(self) -> None:
        with contextlib.suppress(Exception):
            await self._message.nak()

    async def extend(self) -> None:
        with contextlib.suppress(Exception):
            await self._message.in_progress()


class JetStreamSubscriber(_Connected):
    """Pulls from the durable consumers of some ledger queues."""

    def __init__(self, url: BrokerURL):
        super().__init__(url)
        self._subs: list[Any] = []
        self._next = 0

    async def connect(self, queues: Sequence[str], prefetch: int) -> None:
        js_api = require("nats.js.api")
        await self._open()
        self._subs = []
        async with self.connecting("cannot consume"):
            for queue in queues:
                config = js_api.ConsumerConfig(
                    ack_policy=js_api.AckPolicy.EXPLICIT,
                    ack_wait=self.url.ack_wait,
                    max_deliver=-1,
                )
                self._subs.append(
                    await self._js.pull_subscribe(
                        self.url.destination(queue),
                        durable=self.url.consumer_name(queue),
                        stream=self.url.stream,
                        config=config,
                    )
                )

    async def receive(self, limit: int, timeout: float) -> list[Delivery]:
        nats_errors = require("nats.errors")
        if self.closed:
            raise self.gone()
        # Several queues: take turns, so that a busy one does not starve the others.
        share = max(0.05, timeout / max(1, len(self._subs)))
        for _ in range(len(self._subs)):
            sub = self._subs[self._next % len(self._subs)]
            self._next += 1
            try:
                messages = await sub.fetch(batch=max(1, limit), timeout=share)
            except nats_errors.TimeoutError:
                continue
            except Exception as exc:  # noqa: BLE001
                raise self.unavailable(exc, "fetch failed") from None
            return [_JetStreamDelivery(m) for m in messages]
        if self.closed:
            raise self.gone()
        return []
