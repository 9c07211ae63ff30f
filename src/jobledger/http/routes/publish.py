"""Publishing: ``POST /v1/queue/publish`` and ``POST /v1/queue/publish-batch``.

The ``Idempotency-Key`` header becomes the job's key. What a publish can answer:

- 201: a new job; 200 with ``Idempotent-Replayed: true``: the key names a job this same request
  (same payload, delay and priority) made before — the same ``message_id``, for as long as the
  job is retained;
- 422 ``key-reused``: the key names a job made by a different request; nothing changes;
- 409 ``key-in-flight``: a request with the key is being published right now (this process,
  or — on PostgreSQL — any other); nothing changes, try again shortly.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.responses import Response

from ..._records import (
    MAX_PAYLOAD_BYTES,
    ApiKey,
    NewJob,
    PublishItem,
    PublishOutcome,
    QueueInfo,
    encode_payload,
)
from ...observability.tracing import current_trace_context
from ..api import Call, Param, Reply, RouteGroup, json_response
from ..models import GROUP, KEY, MESSAGE_ID, PAYLOAD, QUEUE_NAME, STATE, TIME, iso
from ..problems import Problem
from ..schema import Array, Boolean, Integer, Number, Object, String

group = RouteGroup("publish", "Publishing messages (jobs) with an Idempotency-Key.")

MAX_DELAY_SECONDS = 7 * 24 * 3600
MAX_BATCH = 500
INT32 = 2**31 - 1

DELAY = Number(
    minimum=0,
    maximum=MAX_DELAY_SECONDS,
    default=0,
    description="Seconds before the message may be received: 0 to 604800 (7 days).",
)
PRIORITY = Integer(
    minimum=-INT32, maximum=INT32, default=0, description="Higher is received first (default 0)."
)

PUBLISH = Object(
    {
        "queue": QUEUE_NAME,
        "payload": PAYLOAD,
        "delay_seconds": DELAY,
        "priority": PRIORITY,
        "group": GROUP,
    },
    required=("queue", "payload"),
    name="PublishRequest",
)

PUBLISHED = Object(
    {
        "message_id": MESSAGE_ID,
        "queue": QUEUE_NAME,
        "key": String(description="The Idempotency-Key, or the key the server assigned."),
        "state": STATE,
        "run_at": TIME,
    },
    required=("message_id", "queue", "key", "state", "run_at"),
    additional=True,
    name="Published",
)

IDEMPOTENCY_KEY = Param(
    String(
        min_length=1,
        max_length=512,
        pattern=r"^[!-~]([ -~]*[!-~])?$",
        description="Printable ASCII (HTTP headers carry no other text reliably), 1-512 "
        "characters. In a batch, `key` may be any text without control characters.",
        example="4187:2026-W33",
    ),
    "Becomes the job's key: the business identity of the message, e.g. 4187:2026-W33. A retry "
    "with the same key and body is answered 200 with the same message_id. Without one the "
    "server assigns a key (auto:<uuid>), unless the queue requires one.",
)

BATCH_ITEM = Object(
    {
        "key": KEY,
        "payload": PAYLOAD,
        "delay_seconds": DELAY,
        "priority": PRIORITY,
        "group": GROUP,
    },
    required=("payload",),
    name="BatchMessage",
    description="One message; `key` plays the role of the Idempotency-Key header.",
)

BATCH = Object(
    {"queue": QUEUE_NAME, "messages": Array(BATCH_ITEM, min_items=1, max_items=MAX_BATCH)},
    required=("queue", "messages"),
    name="PublishBatchRequest",
)

BATCH_RESULT = Object(
    {
        "index": Integer(minimum=0, description="Position of the message in the request."),
        "status": Integer(
            minimum=200,
            maximum=599,
            description="201 created, 200 replayed, 409 key in flight, 422 key reused.",
        ),
        "key": String(),
        "message_id": MESSAGE_ID,
        "state": STATE,
        "run_at": TIME,
        "replayed": Boolean(),
        "error": Object(
            {"type": String(), "title": String(), "detail": String()},
            additional=True,
            description="With 409 and 422: why (as a problem, without status).",
        ),
    },
    required=("index", "status", "key"),
    additional=True,
    name="BatchResult",
)

BATCH_REPLY = Object(
    {"queue": QUEUE_NAME, "results": Array(BATCH_RESULT)},
    required=("queue", "results"),
    additional=True,
    name="PublishBatchResult",
)


# -- shared steps ------------------------------------------------------------------------------


async def rate_limit(call: Call, key: ApiKey, cost: float) -> None:
    """429 with Retry-After when the key's publish budget is spent. The bucket lives in the
    database, so the limit holds however many server processes there are."""
    limits = call.state.settings.rate_for(key.rate_per_second, key.burst)
    if limits is None:
        return
    rate, burst = limits
    wait = await call.run(
        call.state.ledger.rate_limits.take, f"publish:{key.id}", rate, burst, min(cost, burst)
    )
    if wait > 0:
        retry = max(1, math.ceil(wait))
        raise Problem(
            "rate-limited",
            f"API key {key.id} may publish {rate:g} messages per second (bursts of {burst:g}); "
            f"retry in {retry} s",
            headers={"Retry-After": str(retry)},
            retry_after=retry,
        )


def fingerprint(
    payload: dict[str, Any], delay: float, priority: int, group: str | None = None
) -> str:
    """What makes two publishes with one key "the same request". A group is part of it when
    given (left out otherwise, so that publishes from before groups replay as before)."""
    request: dict[str, Any] = {
        "payload": payload,
        "delay_seconds": float(delay),
        "priority": priority,
    }
    if group is not None:
        request["group"] = group
    text = json.dumps(
        request,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def make_item(
    info: QueueInfo, key: str | None, message: dict[str, Any], api_key: ApiKey, where: str = ""
) -> PublishItem:
    payload = message["payload"]
    delay = float(message.get("delay_seconds", 0))
    priority = int(message.get("priority", 0))
    job_group = message.get("group")
    payload_json = json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    size = len(payload_json.encode("utf-8"))
    if size > MAX_PAYLOAD_BYTES:
        raise Problem(
            "payload-too-large",
            f"{where}payload is {size} bytes encoded; the limit is {MAX_PAYLOAD_BYTES} (256 KiB)",
            limit=MAX_PAYLOAD_BYTES,
        )
    settings = info.settings
    job = NewJob(
        queue=settings.name,
        key=key if key is not None else f"auto:{uuid.uuid4().hex}",
        task=settings.task,
        payload_json=encode_payload(payload),
        priority=priority,
        run_at=datetime.now(UTC) + timedelta(seconds=delay) if delay > 0 else None,
        max_attempts=settings.max_attempts,
        lease_seconds=settings.lease_seconds,
        correlation_id=uuid.uuid4().hex,
        group=job_group,
        # The request's server span, continuing the caller's traceparent (when traced).
        trace_context=current_trace_context(),
    )
    return PublishItem(job, fingerprint(payload, delay, priority, job_group), api_key.id)


async def publish_items(call: Call, items: list[PublishItem]) -> list[PublishOutcome]:
    """Publish, answering ``in_flight`` for keys this process is publishing right now."""
    state = call.state
    idents = {(i.job.queue, i.job.key) for i in items}
    busy = state.in_flight.claim(idents)
    try:
        todo = [i for i in items if (i.job.queue, i.job.key) not in busy]
        done = iter(await call.run(state.ledger.publishing.publish, todo) if todo else [])
    finally:
        state.in_flight.release(idents - busy)
    outcomes = [
        PublishOutcome("in_flight") if (i.job.queue, i.job.key) in busy else next(done)
        for i in items
    ]
    if state.wakeups is not None:
        for queue in {
            i.job.queue for i, o in zip(items, outcomes, strict=True) if o.status == "created"
        }:
            state.wakeups.notify(queue)
    return outcomes


def _published(item: PublishItem, outcome: PublishOutcome) -> dict[str, Any]:
    return {
        "message_id": str(outcome.job_id),
        "queue": item.job.queue,
        "key": item.job.key,
        "state": outcome.state.value if outcome.state else None,
        "run_at": iso(outcome.run_at),
    }


def _refusal(item: PublishItem, outcome: PublishOutcome) -> Problem:
    job = item.job
    if outcome.status == "in_flight":
        return Problem(
            "key-in-flight",
            f"a request with Idempotency-Key {job.key!r} for queue {job.queue!r} is in flight; "
            "retry it shortly",
        )
    return Problem(
        "key-reused",
        f"Idempotency-Key {job.key!r} was already used in queue {job.queue!r} for message "
        f"{outcome.job_id} with a different payload, delay, priority or group; nothing was changed",
        message_id=str(outcome.job_id),
    )


# -- routes ------------------------------------------------------------------------------------


@group.operation(
    "POST",
    "/v1/queue/publish",
    summary="Publish one message",
    scope="publish:QUEUE",
    body=PUBLISH,
    body_limit="publish_limit",
    headers={"Idempotency-Key": IDEMPOTENCY_KEY},
    replies={
        201: Reply("A new message (job) was created.", PUBLISHED),
        200: Reply(
            "A replay: this key and request made this message before.",
            PUBLISHED,
            headers={
                "Idempotent-Replayed": (String(enum=("true",)), "Present (true) on a replay.")
            },
        ),
    },
    errors=(400, 403, 404, 409, 413, 422, 429),
)
async def publish(call: Call) -> Response:
    """The body is at most 256 KiB (413 beyond, refused from Content-Length without reading
    it). 422 for a delay outside 0..604800, a payload that is not an object, or a key reused
    with a different payload, delay, priority or group; 409 while another request with the key is in
    flight; 404 for a queue never declared; 429 with Retry-After past the key's rate limit."""
    body = call.body
    queue = body["queue"]
    api_key = call.require("publish", queue)
    await rate_limit(call, api_key, 1)
    info = await call.run(call.state.ledger.queue_settings.get, queue)
    key = call.headers.get("Idempotency-Key")
    if key is None and info.settings.require_key:
        raise Problem(
            "idempotency-key-required",
            f"queue {queue!r} requires an Idempotency-Key header: the business identity of the "
            "message, so that a retry cannot publish it twice",
        )
    item = make_item(info, key, body, api_key)
    [outcome] = await publish_items(call, [item])
    if outcome.status == "created":
        return json_response(_published(item, outcome), 201)
    if outcome.status == "replayed":
        return json_response(_published(item, outcome), 200, {"Idempotent-Replayed": "true"})
    raise _refusal(item, outcome)


