"""Declaring queues and reading their depth: ``PUT/GET /v1/queues/{name}``, ``GET /v1/queues``."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from ..._records import (
    DEFAULT_RETENTION_SECONDS,
    MAX_BACKOFF_SECONDS,
    MAX_LEASE_SECONDS,
    MAX_RETENTION_SECONDS,
    MIN_LEASE_SECONDS,
    MIN_RETENTION_SECONDS,
    QueueInfo,
    QueueSettings,
)
from ..api import Call, Reply, RouteGroup, json_response
from ..models import QUEUE, QUEUE_NAME, queue_json
from ..problems import Problem, invalid
from ..schema import Array, Boolean, Integer, Number, Object, String

group = RouteGroup("queues", "Declaring queues and reading their depth.")

QUEUE_SETTINGS = Object(
    {
        "task": String(
            min_length=1,
            max_length=200,
            pattern=r"^[A-Za-z_][A-Za-z0-9_.:-]{0,199}$",
            description="The task name stored in each published job, so that a Python worker "
            "with a task of that name can run them. Default: the queue's name.",
        ),
        "max_attempts": Integer(
            minimum=1, maximum=1000, default=10, description="Deliveries per job (default 10)."
        ),
        "lease_seconds": Number(
            minimum=MIN_LEASE_SECONDS,
            maximum=MAX_LEASE_SECONDS,
            default=60,
            description="How long a received message stays leased unless extended: at least "
            "1 s (default 60).",
        ),
        "backoff": Object(
            {
                "base_seconds": Number(exclusive_minimum=0, maximum=MAX_BACKOFF_SECONDS),
                "cap_seconds": Number(exclusive_minimum=0, maximum=MAX_BACKOFF_SECONDS),
            },
            description="Delay after a nack without retry_after_seconds: up to "
            "min(cap, base * 2^(attempt-1)), full jitter (default base 2, cap 3600). cap_seconds "
            "must be at least base_seconds (422 otherwise); a bound left out follows the other "
            "(base at most the cap, cap at least the base).",
        ),
        "retention_seconds": Number(
            minimum=MIN_RETENTION_SECONDS,
            maximum=MAX_RETENTION_SECONDS,
            default=DEFAULT_RETENTION_SECONDS,
            description="How long finished jobs are kept, and so how long an Idempotency-Key "
            "is replayed: at least 24 hours (default 30 days).",
        ),
        "require_idempotency_key": Boolean(
            default=False, description="Refuse publishes without an Idempotency-Key (400)."
        ),
        "timeout_seconds": Number(
            exclusive_minimum=0,
            maximum=MAX_LEASE_SECONDS,
            nullable=True,
            description="The longest an attempt may run in a Python worker (a task that sets no "
            "timeout of its own, and the jobs published here): past it the attempt is recorded "
            "as timed_out and retried by the backoff, or dead when its attempts are spent. "
            "Default null: no bound. Pull consumers are bounded by their leases instead.",
        ),
    },
    name="QueueSettings",
    description="Every field is optional; an omitted field takes its default (PUT replaces).",
)

QUEUE_LIST = Object({"queues": Array(QUEUE)}, required=("queues",), additional=True)


def settings_from(name: str, body: dict[str, Any]) -> QueueSettings:
    backoff = body.get("backoff") or {}
    # A bound left out never conflicts with the one given: the base defaults to 2 s but to no
    # more than the cap, the cap to an hour but to no less than the base.
    cap = backoff.get("cap_seconds")
    base = backoff.get("base_seconds", 2.0 if cap is None else min(2.0, cap))
    if cap is None:
        cap = max(3600.0, base)
    elif cap < base:
        raise invalid(
            f"backoff cap_seconds ({cap:g}) must be at least base_seconds ({base:g})",
            "/backoff/cap_seconds",
            "below base_seconds",
        )
    return QueueSettings(
        name=name,
        task=body.get("task", ""),
        max_attempts=body.get("max_attempts", 10),
        lease_seconds=body.get("lease_seconds", 60.0),
        backoff_base=base,
        backoff_cap=cap,
        retention_seconds=body.get("retention_seconds", DEFAULT_RETENTION_SECONDS),
        require_key=body.get("require_idempotency_key", False),
        timeout_seconds=body.get("timeout_seconds"),
    )


async def describe(call: Call, infos: list[QueueInfo]) -> list[dict[str, Any]]:
    """Queues as JSON, with their counts by state and oldest due pending age."""
    stats = {s.queue: s for s in await call.run(call.state.ledger.stats)}
    out = []
    for info in infos:
        s = stats.get(info.name)
        out.append(
            queue_json(info, s.counts if s else {}, s.oldest_due_pending_seconds if s else None)
        )
    return out


@group.operation(
    "PUT",
    "/v1/queues/{name}",
    summary="Declare a queue, or replace its settings",
    auth="admin",
    path_params={"name": QUEUE_NAME},
    body=QUEUE_SETTINGS,
    replies={
        201: Reply("The queue was declared.", QUEUE),
        200: Reply("The queue's settings were replaced.", QUEUE),
    },
)
async def put_queue(call: Call) -> Response:
    """Settings apply to jobs published after the change (attempts, lease, task) and to later
    nacks (backoff); jobs already in the queue keep what they were published with."""
    settings = settings_from(call.path["name"], call.body)
    info, created = await call.run(call.state.ledger.queue_settings.declare, settings)
    [body] = await describe(call, [info])
    return json_response(body, 201 if created else 200)


@group.operation(
    "GET",
    "/v1/queues",
    summary="The declared queues this key has a scope on",
    replies={200: Reply("Queues with their counts by state.", QUEUE_LIST)},
)
async def list_queues(call: Call) -> Response:
    """Admin and read keys see every queue; other keys the queues they may publish to or
    consume."""
    key = call.caller
    declared = await call.run(call.state.ledger.queue_settings.list)
    infos = [i for i in declared if key.sees_queue(i.name)]
    return json_response({"queues": await describe(call, infos)})


@group.operation(
    "GET",
    "/v1/queues/{name}",
    summary="One queue: settings, counts by state, oldest due pending age",
    scope="publish:QUEUE, consume:QUEUE, read or admin",
    path_params={"name": QUEUE_NAME},
    replies={200: Reply("The queue.", QUEUE)},
    errors=(403, 404),
)
async def get_queue(call: Call) -> Response:
    """``oldest_due_pending_seconds`` is how long the oldest job that could run has waited: the
    number to alert on when consumers fall behind."""
    name = call.path["name"]
    key = call.caller
    if not key.sees_queue(name):
        raise Problem("forbidden", f"API key {key.id} has no scope on queue {name!r}")
    info = await call.run(call.state.ledger.queue_settings.get, name)
    [body] = await describe(call, [info])
    return json_response(body)
