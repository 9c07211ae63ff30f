"""Declaring routes: each ``RouteGroup`` holds operations (method, path, what they accept and
answer) and the server turns them into Starlette routes and the OpenAPI document.

A route module makes one group and decorates its handlers::

    group = RouteGroup("queues", "Declaring queues and reading their depth.")

    @group.operation("GET", "/v1/queues/{name}", auth="key", path={"name": QUEUE_NAME},
                     replies={200: Reply("The queue", QUEUE)}, errors=(401, 403, 404))
    async def get_queue(call: Call) -> Response: ...

Everything an operation declares is enforced before its handler runs, in this order: the API
key (401), the request's content type (415) and size (413, from ``Content-Length`` before
reading, else while streaming), JSON syntax (400), path, query and header parameters and the
body against their schemas (422; 400 for headers). Handlers check queue scopes themselves
(403), since the queue is often in the body.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from .._records import ApiKey, decode_json
from ..errors import (
    BackendUnavailable,
    ConfigError,
    InvalidTransition,
    JobledgerError,
    KeyConflict,
    LeaseLost,
    NotFound,
    PayloadError,
)
from .problems import Problem, problem_response, unavailable
from .schema import Invalid, Schema
from .state import ServerState, ServiceFactory

__all__ = ["Call", "Operation", "Param", "Reply", "RouteGroup", "json_response"]

log = logging.getLogger("jobledger.http")

T = TypeVar("T")
Handler = Callable[["Call"], Awaitable[Response]]

#: Who may call an operation: anyone, any valid key (the handler checks queue scopes), admins.
AUTH_LEVELS = ("public", "key", "admin")


@dataclass(frozen=True)
class Reply:
    """A documented successful answer: its description, body schema and headers."""

    description: str
    schema: Schema | None = None
    headers: Mapping[str, tuple[Schema, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Param:
    """A query or header parameter."""

    schema: Schema
    description: str
    required: bool = False


@dataclass
class Operation:
    method: str
    path: str
    handler: Handler
    operation_id: str
    summary: str
    description: str
    tag: str
    auth: str
    scope: str | None
    body: Schema | None
    body_limit: str | None
    """The name of the ``ServerSettings`` field that limits the body (default ``body_limit``)."""
    path_params: Mapping[str, Schema]
    query: Mapping[str, Param]
    headers: Mapping[str, Param]
    replies: Mapping[int, Reply]
    errors: tuple[int, ...]

    def error_statuses(self) -> list[int]:
        """Every error status this operation may answer, for the document."""
        statuses = set(self.errors) | {500, 503}
        if self.auth != "public":
            statuses |= {401}
        if self.auth == "admin":
            statuses |= {403}
        if self.body is not None:
            statuses |= {400, 413, 415, 422}
        if self.path_params or self.query:
            statuses |= {422}
        if self.headers:
            statuses |= {400}
        return sorted(statuses)


class RouteGroup:
    """A set of operations under one OpenAPI tag, plus anything else the area needs: plain
    Starlette routes kept out of the document (a dashboard, ``/metrics``) and services started
    with the server (push delivery)."""

    def __init__(self, tag: str, description: str):
        self.tag = tag
        self.description = description
        self.operations: list[Operation] = []
        self.raw_routes: list[BaseRoute] = []
        self.services: list[ServiceFactory] = []

    def operation(
        self,
        method: str,
        path: str,
        *,
        summary: str,
        auth: str = "key",
        scope: str | None = None,
        body: Schema | None = None,
        body_limit: str | None = None,
        path_params: Mapping[str, Schema] | None = None,
        query: Mapping[str, Param] | None = None,
        headers: Mapping[str, Param] | None = None,
        replies: Mapping[int, Reply],
        errors: Sequence[int] = (),
    ) -> Callable[[Handler], Handler]:
        """Declare an operation; the decorated function is its handler. Its docstring is the
        operation's description in the document."""
        if auth not in AUTH_LEVELS:
            raise ValueError(f"auth must be one of {AUTH_LEVELS}, got {auth!r}")

        def register(handler: Handler) -> Handler:
            self.operations.append(
                Operation(
                    method=method.upper(),
                    path=path,
                    handler=handler,
                    operation_id=handler.__name__,
                    summary=summary,
                    description=inspect.cleandoc(handler.__doc__ or ""),
                    tag=self.tag,
                    auth=auth,
                    scope=scope or ("admin" if auth == "admin" else None),
                    body=body,
                    body_limit=body_limit,
                    path_params=path_params or {},
                    query=query or {},
                    headers=headers or {},
                    replies=replies,
                    errors=tuple(errors),
                )
            )
            return handler

        return register


