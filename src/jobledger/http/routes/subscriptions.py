"""Push subscriptions (admin): create (the secret is shown once), list with health, pause,
resume, rotate the secret, delete; and the delivery loop that runs with the server.

A subscription POSTs every job of its queue to its URL, signed per Standard Webhooks; see
docs/push.md. Secrets are returned by create and rotate only, never by a listing.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from starlette.responses import Response

from ..._records import (
    DEFAULT_CONCURRENCY,
    DEFAULT_TIMEOUT_SECONDS,
    MAX_CONCURRENCY,
    MAX_OVERLAP,
    MAX_TIMEOUT_SECONDS,
    MAX_URL_LENGTH,
    Subscription,
    SubscriptionState,
)
from ..._webhooks import MAX_SECRET_BYTES, MIN_SECRET_BYTES, SECRET_PREFIX
from ...errors import SubscriptionExists
from ..api import Call, Handler, Reply, RouteGroup, json_response
from ..models import QUEUE_NAME, TIME, text
from ..problems import Problem, invalid
from ..schema import Array, Integer, Number, Object, String

if TYPE_CHECKING:
    from ...push import PushService
    from ..state import ServerState

group = RouteGroup("subscriptions", "Push subscriptions: jobs POSTed to a URL, signed (admin).")

SUBSCRIPTION_ID = String(
    pattern=r"^sub_[0-9a-f]{12}$",
    description="A subscription's id.",
    example="sub_3f9a0c1d2e4b",
)
#: A host name whose last label starts with a letter, or a dotted-quad IPv4 address; a port
#: 1-65535; then a path or a query, without spaces, control characters or a fragment. (IPv6
#: literals are accepted by the server too, but not described here.)
_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_HOST = rf"(?:(?:[A-Za-z0-9-]+\.)*[A-Za-z][A-Za-z0-9-]*|{_OCTET}(?:\.{_OCTET}){{3}})"
_PORT = "(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
URL = String(
    min_length=1,
    max_length=MAX_URL_LENGTH,
    pattern=rf"^https?://{_HOST}(?::{_PORT})?(?:[/?][^\x00-\x20\x7f#]*)?$",
    mismatch="must be an http:// or https:// URL with a host name or IPv4 address, no "
    "credentials, no spaces or control characters and no fragment",
    description="Where deliveries are POSTed: https:// (plain http:// only to allow-listed "
    "networks). No credentials, no fragment; redirects are never followed.",
    example="https://app.example.com/hooks/jobledger",
)


def _base64_of(low: int, high: int) -> str:
    """A regular expression (unanchored) for the base64 of ``low`` to ``high`` bytes as an
    encoder writes it: whole groups of four characters, then ``xx==`` for one byte more or
    ``xxx=`` for two, whose last character leaves the unused bits zero."""
    char = "[A-Za-z0-9+/]"

    def groups(extra: int) -> str:
        fewest, most = -(-(low - extra) // 3), (high - extra) // 3
        return f"(?:{char}{{4}}){{{fewest},{most}}}"

    one_more = f"{groups(1)}{char}[AQgw]=="
    two_more = f"{groups(2)}{char}{{2}}[AEIMQUYcgkosw048]="
    return f"(?:{groups(0)}|{one_more}|{two_more})"


SECRET = String(
    pattern=f"^{SECRET_PREFIX}{_base64_of(MIN_SECRET_BYTES, MAX_SECRET_BYTES)}$",
    description=f"A Standard Webhooks secret: {SECRET_PREFIX} + the base64 (padded) of "
    f"{MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} random bytes.",
)
OPTIONAL_TIME = String(format="date-time", nullable=True)
NULLABLE_TEXT = String(nullable=True)

CREATE = Object(
    {
        "queue": QUEUE_NAME,
        "url": URL,
        "secret": SECRET,
        "rate_limit": Number(
            exclusive_minimum=0,
            maximum=100_000,
            description="Deliveries per second, shared by every delivering process. Default: none.",
        ),
        "burst": Number(
            minimum=1,
            maximum=100_000,
            description="Deliveries at once after a quiet spell. Needs rate_limit (422 "
            "otherwise); default: one second's worth.",
        ),
        "timeout_seconds": Number(
            exclusive_minimum=0,
            maximum=MAX_TIMEOUT_SECONDS,
            default=DEFAULT_TIMEOUT_SECONDS,
            description="Each request, from connect to the end of the answer (default 15).",
        ),
        "concurrency": Integer(
            minimum=1,
            maximum=MAX_CONCURRENCY,
            default=DEFAULT_CONCURRENCY,
            description="Requests in flight at once, per delivering process (default 4).",
        ),
    },
    required=("queue", "url"),
    name="SubscriptionRequest",
)

_FIELDS: dict[str, Any] = {
    "id": SUBSCRIPTION_ID,
    "queue": QUEUE_NAME,
    "url": String(),
    "state": String(enum=tuple(s.value for s in SubscriptionState)),
    "state_reason": NULLABLE_TEXT,
    "state_actor": NULLABLE_TEXT,
    "state_changed_at": OPTIONAL_TIME,
    "health": String(
        enum=("new", "healthy", "failing", "paused", "disabled"),
        description="failing: the last delivery failed (see last_error).",
    ),
    "timeout_seconds": Number(exclusive_minimum=0),
    "concurrency": Integer(minimum=1),
    "rate_per_second": Number(nullable=True),
    "burst": Number(nullable=True),
    "previous_secret_until": String(
        format="date-time",
        nullable=True,
        description="Until then the previous secret signs too (after a rotation).",
    ),
    "created_at": TIME,
    "updated_at": TIME,
    "last_attempt_at": OPTIONAL_TIME,
    "last_success_at": OPTIONAL_TIME,
    "last_failure_at": OPTIONAL_TIME,
    "last_status": Integer(nullable=True, description="The last answer's HTTP status."),
    "last_error": String(nullable=True, description="What went wrong last."),
    "consecutive_failures": Integer(minimum=0),
    "delivered": Integer(minimum=0),
    "failed": Integer(minimum=0),
}
SUBSCRIPTION = Object(_FIELDS, required=tuple(_FIELDS), additional=True, name="Subscription")
WITH_SECRET = Object(
    {
        **_FIELDS,
        "secret": String(description="The signing secret. Shown here only: store it now."),
    },
    required=(*_FIELDS, "secret"),
    additional=True,
    name="SubscriptionWithSecret",
)
SUBSCRIPTION_LIST = Object(
    {"subscriptions": Array(SUBSCRIPTION)}, required=("subscriptions",), additional=True
)
STATE_CHANGE = Object(
    {
        "reason": text(1000, "Why: kept on the subscription."),
        "actor": text(200, "Who: recorded with the API key's id. Default: the key."),
    },
    name="SubscriptionStateChange",
)
ROTATE = Object(
    {
        "secret": SECRET,
        "overlap_seconds": Number(
            minimum=0,
            maximum=MAX_OVERLAP.total_seconds(),
            default=86400,
            description="How long the previous secret keeps signing beside the new one "
            "(default 24 h; 0 ends it now).",
        ),
    },
    name="RotateRequest",
)

NOT_FOUND = (404,)


def _one(method: str, action: str = "", **spec: Any) -> Callable[[Handler], Handler]:
    """An admin operation on one subscription, named by its id in the path (404 when none has
    it): what every such operation declares alike, once."""
    return group.operation(
        method,
        "/v1/subscriptions/{subscription_id}" + action,
        auth="admin",
        path_params={"subscription_id": SUBSCRIPTION_ID},
        errors=NOT_FOUND,
        **spec,
    )


def _with_secret(sub: Subscription) -> dict[str, Any]:
    return {**sub.public(), "secret": sub.secret}


def _actor(call: Call) -> str:
    key = call.caller
    given = (call.body or {}).get("actor")
    return f"{given} via {key.actor}" if given else key.actor


@group.operation(
    "POST",
    "/v1/subscriptions",
    summary="Subscribe a URL to a queue: its jobs are POSTed there, signed",
    auth="admin",
    body=CREATE,
    replies={201: Reply("The subscription, with its secret (shown this once).", WITH_SECRET)},
    errors=(409,),
)
async def create(call: Call) -> Response:
    """A `whsec_` secret is generated unless one is given. A queue has one subscription: 409
    when it already has one. Jobs already waiting in the queue are delivered too."""
    body = call.body
    if body.get("burst") is not None and body.get("rate_limit") is None:
        raise invalid("a burst needs a rate limit", "/burst", "needs rate_limit")
    try:
        sub = await call.run(
            call.state.ledger.subscriptions.create,
            body["queue"],
            body["url"],
            secret=body.get("secret"),
            rate_per_second=body.get("rate_limit"),
            burst=body.get("burst"),
            timeout_seconds=body.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS),
            concurrency=body.get("concurrency", DEFAULT_CONCURRENCY),
        )
    except SubscriptionExists as exc:
        raise Problem("subscription-exists", str(exc), subscription_id=exc.existing_id) from None
    return json_response(_with_secret(sub), 201)


@group.operation(
    "GET",
    "/v1/subscriptions",
    summary="Every subscription with its state and health (no secrets)",
    auth="admin",
    replies={200: Reply("The subscriptions, by queue.", SUBSCRIPTION_LIST)},
)
async def list_subscriptions(call: Call) -> Response:
    """`health` is new, healthy, failing (the last delivery failed), paused or disabled (the
    endpoint answered 410 Gone)."""
    subs = await call.run(call.state.ledger.subscriptions.list)
    return json_response({"subscriptions": [s.public() for s in subs]})


@_one(
    "GET",
    summary="One subscription with its state and health (no secret)",
    replies={200: Reply("The subscription.", SUBSCRIPTION)},
)
async def get_subscription(call: Call) -> Response:
    """404 for an unknown id."""
    sub = await call.run(call.state.ledger.subscriptions.get, call.path["subscription_id"])
    return json_response(sub.public())


async def _set_state(call: Call, state: SubscriptionState) -> Response:
    sub = await call.run(
        call.state.ledger.subscriptions.set_state,
        call.path["subscription_id"],
        state,
        _actor(call),
        call.body.get("reason"),
    )
    return json_response(sub.public())


@_one(
    "POST",
    "/pause",
    summary="Stop delivering a subscription's jobs until it is resumed",
    body=STATE_CHANGE,
    replies={200: Reply("The paused subscription.", SUBSCRIPTION)},
)
async def pause(call: Call) -> Response:
    """Requests in flight finish; the queue's jobs wait. Delivery loops notice within their
    refresh interval (2 s)."""
    return await _set_state(call, SubscriptionState.PAUSED)


@_one(
    "POST",
    "/resume",
    summary="Deliver again: a paused subscription, or one disabled by 410 Gone",
    body=STATE_CHANGE,
    replies={200: Reply("The active subscription.", SUBSCRIPTION)},
)
async def resume(call: Call) -> Response:
    """Jobs that waited are delivered, oldest first (by priority, then due time)."""
    return await _set_state(call, SubscriptionState.ACTIVE)


@_one(
    "POST",
    "/rotate",
    summary="Give a subscription a new secret; the old one signs too during an overlap",
    body=ROTATE,
    replies={200: Reply("The subscription with its new secret (shown this once).", WITH_SECRET)},
)
async def rotate(call: Call) -> Response:
    """During the overlap every delivery carries two signatures (space-separated), so the
    endpoint can switch to the new secret whenever it likes within it."""
    body = call.body
    sub = await call.run(
        call.state.ledger.subscriptions.rotate,
        call.path["subscription_id"],
        secret=body.get("secret"),
        overlap=timedelta(seconds=float(body.get("overlap_seconds", 86400))),
    )
    return json_response(_with_secret(sub))


@_one(
    "DELETE",
    summary="Delete a subscription (its queue's jobs stay)",
    replies={200: Reply("The subscription as it was.", SUBSCRIPTION)},
)
async def delete(call: Call) -> Response:
    """The queue's jobs stay where they are, waiting for a new subscription or a consumer."""
    sub = await call.run(call.state.ledger.subscriptions.delete, call.path["subscription_id"])
    return json_response(sub.public())


def _push_service(state: ServerState) -> PushService | None:
    """The delivery loop, when the server's settings ask for it (``jobledger serve`` does unless
    ``--no-push``). The server's own rescuer handles expired leases."""
    settings = state.settings.push
    if settings is None:
        return None
    from dataclasses import replace

    from ...push import PushService

    return PushService(state.ledger, replace(settings, rescue_interval=None))


group.services.append(_push_service)
