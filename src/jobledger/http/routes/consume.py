"""Pull consumers in any language: receive, ack, nack, extend.

A receive is a claim, exactly as a Python worker makes one: each message gets a new lease token
and an attempt record. The ``receipt`` names the job and that token; ack, nack and extend are the
worker's complete, fail and heartbeat, fenced by the token. A receipt whose lease expired (the
message went back to the queue, perhaps to another consumer) or that was already used is stale:
409, and nothing changes.
"""

from __future__ import annotations

import asyncio

from starlette.responses import Response

from ..._records import MIN_LEASE_SECONDS, JobState
from ..._runtime.pull import Held
from ...policy import Decision
from ..api import Call, Reply, RouteGroup, json_response
from ..models import (
    MAX_ID,
    MESSAGE_ID,
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
    pull = state.pull
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
        jobs = await call.run(pull.receive, queue, worker, limit, lease)
        remaining = deadline - loop.time()
        if jobs or remaining <= 0 or event is None:
            break
        if await call.request.is_disconnected():
            return json_response({"messages": []})
        await Wakeups.wait(event, min(remaining, pause))
        pause = min(pause * 2, state.poll_interval)
    if jobs and await call.request.is_disconnected():
        # Nobody will read these: give them back now rather than when their leases expire.
        await call.run(pull.give_back, jobs)
        return json_response({"messages": []})
    if jobs:
        observe(state).received(jobs, lease)
    return json_response({"messages": [received_json(j) for j in jobs]})


async def held(call: Call, receipt: str, action: str) -> Held:
    """The message a receipt names, if the receipt still holds its lease; else 409. A key
    without consume scope on the message's queue learns nothing of it but from a receipt that
    holds its lease (403)."""
    id_text, _, token = receipt.partition(".")
    job_id = int(id_text)
    pull = call.state.pull
    if job_id > MAX_ID:
        raise _stale(job_id, "no such message")
    found = await call.run(pull.find, job_id, token)
    job = found.job
    if job is None:
        raise _stale(job_id, "no such message")
    if not call.caller.allows("consume", job.queue):
        if isinstance(found, Held):
            call.require("consume", job.queue)
        # Answered as for a message that does not exist: a key without consume on the queue
        # learns nothing of the queue's messages from receipts it made up.
        raise _stale(job_id, "no such message")
    if isinstance(found, Held):
        return found
    # A genuine late write (the token opened an earlier attempt): noted in the history.
    await call.run(pull.refuse, found, token, action, call.caller.actor)
    raise _stale(job.id, found.why)


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
    found = await held(call, call.body["receipt"], "ack")
    outcome = await call.run(call.state.pull.ack, found, call.caller.actor)
    if outcome == "lease_lost":
        raise _stale(found.job.id, "its lease expired a moment ago")
    return json_response({"message_id": str(found.job.id), "state": JobState.DONE.value})


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
    found = await held(call, body["receipt"], "nack")
    verdict = Decision(
        retry=not permanent,
        delay=None if retry_after is None else float(retry_after),
        error_class=body.get("error_class") or ("Permanent" if permanent else "Nack"),
        message=body.get("error") or "nacked by the consumer",
        pause_group=pause_group,
    )
    outcome, failure = await call.run(call.state.pull.nack, found, verdict, call.caller.actor)
    if outcome == "lease_lost":
        raise _stale(found.job.id, "its lease expired a moment ago")
    state = JobState.DEAD if outcome == "dead" else JobState.PENDING
    return json_response(
        {
            "message_id": str(found.job.id),
            "state": state.value,
            "run_at": iso(failure.run_at) if state is JobState.PENDING else None,
            "group_paused_until": iso(failure.pause_group_until)
            if failure.pause_group_until
            else None,
        }
    )


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
    found = await held(call, body["receipt"], "extend")
    until = await call.run(
        call.state.pull.extend, found, float(body["lease_seconds"]), call.caller.actor
    )
    if until is None:
        raise _stale(found.job.id, "its lease expired a moment ago")
    return json_response({"message_id": str(found.job.id), "lease_until": iso(until)})