class Call:
    """One request as a handler sees it: validated inputs, the caller's key, the server."""

    def __init__(self, request: Request, state: ServerState, operation: Operation):
        self.request = request
        self.state = state
        self.operation = operation
        self.key: ApiKey | None = None
        self.body: Any = None
        self.path: dict[str, Any] = {}
        self.query: dict[str, Any] = {}
        self.headers: dict[str, Any] = {}

    @property
    def caller(self) -> ApiKey:
        """The caller's API key (operations with ``auth="key"`` or ``"admin"`` always have one)."""
        if self.key is None:
            raise Problem("unauthorized", "this operation needs an API key")
        return self.key

    def require(self, kind: str, queue: str | None = None) -> ApiKey:
        """The caller's key, if it may do ``kind`` on ``queue``; else 403."""
        key = self.key
        if key is None:
            raise Problem("unauthorized", "this operation needs an API key")
        if not key.allows(kind, queue):
            wanted = "admin" if kind == "admin" else f"{kind}:{queue}"
            raise Problem("forbidden", f"API key {key.id} lacks the scope {wanted}")
        return key

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run blocking ledger work on a worker thread."""
        return await run_in_threadpool(fn, *args, **kwargs)


def json_response(
    data: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return JSONResponse(data, status_code=status, headers=dict(headers or {}))


# -- serving -----------------------------------------------------------------------------------


def build_routes(state: ServerState, operations: Sequence[Operation]) -> list[BaseRoute]:
    """One Starlette route per path; the path's operations are chosen by method here, so that
    any other method is answered 405 with an ``Allow`` header naming the documented ones."""
    by_path: dict[str, dict[str, Operation]] = {}
    for op in operations:
        methods = by_path.setdefault(op.path, {})
        if op.method in methods:
            raise ValueError(f"two operations for {op.method} {op.path}")
        methods[op.method] = op
    return [
        Route(path, _PathApp(_endpoint(state, methods), methods), name=path)
        for path, methods in by_path.items()
    ]


class _PathApp:
    """An ASGI app for one path. Starlette routes any method to an ASGI app (unlike a plain
    function, which it limits to GET), so the method check — and its 405 — is ours."""

    def __init__(
        self, endpoint: Callable[[Request], Awaitable[Response]], methods: Mapping[str, Operation]
    ):
        self._endpoint = endpoint
        self.methods = sorted(methods)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        response = await self._endpoint(request)
        await response(scope, receive, send)


def _endpoint(
    state: ServerState, methods: dict[str, Operation]
) -> Callable[[Request], Awaitable[Response]]:
    allow = ", ".join(sorted(methods))

    async def endpoint(request: Request) -> Response:
        op = methods.get(request.method)
        if op is None:
            return problem_response(
                Problem(
                    "method-not-allowed",
                    f"{request.method} is not allowed here; allowed: {allow}",
                    headers={"Allow": allow},
                )
            )
        try:
            return await _serve(state, op, request)
        except Problem as problem:
            return problem_response(problem)
        except Invalid as exc:
            return problem_response(_invalid(exc))
        except JobledgerError as exc:
            return problem_response(translate(exc))
        except ClientDisconnect:
            return Response(status_code=400)
        except Exception:  # a bug: log it (never the request's headers), answer 500
            log.exception("unexpected error in %s %s", request.method, op.path)
            return problem_response(
                Problem("internal-error", "the server failed; the error has been logged")
            )

    return endpoint


def _invalid(exc: Invalid) -> Problem:
    first = exc.errors[0]
    more = f" (and {len(exc.errors) - 1} more)" if len(exc.errors) > 1 else ""
    return Problem(
        "validation-failed",
        f"{first[0] or 'the body'}: {first[1]}{more}",
        errors=[{"pointer": p, "detail": m} for p, m in exc.errors],
    )


def translate(exc: JobledgerError) -> Problem:
    """A ledger error as the problem the API answers (503 with ``Retry-After`` while the
    database is unavailable)."""
    if isinstance(exc, NotFound):
        return Problem("not-found", str(exc))
    if isinstance(exc, InvalidTransition):
        return Problem("invalid-transition", str(exc))
    if isinstance(exc, BackendUnavailable):
        log.warning("database unavailable: %s", exc)
        return unavailable()
    if isinstance(exc, PayloadError | ConfigError):
        return Problem("validation-failed", str(exc))
    if isinstance(exc, KeyConflict):
        return Problem("key-reused", str(exc))
    if isinstance(exc, LeaseLost):
        return Problem("stale-receipt", str(exc))
    log.error("unexpected %s: %s", type(exc).__name__, exc)
    return Problem("internal-error", "the server failed; the error has been logged")


async def _serve(state: ServerState, op: Operation, request: Request) -> Response:
    call = Call(request, state, op)
    if op.auth != "public":
        call.key = await authenticate(request, state)
        if op.auth == "admin":
            call.require("admin")
    errors: list[tuple[str, str]] = []
    for name, schema in op.path_params.items():
        call.path[name] = _parse_text(schema, request.path_params.get(name, ""), f"/{name}", errors)
    for name, param in op.query.items():
        values = request.query_params.getlist(name)
        if not values:
            if param.required:
                errors.append((f"/{name}", "is a required query parameter"))
            continue
        call.query[name] = _parse_text(param.schema, values[-1], f"/{name}", errors)
    header_errors: list[tuple[str, str]] = []
    for name, param in op.headers.items():
        values = request.headers.getlist(name)
        if not values:
            if param.required:
                header_errors.append((name, "is a required header"))
            continue
        if len(values) > 1:
            # Which one the client meant cannot be known; a proxy may have added one.
            header_errors.append((name, f"was sent {len(values)} times; send it once"))
            continue
        call.headers[name] = param.schema.check(values[0], name, header_errors)
    if header_errors:
        raise Problem(
            "invalid-header",
            "; ".join(f"{n}: {m}" for n, m in header_errors),
            errors=[{"header": n, "detail": m} for n, m in header_errors],
        )
    if op.body is not None:
        limit = int(getattr(state.settings, op.body_limit or "body_limit"))
        raw = await read_body(request, limit)
        document = parse_json(raw)
        call.body = op.body.check(document, "", errors)
    if errors:
        raise Invalid(errors)
    return await op.handler(call)


def _parse_text(schema: Schema, text: str, pointer: str, errors: list[tuple[str, str]]) -> Any:
    parse = getattr(schema, "parse_text", None)
    if parse is not None:
        return parse(text, pointer, errors)
    return schema.check(text, pointer, errors)


async def authenticate(request: Request, state: ServerState) -> ApiKey:
    """The caller's API key from ``Authorization: Bearer …``; 401 when missing, unknown or
    revoked. The key itself is never logged nor echoed."""
    header = request.headers.get("authorization")
    if not header:
        raise _unauthorized("send the API key as 'Authorization: Bearer <key>'")
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise _unauthorized("the Authorization header must be 'Bearer <key>'")
    key = await run_in_threadpool(state.ledger.keys.authenticate, token)
    if key is None:
        raise _unauthorized("the API key is unknown or revoked")
    return key


def _unauthorized(detail: str) -> Problem:
    return Problem("unauthorized", detail, headers={"WWW-Authenticate": 'Bearer realm="jobledger"'})


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refusing more than ``limit`` bytes: at once when ``Content-Length`` says so
    (nothing is read), else as soon as the stream passes the limit. Never holds more than
    ``limit`` bytes."""
    content_type = request.headers.get("content-type", "")
    media = content_type.split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise Problem(
            "unsupported-media-type",
            f"send the body as application/json (got {media or 'no Content-Type'})",
        )
    too_large = Problem(
        "payload-too-large",
        f"the body is larger than {limit} bytes",
        headers={"Connection": "close"},
        limit=limit,
    )
    length = request.headers.get("content-length")
    if length is not None:
        if not length.strip().isdigit():
            raise Problem("invalid-header", "Content-Length must be a number of bytes")
        if int(length) > limit:
            raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json(raw: bytes) -> Any:
    """The request's JSON document; 400 when it is not one."""
    if not raw.strip():
        raise Problem("malformed-request", "the body is empty; send a JSON object")
    try:
        return decode_json(raw)
    except ValueError as exc:
        raise Problem("malformed-request", f"the body is not valid JSON: {exc}") from None
