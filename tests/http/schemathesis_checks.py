"""A schemathesis check loaded by the OpenAPI test (``SCHEMATHESIS_HOOKS``): a request that the
document says is valid is never refused as invalid.

schemathesis's own ``positive_data_acceptance`` cannot be used as it is: some schema-valid
requests are refused by design for reasons that are not about their shape (a key reused with
another body, a stale receipt, a queue that already has a subscription), and those come with
problem types of their own (``key-reused``, ``stale-receipt``, ``subscription-exists``), which
this check leaves alone. What it refuses to let by is a ``validation-failed``,
``malformed-request`` or ``invalid-header`` answer to a positive case — the server requiring
something its document does not say — except for the rules across fields that JSON Schema
cannot state, each listed here with the field the problem points at and stated in the
operation's description.
"""

from __future__ import annotations

import json
import os
from typing import Any

import schemathesis

#: (method, path) → the fields whose cross-field rules may refuse a schema-valid request.
CROSS_FIELD_RULES: dict[tuple[str, str], set[str]] = {
    # permanent and retry_after_seconds exclude each other; pause_group needs the latter.
    ("POST", "/v1/queue/nack"): {"/retry_after_seconds", "/pause_group"},
    # limit / rate may not exceed 60 s.
    ("POST", "/v1/queues/{name}/redrive"): {"/rate"},
    # exactly one of seconds and until; until within a year from now.
    ("POST", "/v1/queues/{name}/groups/{group}/pause"): {"/seconds", "/until"},
    # a burst needs a rate.
    ("PUT", "/v1/queues/{name}/group-limits"): {"/burst"},
    ("POST", "/v1/subscriptions"): {"/burst"},
    # cap_seconds at least base_seconds.
    ("PUT", "/v1/queues/{name}"): {"/backoff/cap_seconds"},
}

REFUSED_AS_INVALID = {"validation-failed", "malformed-request", "invalid-header"}

#: A file to which each checked positive case's operation is appended, so that the test knows
#: this check ran (schemathesis reports only the checks that failed).
SEEN = os.environ.get("JOBLEDGER_SCHEMATHESIS_SEEN")


def _problem(response: Any) -> dict[str, Any] | None:
    try:
        body = json.loads(response.content)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


@schemathesis.check
def schema_valid_requests_are_not_refused_as_invalid(ctx: Any, response: Any, case: Any) -> None:
    """A positive case answered 400/422 as invalid, other than by a listed cross-field rule."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return
    if any(component.mode.is_negative for component in meta.components.values()):
        return
    if SEEN:
        with open(SEEN, "a") as seen:
            seen.write(f"{case.operation.method.upper()} {case.operation.path}\n")
    if response.status_code not in (400, 422):
        return
    problem = _problem(response)
    if problem is None:
        return
    kind = str(problem.get("type", "")).rsplit(":", 1)[-1]
    if kind not in REFUSED_AS_INVALID:
        return
    pointers = {e.get("pointer") for e in problem.get("errors", []) if isinstance(e, dict)}
    allowed = CROSS_FIELD_RULES.get((case.operation.method.upper(), case.operation.path), set())
    if pointers and pointers <= allowed:
        return
    raise AssertionError(
        f"a request valid by the document was refused as invalid ({response.status_code} "
        f"{kind}): {problem.get('detail')}"
    )
