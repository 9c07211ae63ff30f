"""The OpenAPI 3.1 document, built from the route groups' declarations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import __version__
from .api import Operation, RouteGroup
from .problems import PROBLEM_MEDIA_TYPE, PROBLEM_TYPES

__all__ = ["openapi_document"]

_DESCRIPTION = """\
The HTTP API of jobledger, a durable job ledger: one row per business task (its key), leased
under a fencing token, retried with backoff, parked as dead when it cannot succeed.

Authenticate with `Authorization: Bearer <API key>` (keys come from `jobledger keys create`).
Scopes: `publish:QUEUE`, `consume:QUEUE` (`QUEUE` may be `*`), `read` (look at everything,
change nothing: queues, groups, `/metrics`, the dashboard read-only), `admin` (everything).
Every error is `application/problem+json` (RFC 9457) with `type`, `title`, `status`, `detail`.
"""

_STATUS_TEXT = {
    200: "OK",
    201: "Created",
    400: "Bad request: malformed JSON, or an invalid or missing header",
    401: "No API key, or an unknown or revoked one",
    403: "The API key lacks the scope",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "The body is too large",
    415: "The body is not application/json",
    422: "The request is invalid",
    429: "Rate limit exceeded; retry after Retry-After seconds",
    500: "Internal server error",
    503: "The database is unavailable",
}


def _problem_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "An error (RFC 9457). `type` names its kind: "
        + ", ".join(f"`urn:jobledger:problem:{k}` ({s})" for k, (s, _) in PROBLEM_TYPES.items()),
        "required": ["type", "title", "status", "detail"],
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer", "minimum": 400, "maximum": 599},
            "detail": {"type": "string"},
            "errors": {
                "type": "array",
                "description": "With 422 and 400: each invalid field (`pointer`) or header.",
                "items": {"type": "object", "additionalProperties": True},
            },
            "retry_after": {
                "type": "integer",
                "description": "With 429: seconds to wait, as in Retry-After.",
            },
        },
        "additionalProperties": True,
    }


def _operation(op: Operation, components: dict[str, Any]) -> dict[str, Any]:
    description = op.description
    if op.scope:
        description += f"\n\nRequired scope: `{op.scope}`."
    out: dict[str, Any] = {
        "operationId": op.operation_id,
        "summary": op.summary,
        "description": description,
        "tags": [op.tag],
    }
    params: list[dict[str, Any]] = []
    for name, schema in op.path_params.items():
        params.append(
            {
                "name": name,
                "in": "path",
                "required": True,
                "schema": schema.render(components),
                "description": schema.description or name,
            }
        )
    for where, group in (("query", op.query), ("header", op.headers)):
        for name, param in group.items():
            params.append(
                {
                    "name": name,
                    "in": where,
                    "required": param.required,
                    "schema": param.schema.render(components),
                    "description": param.description,
                }
            )
    if params:
        out["parameters"] = params
    if op.body is not None:
        out["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": op.body.render(components)}},
        }
    responses: dict[str, Any] = {}
    for status, reply in op.replies.items():
        entry: dict[str, Any] = {"description": reply.description}
        if reply.schema is not None:
            entry["content"] = {"application/json": {"schema": reply.schema.render(components)}}
        if reply.headers:
            entry["headers"] = {
                name: {"description": text, "schema": schema.render(components)}
                for name, (schema, text) in reply.headers.items()
            }
        responses[str(status)] = entry
    for status in op.error_statuses():
        entry = {
            "description": _STATUS_TEXT.get(status, "Error"),
            "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        if status == 429:
            entry["headers"] = {
                "Retry-After": {
                    "description": "Seconds to wait before trying again.",
                    "required": True,
                    "schema": {"type": "integer", "minimum": 1},
                }
            }
        if status == 401:
            entry["headers"] = {
                "WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}
            }
        responses[str(status)] = entry
    out["responses"] = responses
    out["security"] = [] if op.auth == "public" else [{"bearer": []}]
    return out


def openapi_document(groups: Sequence[RouteGroup]) -> dict[str, Any]:
    """The document describing every operation of ``groups``."""
    components: dict[str, Any] = {"Problem": _problem_schema()}
    paths: dict[str, dict[str, Any]] = {}
    for group in groups:
        for op in group.operations:
            paths.setdefault(op.path, {})[op.method.lower()] = _operation(op, components)
    return {
        "openapi": "3.1.0",
        "info": {"title": "jobledger", "version": __version__, "description": _DESCRIPTION},
        "tags": [{"name": g.tag, "description": g.description} for g in groups if g.operations],
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API key from `jobledger keys create`.",
                }
            },
        },
    }
