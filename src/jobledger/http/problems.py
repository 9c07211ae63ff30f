"""Errors as ``application/problem+json`` (RFC 9457): ``type``, ``title``, ``status``, ``detail``.

Every error the API answers is a ``Problem``. Its ``type`` is a URN naming the kind of error
(``urn:jobledger:problem:rate-limited``), stable for clients to branch on; ``title`` is the short
human name of that kind; ``detail`` says what happened this time. Extra members: ``errors`` (the
fields that failed validation) and ``retry_after`` (seconds, with 429).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response

__all__ = [
    "NOSNIFF",
    "PROBLEM_MEDIA_TYPE",
    "PROBLEM_TYPES",
    "Problem",
    "invalid",
    "problem_response",
]

PROBLEM_MEDIA_TYPE = "application/problem+json"

#: On every response: a browser must never guess another type than the one sent (a 404's
#: detail repeats the path it was asked for; read as HTML, that would be a reflected script).
NOSNIFF = ("X-Content-Type-Options", "nosniff")

#: Every kind of problem the API answers: name → (status, title).
PROBLEM_TYPES: dict[str, tuple[int, str]] = {
    "malformed-request": (400, "The request body is not valid JSON"),
    "invalid-header": (400, "A request header is invalid"),
    "idempotency-key-required": (400, "This queue requires an Idempotency-Key"),
    "unauthorized": (401, "Missing, unknown or revoked API key"),
    "forbidden": (403, "The API key lacks the scope for this"),
    "not-found": (404, "Not found"),
    "method-not-allowed": (405, "Method not allowed"),
    "key-in-flight": (409, "A request with this Idempotency-Key is in flight"),
    "stale-receipt": (409, "The receipt is stale"),
    "invalid-transition": (409, "The operation does not apply to the message's state"),
    "subscription-exists": (409, "The queue already has a subscription"),
    "payload-too-large": (413, "The request body is too large"),
    "unsupported-media-type": (415, "The request body must be application/json"),
    "validation-failed": (422, "The request is invalid"),
    "key-reused": (422, "The Idempotency-Key was used with a different request"),
    "rate-limited": (429, "Rate limit exceeded"),
    "internal-error": (500, "Internal server error"),
    "unavailable": (503, "The ledger's database is unavailable"),
}


class Problem(Exception):
    """An error answered as problem+json. ``kind`` is a key of ``PROBLEM_TYPES``."""

    def __init__(
        self,
        kind: str,
        detail: str,
        *,
        headers: dict[str, str] | None = None,
        **extensions: Any,
    ):
        self.kind = kind
        self.status, self.title = PROBLEM_TYPES[kind]
        self.detail = detail
        self.headers = headers or {}
        self.extensions = extensions
        super().__init__(f"{self.status} {kind}: {detail}")

    @property
    def type(self) -> str:
        return f"urn:jobledger:problem:{self.kind}"

    def body(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            **self.extensions,
        }


def invalid(detail: str, pointer: str, why: str) -> Problem:
    """A 422 naming the field at fault (a JSON pointer): for the rules a request's schema cannot
    state, such as one field's bound depending on another's."""
    return Problem("validation-failed", detail, errors=[{"pointer": pointer, "detail": why}])


def problem_response(problem: Problem) -> Response:
    """The problem as a response. It carries ``NOSNIFF`` itself, because an unexpected error's
    answer is made outside every middleware."""
    return Response(
        json.dumps(problem.body(), ensure_ascii=False, separators=(",", ":")),
        status_code=problem.status,
        media_type=PROBLEM_MEDIA_TYPE,
        headers={**problem.headers, NOSNIFF[0]: NOSNIFF[1]},
    )
