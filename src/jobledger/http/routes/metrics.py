"""``/metrics``: Prometheus metrics of this server and the ledger's gauges (text format).

Needs an API key with ``read`` or ``admin`` (``Authorization: Bearer …``, which Prometheus
sends with ``authorization: {credentials_file: …}``), unless the server runs with
``--public-metrics``. Kept out of the OpenAPI document: it is not JSON.
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...errors import JobledgerError
from ..api import RouteGroup, authenticate, translate
from ..observe import observe
from ..problems import Problem, problem_response
from ..state import ServerState

group = RouteGroup("metrics", "Prometheus metrics.")


async def metrics(request: Request) -> Response:
    """The metrics. While the database is down, a scrape with a key is answered 503 with
    ``Retry-After`` (the key cannot be checked, and is never taken on trust); with
    ``--public-metrics`` the scrape gets what the server knows, ``jobledger_database_up 0``
    among it (see docs/observability.md)."""
    state: ServerState = request.app.state.jobledger
    if not state.settings.public_metrics:
        try:
            key = await authenticate(request, state)
        except Problem as problem:
            return problem_response(problem)
        except JobledgerError as exc:
            return problem_response(translate(exc))
        if not key.can_read:
            return problem_response(
                Problem("forbidden", f"API key {key.id} lacks the scope read (or admin)")
            )
    accept = request.headers.get("accept")
    try:
        body, content_type = await run_in_threadpool(observe(state).metrics.render, accept)
    except JobledgerError as exc:  # the ledger's gauges say database_up 0 rather than raise
        return problem_response(translate(exc))
    return Response(body, headers={"Content-Type": content_type})


group.raw_routes.append(Route("/metrics", metrics, methods=["GET"], name="metrics"))
group.services.append(lambda state: observe(state).flusher())
