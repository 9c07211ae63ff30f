"""Groups (tenants) of a queue: ``GET /v1/queues/{name}/groups``, ``GET/PUT
/v1/queues/{name}/group-limits``, ``POST /v1/queues/{name}/groups/{group}/pause`` and
``…/resume``.

Reading needs a ``read`` or ``admin`` key: a listing names every tenant of the queue, which a
publisher or consumer of the queue has no need to see. Changing limits and pausing need
``admin``. Like message lookup, these work for any queue name, declared or not: jobs enqueued
from Python have queues and groups too. See docs/groups.md.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.responses import Response

from ..._records import MAX_LEASED, MAX_RATE, MIN_RATE, GroupStatus
from ..api import Call, Handler, Reply, RouteGroup, json_response
from ..models import (
    GROUP_LIMITS,
    GROUP_NAME,
    GROUP_STATUS,
    QUEUE_NAME,
    group_status_json,
    parse_time,
    text,
)
from ..problems import invalid
from ..schema import Array, Integer, Number, Object, String

group = RouteGroup("groups", "Groups (tenants) of a queue: their jobs, limits and pauses.")


def _reading(path: str, **spec: Any) -> Callable[[Handler], Handler]:
    """A read of a queue's groups or limits, for read and admin keys (403 for others)."""
    return group.operation(
        "GET", path, scope="read or admin", path_params={"name": QUEUE_NAME}, errors=(403,), **spec
    )


def _on_group(action: str, **spec: Any) -> Callable[[Handler], Handler]:
    """An admin's action on one group of a queue."""
    return group.operation(
        "POST",
        "/v1/queues/{name}/groups/{group}/" + action,
        auth="admin",
        path_params={"name": QUEUE_NAME, "group": GROUP_NAME},
        **spec,
    )


#: The longest pause set at once: a year (the CLI has the same bound). Resume lifts it any time.
MAX_PAUSE_SECONDS = 365 * 86400

GROUP_LIST = Object(
    {
        "queue": QUEUE_NAME,
        "limits": GROUP_LIMITS,
        "groups": Array(GROUP_STATUS, description="By name."),
    },
    required=("queue", "limits", "groups"),
    additional=True,
    name="GroupList",
)

LIMITS_REQUEST = Object(
    {
        "max_leased": Integer(
            minimum=1,
            maximum=MAX_LEASED,
            nullable=True,
            description="At most this many of one group's jobs leased at once.",
        ),
        "rate": Number(
            minimum=MIN_RATE,
            maximum=MAX_RATE,
            nullable=True,
            description="Jobs per second one group's jobs start at, on average (a token bucket).",
        ),
        "burst": Number(
            minimum=1,
            maximum=MAX_RATE,
            nullable=True,
            description="Jobs a group may start at once after a quiet spell: the bucket's size. "
            "Needs a rate. Default: one second's worth (at least 1).",
        ),
    },
    name="GroupLimitsRequest",
    description="PUT replaces: an omitted or null field lifts that limit; {} lifts them all.",
)

PAUSE_REQUEST = Object(
    {
        "seconds": Number(
            exclusive_minimum=0,
            maximum=MAX_PAUSE_SECONDS,
            description="Pause for this long from now (at most a year).",
        ),
        "until": String(
            format="date-time",
            description="Pause until this time (RFC 3339 with an offset; within a year).",
        ),
        "reason": text(1000, "Why: shown beside the pause. Default: 'paused by apikey:<id>'."),
    },
    name="GroupPauseRequest",
    description="Exactly one of seconds and until.",
)


def _read(call: Call) -> None:
    call.require("read")


def _empty(queue: str, name: str) -> GroupStatus:
    return GroupStatus(queue, name, 0, 0, 0, None, None, None, None)


async def _status(call: Call, queue: str, name: str) -> GroupStatus:
    """One group as listed; a group with no jobs and no pause is all zeros."""
    rows = await call.run(call.state.ledger.groups, queue)
    return next((g for g in rows if g.name == name), _empty(queue, name))


