"""Operators: look messages up with their attempt history, redrive dead letters, resolve one.

Every route here needs an ``admin`` key. Redrive and resolve are recorded in the message's
history with the actor (``<actor> via apikey:<id>``, or the key alone) and the reason.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from ..._records import JobFilter, JobRow, JobState
from ..api import Call, Param, Reply, RouteGroup, json_response
from ..models import (
    ID_DIGITS,
    KEY,
    MESSAGE,
    MESSAGE_ID,
    MESSAGE_ID_PARAM,
    QUEUE_NAME,
    STATE,
    message_json,
    parse_time,
    text,
)
from ..problems import invalid
from ..schema import Array, Boolean, Integer, Number, Object, String

group = RouteGroup("operators", "Message lookup with attempt history, redrive, resolve (admin).")

#: A redrive over HTTP runs within the request, so its pacing is capped at this many seconds.
MAX_REDRIVE_SECONDS = 60

MESSAGE_LIST = Object(
    {
        "messages": Array(MESSAGE),
        "next_after": String(
            nullable=True,
            pattern=f"^{ID_DIGITS}$",
            description="Pass as `after` for the next page; null on the last page.",
        ),
    },
    required=("messages", "next_after"),
    additional=True,
    name="MessageList",
)

REDRIVE = Object(
    {
        "reason": text(1000, "Why: recorded in each message's history."),
        "actor": text(200, "Who: recorded with the API key's id. Default: the key."),
        "dry_run": Boolean(default=False, description="List what would move; move nothing."),
        "message_ids": Array(MESSAGE_ID, min_items=1, max_items=1000),
        "states": Array(
            String(enum=("dead", "cancelled")),
            min_items=1,
            max_items=2,
            description="Default: dead only.",
        ),
        "error_contains": text(
            500,
            "Only messages whose last error contains this text, the case of any letter ignored.",
        ),
        "key_prefix": text(512, "Only messages whose key starts with this."),
        "task": text(200, "Only messages of this task."),
        "since": String(format="date-time", description="Last changed at or after (RFC 3339)."),
        "until": String(format="date-time", description="Last changed before (RFC 3339)."),
        "limit": Integer(minimum=1, maximum=1000, default=100),
        "budget": Integer(
            minimum=1, maximum=1000, description="Attempts to give each (default: max_attempts)."
        ),
        "rate": Number(
            minimum=1,
            maximum=100000,
            description="Messages per second, so the downstream is not stampeded.",
        ),
    },
    required=("reason",),
    name="RedriveRequest",
)
REDRIVEN = Object(
    {
        "dry_run": Boolean(),
        "message_ids": Array(MESSAGE_ID, description="Moved to pending (or, dry run: would be)."),
        "skipped": Array(MESSAGE_ID, description="Matched but no longer dead when reached."),
    },
    required=("dry_run", "message_ids", "skipped"),
    additional=True,
    name="RedriveResult",
)
RESOLVE = Object(
    {
        "note": text(1000, "What the operator checked: recorded in the history."),
        "state": String(enum=("done", "pending"), description="Default done."),
        "actor": text(200, "Who: recorded with the API key's id. Default: the key."),
    },
    required=("note",),
    name="ResolveRequest",
)


def _actor(call: Call, given: str | None) -> str:
    key = call.caller
    return f"{given} via {key.actor}" if given else key.actor


async def _message(call: Call, job: JobRow) -> dict[str, Any]:
    reads = call.state.ledger.job_reads
    attempts = await call.run(reads.attempts, job.id)
    events = await call.run(reads.events, job.id)
    return message_json(job, attempts, events)


@group.operation(
    "GET",
    "/v1/messages/{message_id}",
    summary="A message with its attempt history",
    auth="admin",
    path_params={"message_id": MESSAGE_ID_PARAM},
    replies={200: Reply("The message.", MESSAGE)},
    errors=(404,),
)
async def get_message(call: Call) -> Response:
    """Attempts (who held the lease, when, the outcome and error), operator events (redrive,
    resolve, refused late writes) and, once the message is done, its `result`: what the
    handler returned. The lease token is never shown."""
    job = await call.run(call.state.ledger.job, call.path["message_id"])
    return json_response(await _message(call, job))


@group.operation(
    "GET",
    "/v1/queues/{name}/messages",
    summary="Find messages of a queue by key or state",
    auth="admin",
    path_params={"name": QUEUE_NAME},
    query={
        "key": Param(KEY, "The message with this key."),
        "state": Param(STATE, "Only messages in this state (dead: the dead letters)."),
        "limit": Param(Integer(minimum=1, maximum=100, default=50), "At most this many."),
        "after": Param(
            Integer(minimum=0, maximum=2**63 - 1), "Only ids above this (from next_after)."
        ),
    },
    replies={200: Reply("Matching messages by id, with their history.", MESSAGE_LIST)},
)
async def list_messages(call: Call) -> Response:
    """Works for any queue name, declared or not (jobs enqueued from Python have queues too):
    an unknown queue simply has no messages."""
    ledger = call.state.ledger
    queue = call.path["name"]
    q = call.query
    limit = q.get("limit", 50)
    if "key" in q:
        found = await call.run(ledger.job_reads.by_key, queue, q["key"])
        jobs = [found] if found is not None else []
        if "state" in q:
            jobs = [j for j in jobs if j.state.value == q["state"]]
        if "after" in q:
            jobs = [j for j in jobs if j.id > q["after"]]
    else:
        where = JobFilter(
            queue=queue,
            states=(JobState(q["state"]),) if "state" in q else None,
            after_id=q.get("after"),
            limit=limit + 1,
        )
        jobs = await call.run(ledger.jobs, where)
    more = len(jobs) > limit
    jobs = jobs[:limit]
    return json_response(
        {
            "messages": [await _message(call, j) for j in jobs],
            "next_after": str(jobs[-1].id) if more else None,
        }
    )


@group.operation(
    "POST",
    "/v1/queues/{name}/redrive",
    summary="Redrive dead letters: back to pending with a fresh budget",
    auth="admin",
    path_params={"name": QUEUE_NAME},
    body=REDRIVE,
    replies={200: Reply("What moved (or, dry run, would move).", REDRIVEN)},
)
async def redrive(call: Call) -> Response:
    """Selects dead messages of the queue (or `states`), narrowed by the filters, at most
    `limit` of them; with `dry_run` only lists them. Each keeps its key, history and recorded
    effects, so an effect that already happened is not repeated. With `rate` the moves are paced
    within the request, which may therefore take up to 60 s (limit / rate must not exceed it)."""
    body = call.body
    limit = body.get("limit", 100)
    rate = body.get("rate")
    if rate is not None and limit / rate > MAX_REDRIVE_SECONDS:
        raise invalid(
            f"limit / rate is {limit / rate:.0f} s; over HTTP a redrive is paced within the "
            f"request, at most {MAX_REDRIVE_SECONDS} s: lower limit or raise rate",
            "/rate",
            "too slow for limit",
        )
    ids = body.get("message_ids")
    where = JobFilter(
        queue=call.path["name"],
        states=tuple(JobState(s) for s in body.get("states", ["dead"])),
        task=body.get("task"),
        key_prefix=body.get("key_prefix"),
        error_contains=body.get("error_contains"),
        since=parse_time(body.get("since"), "since"),
        until=parse_time(body.get("until"), "until"),
        limit=limit,
    )
    result = await call.run(
        call.state.ledger.redrive,
        actor=_actor(call, body.get("actor")),
        reason=body["reason"],
        ids=[int(i) for i in ids] if ids is not None else None,
        where=where,
        dry_run=bool(body.get("dry_run", False)),
        rate=rate,
        budget=body.get("budget"),
    )
    return json_response(
        {
            "dry_run": result.dry_run,
            "message_ids": [str(i) for i in result.ids],
            "skipped": [str(i) for i in result.skipped],
        }
    )


@group.operation(
    "POST",
    "/v1/messages/{message_id}/resolve",
    summary="Resolve one message by hand: done (or pending again)",
    auth="admin",
    path_params={"message_id": MESSAGE_ID_PARAM},
    body=RESOLVE,
    replies={200: Reply("The message after the change.", MESSAGE)},
    errors=(404, 409),
)
async def resolve(call: Call) -> Response:
    """For an operator who checked the outside world: a dead or pending message becomes done,
    or pending again with a fresh budget. 409 for a message in another state (leased, done,
    cancelled)."""
    body = call.body
    job = await call.run(
        call.state.ledger.resolve,
        call.path["message_id"],
        actor=_actor(call, body.get("actor")),
        note=body["note"],
        state=JobState(body.get("state", "done")),
    )
    return json_response(await _message(call, job))
