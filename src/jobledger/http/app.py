"""The application factory: ``create_app(ledger)`` → a Starlette (ASGI) app.

Routes come from route groups (``jobledger.http.routes``); every error becomes problem+json;
the lifespan starts the wake-ups for long polling and the services (the rescuer, and whatever
the groups add) and stops them at shutdown. The ledger stays the caller's to close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._ledger import Ledger
from .._runtime.worker import default_worker_name
from ..observability.tracing import tracing_on
from .api import RouteGroup, build_routes
from .observe import observe
from .openapi import openapi_document
from .problems import NOSNIFF, Problem, problem_response
from .routes import DEFAULT_GROUPS
from .state import ServerSettings, ServerState, Service
from .wakeups import Wakeups

__all__ = ["create_app"]

log = logging.getLogger("jobledger.http")

_HTTP_KINDS = {
    400: "malformed-request",
    401: "unauthorized",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    413: "payload-too-large",
    415: "unsupported-media-type",
    422: "validation-failed",
    429: "rate-limited",
}


async def _http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (an unknown path, mostly) as problem+json."""
    assert isinstance(exc, HTTPException)
    kind = _HTTP_KINDS.get(exc.status_code, "internal-error")
    detail = exc.detail if exc.status_code != 404 else f"no route for {request.url.path}"
    return problem_response(Problem(kind, str(detail), headers=dict(exc.headers or {})))


class NoSniff:
    """Adds ``X-Content-Type-Options: nosniff`` to every response that has none: routes,
    Starlette's own 404s and 405s, static files, the dashboard."""

    _HEADER = (NOSNIFF[0].lower().encode(), NOSNIFF[1].encode())

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_nosniff(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if all(name.lower() != self._HEADER[0] for name, _ in headers):
                    headers.append(self._HEADER)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_nosniff)


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error in %s %s", request.method, request.url.path)
    return problem_response(
        Problem("internal-error", "the server failed; the error has been logged")
    )


def create_app(
    ledger: Ledger,
    settings: ServerSettings | None = None,
    groups: Sequence[RouteGroup] = DEFAULT_GROUPS,
    middleware: Sequence[Middleware] = (),
) -> Starlette:
    """The HTTP API over ``ledger``. ``groups`` chooses the route groups (default: all of
    ``jobledger.http.routes``); each group's services start and stop with the app.
    ``middleware`` wraps every route (sessions for a dashboard, say)."""
    state = ServerState(ledger, settings or ServerSettings())
    routes = build_routes(state, [op for g in groups for op in g.operations])
    for group in groups:
        routes.extend(group.raw_routes)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await run_in_threadpool(ledger.health.check)  # open (and check) the database now
        state.wakeups = Wakeups(ledger.listening, asyncio.get_running_loop())
        services: list[Service] = [
            ledger.rescuer(state.settings.rescue_interval, observe(state).rescued),
            ledger.pruner(f"serve:{default_worker_name()}"),
        ]
        for group in groups:
            for factory in group.services:
                service = factory(state)
                if service is not None:
                    services.append(service)
        for service in services:
            await run_in_threadpool(service.start)
            state.services.append(service)
        try:
            yield
        finally:
            for service in reversed(state.services):
                try:
                    await run_in_threadpool(service.stop)
                except Exception:
                    log.exception("stopping %r failed", service)
            state.services.clear()
            state.wakeups.close()
            state.wakeups = None

    traced = []
    if tracing_on():  # OpenTelemetry in this process: a server span per request
        from .tracing import TraceRequests

        traced = [Middleware(TraceRequests, routes=routes)]
    app = Starlette(
        routes=routes,
        middleware=[*traced, Middleware(NoSniff), *middleware],
        exception_handlers={HTTPException: _http_exception, Exception: _unexpected},
        lifespan=lifespan,
    )
    app.state.jobledger = state
    app.state.openapi = openapi_document(groups)
    return app