@_reading(
    "/v1/queues/{name}/groups",
    summary="The groups of a queue: pending, due, leased, paused until, tokens",
    replies={200: Reply("The queue's group limits and its groups.", GROUP_LIST)},
)
async def list_groups(call: Call) -> Response:
    """Groups that have pending or leased jobs, or a pause in force, by name. Jobs without a
    group are not listed (the queue's counts include them). `tokens` is what each group's rate
    bucket holds now; null when the queue sets no rate."""
    _read(call)
    queue = call.path["name"]
    ledger = call.state.ledger
    limits = await call.run(ledger.group_limits, queue)
    rows = await call.run(ledger.groups, queue)
    return json_response(
        {
            "queue": queue,
            "limits": limits.as_dict(queue),
            "groups": [group_status_json(g) for g in rows],
        }
    )


@_reading(
    "/v1/queues/{name}/group-limits",
    summary="What each group of a queue may do",
    replies={200: Reply("The limits (null: no limit of that kind).", GROUP_LIMITS)},
)
async def get_group_limits(call: Call) -> Response:
    """A queue whose limits were never set has none: every field is null."""
    _read(call)
    queue = call.path["name"]
    limits = await call.run(call.state.ledger.group_limits, queue)
    return json_response(limits.as_dict(queue))


@group.operation(
    "PUT",
    "/v1/queues/{name}/group-limits",
    summary="Set (replace) what each group of a queue may do",
    auth="admin",
    path_params={"name": QUEUE_NAME},
    body=LIMITS_REQUEST,
    replies={200: Reply("The limits now in force.", GROUP_LIMITS)},
)
async def put_group_limits(call: Call) -> Response:
    """Every claim enforces them (Python workers, HTTP receive, push delivery) from its next
    claim on, across processes and hosts. 422 for a burst without a rate."""
    queue = call.path["name"]
    body = call.body
    if body.get("burst") is not None and body.get("rate") is None:
        raise invalid(
            "burst needs a rate: it is the size of the rate's bucket", "/burst", "needs rate"
        )
    limits = await call.run(
        call.state.ledger.set_group_limits,
        queue,
        max_leased=body.get("max_leased"),
        rate=body.get("rate"),
        burst=body.get("burst"),
    )
    return json_response(limits.as_dict(queue))


@_on_group(
    "pause",
    summary="Claim none of one group's jobs until a time",
    body=PAUSE_REQUEST,
    replies={200: Reply("The group, paused.", GROUP_STATUS)},
)
async def pause_group(call: Call) -> Response:
    """For a downstream that answers one tenant 429: that group's pending jobs wait, the other
    groups go on; leased jobs finish. A pause only ever extends: when the group is already
    paused for longer, nothing changes and `paused_until` says until when. 422 unless exactly
    one of `seconds` and `until` is given, or when `until` is past or over a year away."""
    queue, name = call.path["name"], call.path["group"]
    body = call.body
    if ("seconds" in body) == ("until" in body):
        raise invalid(
            "give seconds or until, exactly one of them",
            "/seconds",
            "seconds or until, one of them",
        )
    now = datetime.now(UTC)
    if "seconds" in body:
        until = now + timedelta(seconds=float(body["seconds"]))
    else:
        until = parse_time(body["until"], "until") or now
        if until <= now or until - now > timedelta(seconds=MAX_PAUSE_SECONDS):
            raise invalid(
                "until must be in the future and at most a year from now",
                "/until",
                "past, or over a year away",
            )
    reason = body.get("reason") or f"paused by {call.caller.actor}"
    await call.run(call.state.ledger.pause_group, queue, name, until=until, reason=reason, now=now)
    return json_response(group_status_json(await _status(call, queue, name)))


@_on_group(
    "resume",
    summary="Lift one group's pause now",
    replies={200: Reply("The group, not paused.", GROUP_STATUS)},
)
async def resume_group(call: Call) -> Response:
    """Its due jobs are claimed again from the next claim on. Resuming a group that is not
    paused changes nothing and answers the same."""
    queue, name = call.path["name"], call.path["group"]
    await call.run(call.state.ledger.resume_group, queue, name)
    return json_response(group_status_json(await _status(call, queue, name)))
