"""``/healthz`` and ``/openapi.json``: public, no API key."""

from __future__ import annotations

from starlette.responses import Response

from ..api import Call, Reply, RouteGroup, json_response
from ..schema import AnyObject, Object, String

group = RouteGroup("meta", "Health and the API's own description.")

HEALTH = Object(
    {
        "status": String(enum=("ok",)),
        "database": String(enum=("sqlite", "postgres")),
        "schema_version": String(description="The highest migration applied."),
    },
    required=("status", "database", "schema_version"),
    additional=True,
    name="Health",
)


@group.operation(
    "GET",
    "/healthz",
    summary="Is the server up and its database reachable?",
    auth="public",
    replies={200: Reply("The server and its database answer.", HEALTH)},
    errors=(503,),
)
async def healthz(call: Call) -> Response:
    """200 when the database answers a query, 503 (problem+json) when it does not."""
    report = await call.run(call.state.ledger.health.check)
    return json_response(
        {"status": "ok", "database": report.database, "schema_version": str(report.schema_version)}
    )


@group.operation(
    "GET",
    "/openapi.json",
    summary="This API's OpenAPI 3.1 document",
    auth="public",
    replies={200: Reply("The OpenAPI document.", AnyObject())},
)
async def openapi(call: Call) -> Response:
    """Every route, its request and its errors."""
    return json_response(call.request.app.state.openapi)
