"""Retry policy: backoff with jitter, and the classification of failures. Pure functions, no I/O.

The rules (SPEC §3):

- transient (retry with backoff): any exception by default, timeouts, connection errors, HTTP 408,
  409, 425, 429, 5xx;
- permanent (dead at once): ``Permanent(...)``, other HTTP 4xx;
- explicit: ``Retry(after=...)`` and an HTTP ``Retry-After`` header (seconds or HTTP-date) set the
  next run time instead of the backoff.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ._retry_after import parse_retry_after
from .errors import ConfigError, Permanent, Retry

__all__ = [
    "DEFAULT_BACKOFF",
    "Backoff",
    "Decision",
    "check_response",
    "classify",
    "classify_status",
    "parse_retry_after",
]

#: HTTP statuses that mean "try again later".
TRANSIENT_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with full jitter: after attempt *n* wait a uniformly random time
    between 0 and ``min(cap, base * 2 ** (n - 1))`` seconds.

    Full jitter spreads retries of many jobs that failed together (a provider outage) instead of
    sending them back in one wave. Set ``jitter=False`` for the exact ceiling.
    """

    base: float = 2.0
    cap: float = 3600.0
    jitter: bool = True

    def __post_init__(self) -> None:
        # As _records.positive_seconds checks (a layer above this one): a number, > 0, finite.
        base, cap = self.base, self.cap
        if isinstance(base, bool) or not isinstance(base, int | float) or not 0 < base < math.inf:
            raise ConfigError(f"backoff base must be > 0 seconds, got {base!r}")
        if isinstance(cap, bool) or not isinstance(cap, int | float):
            raise ConfigError(f"backoff cap must be a number of seconds, got {cap!r}")
        if not self.cap >= self.base:
            raise ConfigError(f"backoff cap must be >= base ({self.base} s), got {self.cap!r}")

    def ceiling(self, attempt: int) -> float:
        """The longest delay after attempt number ``attempt`` (1-based)."""
        exponent = min(max(attempt, 1) - 1, 62)
        return float(min(self.cap, self.base * (2**exponent)))

    def delay(self, attempt: int, rng: Callable[[], float] | None = None) -> float:
        """The delay in seconds before the run that follows attempt number ``attempt``: the
        ceiling times ``rng()``, a number in [0, 1) (None: ``random.random``, looked up at each
        call, so that a test may replace it)."""
        ceiling = self.ceiling(attempt)
        if not self.jitter:
            return ceiling
        return (rng if rng is not None else random.random)() * ceiling


DEFAULT_BACKOFF = Backoff()


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do after a failed attempt."""

    retry: bool
    """True: back to pending (if budget is left). False: dead now."""
    delay: float | None
    """Seconds until the next run; None lets the task's backoff decide."""
    error_class: str
    message: str
    pause_group: bool = False
    """True: pause the job's whole group for ``delay`` (``Retry(scope="group")``)."""
    timed_out: bool = False
    """True: the attempt ran past its timeout (its outcome is ``timed_out``)."""


def _header(headers: Mapping[str, str] | Any, name: str) -> str | None:
    if headers is None:
        return None
    getter = getattr(headers, "get", None)
    if getter is None:
        return None
    value = getter(name)
    if value is None:
        value = getter(name.lower())
    return None if value is None else str(value)


def _snippet(body: bytes | str | None, limit: int) -> str:
    if not body:
        return ""
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else str(body)
    text = text.strip()
    return text[:limit] + "…" if len(text) > limit else text


def classify_status(
    status: int,
    headers: Mapping[str, str] | Any = None,
    now: datetime | None = None,
    body: bytes | str | None = None,
    *,
    body_kept: int = 500,
) -> Decision | None:
    """What an HTTP answer means (SPEC §3) — for a handler's provider (``check_response``) and
    for a push delivery alike. None for success (2xx). ``body`` (its first ``body_kept``
    characters) goes into the message."""
    if 200 <= status < 300:
        return None
    retry_after = parse_retry_after(_header(headers, "Retry-After"), now)
    snippet = _snippet(body, body_kept)
    message = f"HTTP {status}: {snippet}" if snippet else f"HTTP {status}"
    if 300 <= status < 400:
        # A redirect is never followed: the endpoint is misconfigured or moving.
        where = _header(headers, "Location")
        target = f" to {where}" if where else ""
        return Decision(
            True, retry_after, f"HTTP {status}", f"HTTP {status}: redirect{target} not followed"
        )
    if status in TRANSIENT_STATUSES or status >= 500 or status < 200:
        return Decision(True, retry_after, f"HTTP {status}", message)
    return Decision(False, None, f"HTTP {status}", message)


def _status_of(exc: BaseException) -> tuple[int, Any] | None:
    """The HTTP status and headers carried by an exception, e.g. ``httpx.HTTPStatusError``."""
    response = getattr(exc, "response", None)
    if response is None:
        return None
    status = getattr(response, "status_code", None) or getattr(response, "status", None)
    if not isinstance(status, int):
        return None
    return status, getattr(response, "headers", None)


def _name(exc: BaseException) -> str:
    return type(exc).__qualname__


def _message(exc: BaseException) -> str:
    """``str(exc)``, or its class's name when it has none, or says it could not be read (an
    ``__str__`` that raises must not keep the attempt's outcome from being written)."""
    try:
        return str(exc) or _name(exc)
    except Exception as failed:
        return f"{_name(exc)} (its message could not be read: {type(failed).__name__})"


def classify(exc: BaseException, now: datetime | None = None) -> Decision:
    """Decide how a handler's exception ends its attempt."""
    if isinstance(exc, Retry):
        after = exc.after
        if isinstance(after, datetime):
            now = now or datetime.now(UTC)
            delay: float | None = max(0.0, (after - now).total_seconds())
        else:
            delay = None if after is None else max(0.0, float(after))
        return Decision(True, delay, exc.error_class, exc.reason, exc.scope == "group")
    if isinstance(exc, Permanent):
        return Decision(False, None, exc.error_class, exc.reason)
    carried = _status_of(exc)
    if carried is not None:
        status, headers = carried
        decision = classify_status(status, headers, now)
        if decision is not None:
            return Decision(
                decision.retry, decision.delay, _name(exc), f"{decision.message}: {_message(exc)}"
            )
    return Decision(True, None, _name(exc), _message(exc))


def check_response(response: Any, now: datetime | None = None) -> None:
    """Raise ``Retry`` or ``Permanent`` for an HTTP response that is not a success.

    Works with any response object that has ``status_code`` (or ``status``) and ``headers``,
    e.g. httpx or requests. Use it in a handler right after calling a provider::

        resp = client.post(url, json=body, headers={"Idempotency-Key": ctx.key})
        check_response(resp)
    """
    status = getattr(response, "status_code", None) or getattr(response, "status", None)
    if not isinstance(status, int):
        raise TypeError(f"not an HTTP response: {response!r}")
    body = getattr(response, "text", "")
    decision = classify_status(status, getattr(response, "headers", None), now, body)
    if decision is None:
        return
    if decision.retry:
        raise Retry(decision.message, after=decision.delay, error_class=decision.error_class)
    raise Permanent(decision.message, error_class=decision.error_class)
