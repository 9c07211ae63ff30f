"""The HTTP API's share of OpenTelemetry: a server span per request, continuing the caller's
``traceparent``. Installed by ``create_app`` only when the process uses OpenTelemetry (see
``jobledger.observability.tracing``); a publish made inside the span stores its context with
the message's job, so the trace crosses the queue to the attempts that run it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..observability.tracing import TRACE_HEADERS, server_span

__all__ = ["TraceRequests"]

_WANTED = frozenset(h.encode() for h in TRACE_HEADERS)


class TraceRequests:
    """ASGI middleware: each HTTP request is a server span named ``METHOD /route/{template}``
    (the route's template, never the path with its ids), the child of an incoming
    ``traceparent``, with the answer's status code."""

    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute] = ()):
        self.app = app
        self.routes = routes

    def _template(self, scope: Scope) -> str | None:
        for route in self.routes:
            match, _ = route.matches(scope)
            if match is Match.FULL:
                return str(getattr(route, "path", "")) or None
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope["headers"]
            if name.lower() in _WANTED
        }
        method = scope["method"]
        template = self._template(scope)
        with server_span(method, scope["path"], headers) as span:
            if template is not None:
                span.update_name(f"{method} {template}")
                span.set_attribute("http.route", template)

            async def send_traced(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status: Any = message["status"]
                    span.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        from opentelemetry.trace import Status, StatusCode

                        span.set_status(Status(StatusCode.ERROR, f"HTTP {status}"))
                await send(message)

            await self.app(scope, receive, send_traced)
