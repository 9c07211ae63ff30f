"""The receiving side: an ASGI app that takes Standard Webhooks deliveries into the ledger.

For web applications that receive jobledger's pushes — or any Standard Webhooks sender's. Mount
it at the URL the subscription posts to; for each request it:

1. checks the three ``webhook-*`` headers and that the timestamp is within ±5 minutes of this
   clock — before reading the body;
2. reads the raw body (at most ``max_body`` bytes) and checks the signature against the
   receiver's secrets (several during a rotation), in constant time — before parsing it;
3. answers a ``webhook-id`` it already accepted with **200** (a duplicate: the sender may stop;
   nothing is handed over again);
4. parses the JSON and **records the acceptance durably**: the event becomes a job of
   ``task`` in the application's ledger, keyed by the ``webhook-id``, committed in the ledger's
   database; only then does it answer **202**. A worker of the application (in the same
   process, woken at once, or anywhere) runs the task with the event.

Because the acceptance is the job and the job's key is the ``webhook-id``, a receiver killed after
the commit and before its answer recognises the redelivery as a duplicate and acknowledges it,
and the application's task runs once (its effects are the ledger's usual ones: see
docs/concepts.md). Answers: 202 accepted, 200 duplicate, 400 malformed (not a JSON object, or
JSON no database stores: NaN, U+0000, half a surrogate pair), 401 not verified (bad signature,
stale timestamp), 405 not POST (with ``Allow: POST``), 413 too large, 503 the database is
unavailable (the sender retries). A ``webhook-id`` is accepted once, whatever body comes with it later.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import TYPE_CHECKING, Any

from .._faults import fault_point
from .._records import (
    DEFAULT_QUEUE,
    PayloadTooLarge,
    decode_json,
    validate_correlation_id,
    validate_key,
    validate_queue_name,
)
from .._task import Task
from .._webhooks import (
    DEFAULT_TOLERANCE,
    WebhookVerificationError,
    secret_bytes,
    verify_webhook,
)
from ..errors import BackendUnavailable, ConfigError, KeyConflict, NotFound, PayloadError

if TYPE_CHECKING:
    from .._ledger import Ledger

__all__ = ["WebhookReceiver"]

log = logging.getLogger("jobledger.push.receiver")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

MAX_BODY = 1024 * 1024
_SAMPLE = {"type": "example.event", "timestamp": "2026-01-01T00:00:00Z", "data": {}}


class _Refused(Exception):
    def __init__(self, status: int, reason: str, detail: str):
        self.status = status
        self.reason = reason
        self.detail = detail
        super().__init__(detail)


class WebhookReceiver:
    """An ASGI app receiving Standard Webhooks deliveries as jobs of ``task``.

    - ``ledger``: the application's ledger; acceptance is recorded in its database;
    - ``secrets``: the signing secret (``whsec_…``), or several while the sender rotates;
    - ``task``: a task (``@ledger.task``) or a task name; it is called with the event's
      ``type``, ``timestamp`` and ``data`` as keyword arguments, and ``ctx.key`` is the
      ``webhook-id``;
    - ``queue``: where the jobs go (default: the task's queue);
    - ``tolerance``: seconds a timestamp may differ from this clock (default 300);
    - ``max_body``: the largest body accepted, in bytes (default 1 MiB; a job's payload is at
      most 256 KiB in any case).
    """

    def __init__(
        self,
        ledger: Ledger,
        secrets: str | Iterable[str],
        task: Task | str,
        *,
        queue: str | None = None,
        tolerance: float = DEFAULT_TOLERANCE,
        max_body: int = MAX_BODY,
    ):
        self.ledger = ledger
        self.secrets = [secrets] if isinstance(secrets, str) else list(secrets)
        if not self.secrets:
            raise ConfigError("a WebhookReceiver needs at least one secret")
        for secret in self.secrets:
            secret_bytes(secret)
        if not isinstance(task, Task | str) or not task:
            raise ConfigError(f"task must be a registered Task or a task name, got {task!r}")
        if isinstance(task, Task):
            try:
                task.check_payload(_SAMPLE)
            except PayloadError:
                raise ConfigError(
                    f"task {task.name!r} must accept the event's fields as keyword arguments: "
                    "def handler(ctx, type, timestamp, data)"
                ) from None
        self.task = task
        self.queue = validate_queue_name(
            queue or (task.queue if isinstance(task, Task) else DEFAULT_QUEUE)
        )
        if not 0 < tolerance <= 3600:
            raise ConfigError(f"tolerance must be > 0 and <= 3600 seconds, got {tolerance!r}")
        self.tolerance = tolerance
        self.max_body = int(max_body)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope["method"] != "POST":
            body = {
                "status": "refused",
                "reason": "method-not-allowed",
                "detail": "send deliveries with POST",
            }
            await _answer(send, 405, body, ((b"allow", b"POST"),))
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            status, body = await self._receive(headers, receive)
        except _Refused as refused:
            log.warning(
                "webhook refused (%d %s): %s",
                refused.status,
                refused.reason,
                refused.detail,
                extra={"webhook_id": headers.get("webhook-id"), "status": refused.status},
            )
            status = refused.status
            body = {"status": "refused", "reason": refused.reason, "detail": refused.detail}
        await _answer(send, status, body)

    async def _receive(
        self, headers: dict[str, str], receive: Receive
    ) -> tuple[int, dict[str, Any]]:
        self._check_headers(headers)
        raw = await self._read(headers, receive)
        try:
            msg_id = verify_webhook(self.secrets, headers, raw, tolerance=self.tolerance)
        except WebhookVerificationError as exc:
            raise _Refused(401, exc.reason, exc.detail) from None
        try:
            validate_key(msg_id)
        except PayloadError as exc:
            raise _Refused(400, "invalid-header", f"webhook-id: {exc}") from None
        existing = await self._call(self._existing, msg_id)
        if existing is not None:
            return 200, {"status": "duplicate", "job_id": existing}
        payload = _event(raw)
        correlation = _correlation(headers.get("jobledger-correlation-id"))
        try:
            job_id, created = await self._call(self._accept, msg_id, payload, correlation)
        except KeyConflict:
            # Accepted a moment ago by a concurrent request: the id decides, as for any replay.
            existing = await self._call(self._existing, msg_id)
            return 200, {"status": "duplicate", "job_id": existing}
        except PayloadTooLarge as exc:
            raise _Refused(413, "too-large", str(exc)) from None
        except PayloadError as exc:  # JSON that no database stores (U+0000, half a pair)
            raise _Refused(400, "malformed", str(exc)) from None
        fault_point("receiver.after_accept")
        if not created:
            return 200, {"status": "duplicate", "job_id": job_id}
        log.info(
            "webhook %s accepted as job %d",
            msg_id,
            job_id,
            extra={"webhook_id": msg_id, "job_id": job_id, "correlation_id": correlation},
        )
        return 202, {"status": "accepted", "job_id": job_id}

    def _check_headers(self, headers: dict[str, str]) -> None:
        """Everything that can be refused before the body is read."""
        try:
            # The signature cannot match without a body, but the headers and the timestamp are
            # checked first: a stale or malformed delivery is refused without reading it.
            verify_webhook(self.secrets, headers, b"", tolerance=self.tolerance)
        except WebhookVerificationError as exc:
            if exc.reason != "no-matching-signature":
                status = 400 if exc.reason in ("missing-header", "invalid-header") else 401
                raise _Refused(status, exc.reason, exc.detail) from None

    async def _read(self, headers: dict[str, str], receive: Receive) -> bytes:
        length = headers.get("content-length")
        if length is not None and length.strip().isdigit() and int(length) > self.max_body:
            raise _Refused(413, "too-large", f"the body is larger than {self.max_body} bytes")
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Refused(400, "disconnected", "the sender went away mid-body")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise _Refused(413, "too-large", f"the body is larger than {self.max_body} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(None, functools.partial(fn, *args))
        except BackendUnavailable as exc:
            raise _Refused(
                503, "unavailable", f"the ledger's database is unavailable: {exc}"
            ) from None

    def _existing(self, msg_id: str) -> int | None:
        try:
            return self.ledger.backend.history.get_by_key(self.queue, msg_id).id
        except NotFound:
            return None

    def _accept(
        self, msg_id: str, payload: dict[str, Any], correlation: str | None
    ) -> tuple[int, bool]:
        result = self.ledger.enqueue(
            self.task, payload, key=msg_id, queue=self.queue, correlation_id=correlation
        )
        return result.id, result.created


def _correlation(header: str | None) -> str | None:
    """The sender's correlation id, kept with the job when it is one a job can have (at most
    255 characters, no control character): a header for the logs, never a reason to refuse
    the event."""
    if header is None:
        return None
    try:
        return validate_correlation_id(header)
    except PayloadError:
        return None


def _event(raw: bytes) -> dict[str, Any]:
    """The job's payload: the event's ``type``, ``timestamp`` and ``data`` (an event without a
    ``data`` member is its own data)."""
    try:
        document = decode_json(raw)
    except ValueError:
        raise _Refused(400, "malformed", "the body is not JSON") from None
    if not isinstance(document, dict):
        raise _Refused(400, "malformed", "the body is not a JSON object")
    event_type = document.get("type")
    timestamp = document.get("timestamp")
    return {
        "type": event_type if isinstance(event_type, str) else None,
        "timestamp": timestamp if isinstance(timestamp, str) else None,
        "data": document.get("data", document),
    }


async def _answer(
    send: Send, status: int, body: dict[str, Any], extra: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    data = json.dumps(body, separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
