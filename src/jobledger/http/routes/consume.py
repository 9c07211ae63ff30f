"""Pull consumers in any language: receive, ack, nack, extend.

A receive is a claim, exactly as a Python worker makes one: each message gets a new lease token
and an attempt record. The ``receipt`` names the job and that token; ack, nack and extend are the
worker's complete, fail and heartbeat, fenced by the token. A receipt whose lease expired (the
message went back to the queue, perhaps to another consumer) or that was already used is stale:
409, and nothing changes.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.responses import Response

from ..._records import Failure, JobRow, JobState, Lease
from ...errors import NotFound
from ...policy import DEFAULT_BACKOFF
from ..api import Call, Reply, RouteGroup, json_response
from ..models import (
    MAX_ID,
    MESSAGE_ID,
    MIN_LEASE_SECONDS,
    OPTIONAL_TIME,
    QUEUE_NAME,
    RECEIVED,
    STATE,
    TIME,
    iso,
    received_json,
    text,
)
from ..observe import observe
from ..problems import Problem
from ..schema import Array, Boolean, Integer, Number, Object, String
from ..wakeups import Wakeups

group = RouteGroup("consume", "Pull consumers: receive, ack, nack, extend.")

MAX_LEASE = 12 * 3600
MAX_RETRY_AFTER = 7 * 24 * 3600

RECEIPT = String(
    pattern=r"^[1-9][0-9]{0,18}\.[0-9A-Fa-f-]{32,36}$",
    description="From a received message: the message id and its lease token.",
    example="42.9b2f0c3e5d6a47b8a1c2d3e4f5a6b7c8",
)
LEASE_SECONDS = Number(
    minimum=MIN_LEASE_SECONDS,
    maximum=MAX_LEASE,
    description="Seconds from now until the lease expires and the message is delivered again: "
    "1 to 43200 (12 hours).",
)

RECEIVE = Object(
    {
        "queue": QUEUE_NAME,
        "max_messages": Integer(minimum=1, maximum=100, default=10),
        "lease_seconds": LEASE_SECONDS,
        "wait_seconds": Number(
            minimum=0,
            maximum=20,
            default=0,
            description="Long polling: wait up to this long for a message when none is due.",
        ),
        "consumer": text(200, "A name for this consumer, shown in the attempt history."),
    },
    required=("queue",),
    name="ReceiveRequest",
)
RECEIVED_LIST = Object(
    {"messages": Array(RECEIVED)}, required=("messages",), additional=True, name="Received"
)

ACK = Object({"receipt": RECEIPT}, required=("receipt",), name="AckRequest")
NACK = Object(
    {
        "receipt": RECEIPT,
        "error": text(4000, "What went wrong; kept as the message's last error."),
        "error_class": String(
            min_length=1,
            max_length=200,
            pattern=r"^[A-Za-z0-9_.:-]+$",
            description="A short class name for the error (default Nack, or Permanent).",
        ),
        "retry_after_seconds": Number(
            minimum=0,
            maximum=MAX_RETRY_AFTER,
            description="Deliver again after this long (default: the queue's backoff).",
        ),
        "permanent": Boolean(
            default=False, description="Do not retry: the message goes to dead at once."
        ),
        "pause_group": Boolean(
            default=False,
            description="Also hold back every message of this message's group until the retry "
            "time (the group's provider throttled the whole tenant). Needs retry_after_seconds; "
            "a message without a group just retries.",
        ),
    },
    required=("receipt",),
    name="NackRequest",
)
EXTEND = Object(
    {"receipt": RECEIPT, "lease_seconds": LEASE_SECONDS},
    required=("receipt", "lease_seconds"),
    name="ExtendRequest",
)

ACKED = Object(
    {"message_id": MESSAGE_ID, "state": STATE},
    required=("message_id", "state"),
    additional=True,
    name="Acked",
)
NACKED = Object(
    {
        "message_id": MESSAGE_ID,
        "state": STATE,
        "run_at": OPTIONAL_TIME,
        "group_paused_until": OPTIONAL_TIME,
    },
    required=("message_id", "state", "run_at"),
    additional=True,
    name="Nacked",
)
EXTENDED = Object(
    {"message_id": MESSAGE_ID, "lease_until": TIME},
    required=("message_id", "lease_until"),
    additional=True,
    name="Extended",
)

RECEIPT_ERRORS = (403, 409)


@group.operation(
    "POST",
    "/v1/queue/receive",
    summary="Receive up to max_messages messages, each under a lease",
    scope="consume:QUEUE",
    body=RECEIVE,
    replies={200: Reply("The messages received (possibly none).", RECEIVED_LIST)},
    errors=(403, 404),
)
async def receive(call: Call) -> Response:
    """Each message is leased for `lease_seconds` (default: the queue's) and must be acked,
    nacked or extended before then; otherwise it is delivered again, and the delivery counts
    against its attempts. With `wait_seconds` the request waits up to that long (20 s at most)
    for a message when none is due, so an idle consumer does not spin."""
    body = call.body
    queue = body["queue"]
    api_key = call.require("consume", queue)
    state = call.state
    backend = state.ledger.backend
    await call.run(state.ledger.queue_settings.get, queue)
    limit = body.get("max_messages", 10)
    lease = body.get("lease_seconds")
    consumer = body.get("consumer")
    worker = f"http:{api_key.id}:{consumer}" if consumer else f"http:{api_key.id}"
    wait = min(float(body.get("wait_seconds", 0)), state.settings.max_wait_seconds)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    pause = 0.05
    while True:
        event = state.wakeups.arm(queue) if state.wakeups is not None and wait > 0 else None
        jobs = await call.run(backend.jobs.claim, [queue], worker, limit, None, lease)
        remaining = deadline - loop.time()
        if jobs or remaining <= 0 or event is None:
            break
        if await call.request.is_disconnected():
            return json_response({"messages": []})
        await Wakeups.wait(event, min(remaining, pause))
        pause = min(pause * 2, state.poll_interval)
    if jobs and await call.request.is_disconnected():
        # Nobody will read these: give them back now rather than when their leases expire.
        await call.run(backend.jobs.release, [Lease(j.id, j.lease_token, j.attempt) for j in jobs])
        return json_response({"messages": []})
    if jobs:
        observe(state).received(jobs, lease)
    return json_response({"messages": [received_json(j) for j in jobs]})


async def held(call: Call, receipt: str, action: str) -> tuple[JobRow, Lease]:
    """The job a receipt names, if the receipt still holds its lease; else 409."""
    id_text, _, token = receipt.partition(".")
    job_id = int(id_text)
    backend = call.state.ledger.backend
    if job_id > MAX_ID:
        raise _stale(job_id, "no such message")
    try:
        job = await call.run(backend.history.get, job_id)
    except NotFound:
        raise _stale(job_id, "no such message") from None
    if not call.caller.allows("consume", job.queue):
        if job.lease_token == token:
            call.require("consume", job.queue)
        # Answered as for a message that does not exist: a key without consume on the queue
        # learns nothing of the queue's messages from receipts it made up.
        raise _stale(job.id, "no such message")
    if job.state is JobState.LEASED and job.lease_token == token:
        return job, Lease(job.id, token, job.attempts)
    attempts = await call.run(backend.history.attempts, job.id)
    earlier = next((a for a in attempts if a.lease_token == token), None)
    if earlier is None:
        raise _stale(job.id, "no such lease")
    # A genuine late write: note it in the message's history, as the Python worker does.
    observe(call.state).stale(job.queue, action)
    await call.run(
        backend.history.record_event,
        job.id,
        "lease_lost",
        call.caller.actor,
        f"{action} refused: the lease of attempt {earlier.attempt} is no longer current",
        {"action": action, "attempt": earlier.attempt},
    )
    now = "leased under another receipt" if job.state is JobState.LEASED else job.state.value
    raise _stale(job.id, f"the message is {now}")


def _stale(job_id: int, why: str) -> Problem:
    return Problem(
        "stale-receipt",
        f"the receipt no longer holds message {job_id} ({why}): its lease expired and it was "
        "delivered again, or it was already acked or nacked; nothing was changed",
        message_id=str(job_id),
    )


@group.operation(
    "POST",
    "/v1/queue/ack",
    summary="Acknowledge a message: it is done",
    scope="consume:QUEUE",
    body=ACK,
    replies={200: Reply("The message is done.", ACKED)},
    errors=RECEIPT_ERRORS,
)
async def ack(call: Call) -> Response:
    """409 when the receipt is stale (nothing changes)."""
    job, lease = await held(call, call.body["receipt"], "ack")
    stale = await call.run(call.state.ledger.backend.jobs.complete, [lease])
    if stale:
        observe(call.state).stale(job.queue, "ack")
        raise _stale(job.id, "its lease expired a moment ago")
    observe(call.state).finished(job, "done")
    return json_response({"message_id": str(job.id), "state": JobState.DONE.value})


@group.operation(
    "POST",
    "/v1/queue/nack",
    summary="Report a failed delivery: retry later, or dead",
    scope="consume:QUEUE",
    body=NACK,
    replies={200: Reply("The message's new state.", NACKED)},
    errors=RECEIPT_ERRORS,
)
async def nack(call: Call) -> Response:
    """Without `permanent` the message is delivered again after `retry_after_seconds` (default:
    the queue's backoff), unless its attempts are spent: then it is dead. With `permanent` it is
    dead at once. Dead messages wait for an operator's redrive or resolve. With `pause_group`
    the message's whole group is held back until `run_at` too, in the same transaction (as
    `Retry(after=…, scope="group")` in a Python handler); a pause only ever extends."""
    body = call.body
    permanent = bool(body.get("permanent", False))
    retry_after = body.get("retry_after_seconds")
    pause_group = bool(body.get("pause_group", False))
    if permanent and retry_after is not None:
        raise Problem(
            "validation-failed",
            "give retry_after_seconds or permanent, not both",
            errors=[{"pointer": "/retry_after_seconds", "detail": "conflicts with permanent"}],
        )
    if pause_group and retry_after is None:
        raise Problem(
            "validation-failed",
            "pause_group needs retry_after_seconds: until when to hold the group back",
            errors=[{"pointer": "/pause_group", "detail": "needs retry_after_seconds"}],
        )
    job, lease = await held(call, body["receipt"], "nack")
    now = datetime.now(UTC)
    run_at = None
    if not permanent:
        if retry_after is None:
            retry_after = (await _backoff(call, job.queue)).delay(job.attempts)
        run_at = now + timedelta(seconds=float(retry_after))
    error_class = body.get("error_class") or ("Permanent" if permanent else "Nack")
    failure = Failure(
        lease=lease,
        retry=not permanent,
        run_at=run_at,
        error_class=error_class,
        message=body.get("error") or "nacked by the consumer",
        pause_group_until=run_at if pause_group and job.group is not None else None,
    )
    [result] = await call.run(call.state.ledger.backend.jobs.fail, [failure])
    if result.state is None:
        observe(call.state).stale(job.queue, "nack")
        raise _stale(job.id, "its lease expired a moment ago")
    observe(call.state).finished(job, "dead" if result.state is JobState.DEAD else "retry")
    return json_response(
        {
            "message_id": str(job.id),
            "state": result.state.value,
            "run_at": iso(run_at) if result.state is JobState.PENDING else None,
            "group_paused_until": iso(run_at) if failure.pause_group_until else None,
        }
    )


async def _backoff(call: Call, queue: str) -> Any:
    try:
        info = await call.run(call.state.ledger.queue_settings.get, queue)
    except NotFound:
        return DEFAULT_BACKOFF
    return info.settings.backoff


@group.operation(
    "POST",
    "/v1/queue/extend",
    summary="Extend a message's lease",
    scope="consume:QUEUE",
    body=EXTEND,
    replies={200: Reply("The lease's new expiry.", EXTENDED)},
    errors=RECEIPT_ERRORS,
)
async def extend(call: Call) -> Response:
    """The lease now ends `lease_seconds` from now. 409 when the receipt is stale."""
    body = call.body
    job, lease = await held(call, body["receipt"], "extend")
    renewed = await call.run(
        call.state.ledger.backend.jobs.heartbeat, [lease], None, float(body["lease_seconds"])
    )
    until = renewed.get(job.id)
    if until is None:
        observe(call.state).stale(job.queue, "extend")
        raise _stale(job.id, "its lease expired a moment ago")
    return json_response({"message_id": str(job.id), "lease_until": iso(until)})