@group.operation(
    "POST",
    "/v1/queue/publish-batch",
    summary="Publish up to 500 messages to one queue",
    scope="publish:QUEUE",
    body=BATCH,
    body_limit="batch_limit",
    replies={200: Reply("One result per message, in order.", BATCH_REPLY)},
    errors=(400, 403, 404, 413, 422, 429),
)
async def publish_batch(call: Call) -> Response:
    """Each message has its own `key` and its own result (`status` 201, 200, 409 or 422, as for
    a single publish); the new ones are written in one transaction. The whole request is refused
    (nothing written) when the body is invalid, a payload is over 256 KiB (413), the queue is
    unknown (404) or requires keys that are missing (400). A batch costs its number of messages
    against the key's rate limit (at most the limit's burst)."""
    body = call.body
    queue = body["queue"]
    api_key = call.require("publish", queue)
    messages = body["messages"]
    await rate_limit(call, api_key, len(messages))
    info = await call.run(call.state.ledger.queue_settings.get, queue)
    if info.settings.require_key:
        missing = [i for i, m in enumerate(messages) if "key" not in m]
        if missing:
            raise Problem(
                "idempotency-key-required",
                f"queue {queue!r} requires a key on every message; messages {missing[:10]} "
                "have none",
            )
    items = [
        make_item(info, m.get("key"), m, api_key, where=f"message {i}: ")
        for i, m in enumerate(messages)
    ]
    outcomes = await publish_items(call, items)
    results = []
    for index, (item, outcome) in enumerate(zip(items, outcomes, strict=True)):
        result: dict[str, Any] = {"index": index, "key": item.job.key}
        if outcome.status in ("created", "replayed"):
            result["status"] = 201 if outcome.status == "created" else 200
            result.update(_published(item, outcome))
            result["replayed"] = outcome.status == "replayed"
        else:
            problem = _refusal(item, outcome)
            result["status"] = problem.status
            if outcome.job_id is not None:
                result["message_id"] = str(outcome.job_id)
            result["error"] = {
                "type": problem.type,
                "title": problem.title,
                "detail": problem.detail,
            }
        results.append(result)
    return json_response({"queue": queue, "results": results})
