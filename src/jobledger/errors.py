"""Exceptions, in two families.

What jobledger raises to its callers::

    JobledgerError
    ├── ConfigError            a bad URL, task option, schedule or setting, found when it is built
    ├── PayloadError           a payload that is not a JSON object, or larger than 256 KiB
    ├── KeyConflict            the key exists in the queue with another task or payload
    ├── NotFound               no job with that id or key
    ├── JobFailed              the job whose result was asked for ended dead or cancelled
    ├── ResultNotReady         the job whose result was asked for has not finished yet
    │   └── ResultTimeout      … and did not finish within the wait (also a TimeoutError)
    ├── InvalidTransition      the operation does not apply to the job's state (redrive a done job)
    ├── LeaseLost              a write named a stale lease token and changed nothing
    ├── LeadershipLost         a scheduler's leader lease expired or was taken; it wrote nothing
    ├── BackendUnavailable     the database is missing, locked, gone or refuses us
    │   └── SchemaMismatch     the database has no jobledger schema, or a newer one than this code
    ├── BrokerUnavailable      a message broker (RabbitMQ, NATS, Redis) cannot be reached or used
    └── SubscriptionExists     the queue already has a push subscription

What a handler raises to say how its attempt ended (anything else is a transient failure)::

    HandlerOutcome
    ├── Retry                  run again, after a given delay or at a given time
    └── Permanent              do not run again; the job goes to dead at once

Driver exceptions (psycopg, sqlite3) never cross the backend boundary: backends translate them.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any, Literal

from ._retry_after import parse_retry_after

__all__ = [
    "BackendUnavailable",
    "BrokerUnavailable",
    "ConfigError",
    "HandlerOutcome",
    "InvalidTransition",
    "JobFailed",
    "JobledgerError",
    "KeyConflict",
    "LeadershipLost",
    "LeaseLost",
    "NotFound",
    "PayloadError",
    "Permanent",
    "ResultNotReady",
    "ResultTimeout",
    "Retry",
    "SchemaMismatch",
    "SubscriptionExists",
]


class JobledgerError(Exception):
    """Base of every error jobledger raises to its callers."""


class ConfigError(JobledgerError, ValueError):
    """A setting is invalid. The message says which one and what is allowed."""


class PayloadError(JobledgerError, ValueError):
    """A payload was refused: it must be a JSON object of at most 256 KiB."""


class KeyConflict(JobledgerError):
    """The key already names a job in this queue with a different task or payload.

    Nothing was written; the existing job is left as it was.
    """

    def __init__(self, queue: str, keys: list[str], existing_ids: list[int] | None = None):
        self.queue = queue
        self.keys = keys
        self.existing_ids = existing_ids or []
        shown = ", ".join(repr(k) for k in keys[:5])
        more = f" and {len(keys) - 5} more" if len(keys) > 5 else ""
        super().__init__(
            f"key {shown}{more} already exists in queue {queue!r} with a different task or "
            "payload; nothing was changed"
        )


class NotFound(JobledgerError, LookupError):
    """No job (or other record) matches the given id or key."""


class JobFailed(JobledgerError):
    """The job ended without a result: it is dead (``error`` says why) or was cancelled.

    Raised by ``Ledger.result``. ``state`` is ``"dead"`` or ``"cancelled"``; ``error`` and
    ``error_class`` are the job's last error (None for a job cancelled before it ran).
    """

    def __init__(
        self,
        job_id: int,
        queue: str,
        key: str,
        state: str,
        error: str | None = None,
        error_class: str | None = None,
    ):
        self.job_id = job_id
        self.queue = queue
        self.key = key
        self.state = state
        self.error = error
        self.error_class = error_class
        how = "was cancelled" if state == "cancelled" else f"is {state}"
        why = ""
        if error:
            shown = error if len(error) <= 500 else error[:500] + "…"
            why = f": {error_class}: {shown}" if error_class else f": {shown}"
        super().__init__(f"job {job_id} ({queue}/{key}) {how}, so it has no result{why}")


class ResultNotReady(JobledgerError):
    """The job has not finished (it is pending or leased): it has no result yet.

    Raised by ``Ledger.result`` without ``timeout``; pass ``timeout=`` seconds to wait for it.
    """

    def __init__(self, job_id: int, queue: str, key: str, state: str, message: str = ""):
        self.job_id = job_id
        self.queue = queue
        self.key = key
        self.state = state
        super().__init__(
            message
            or f"job {job_id} ({queue}/{key}) is {state}: it has not finished, so it has no "
            "result yet (pass timeout= to wait for it)"
        )


class ResultTimeout(ResultNotReady, TimeoutError):
    """``Ledger.result(..., timeout=)`` waited that long and the job has not finished."""

    def __init__(self, job_id: int, queue: str, key: str, state: str, timeout: float):
        self.timeout = timeout
        super().__init__(
            job_id,
            queue,
            key,
            state,
            f"job {job_id} ({queue}/{key}) is still {state} after waiting {timeout:g} s for "
            "its result",
        )


class InvalidTransition(JobledgerError):
    """The operation does not apply to the job in its current state."""


class LeaseLost(JobledgerError):
    """A heartbeat, completion or failure named a lease token that is no longer the job's.

    The lease expired and the job was rescued (and perhaps claimed by another worker), or an
    operator moved it. The write changed nothing.
    """

    def __init__(self, job_id: int, token: str, action: str = "write"):
        self.job_id = job_id
        self.token = token
        self.action = action
        super().__init__(
            f"lease lost on job {job_id}: {action} refused, token {token[:8]}… is no longer current"
        )


class LeadershipLost(JobledgerError):
    """A scheduler wrote under a leader lease that is no longer its own (expired, released, or
    taken over by another scheduler). The write changed nothing; the scheduler stops acting for
    that cohort until it holds the lease again."""

    def __init__(self, name: str, holder: str, action: str = "write"):
        self.name = name
        self.holder = holder
        self.action = action
        super().__init__(
            f"leadership of {name!r} lost by {holder}: {action} refused (the lease expired or "
            "another scheduler holds it)"
        )


class BackendUnavailable(JobledgerError):
    """The database could not be used: missing, locked, unreachable, or refusing credentials.

    The message names the URL with any password hidden.
    """


class SchemaMismatch(BackendUnavailable):
    """The database has no jobledger tables (run ``jobledger migrate``), or was migrated by a newer
    version of jobledger than this one."""


class BrokerUnavailable(JobledgerError):
    """A message broker could not be used: unreachable, refusing credentials, or refusing a
    publication. The relay and consumers retry with backoff; the ledger is not affected.

    The message names the broker URL with any password hidden.
    """


class HandlerOutcome(Exception):  # noqa: N818 - these are outcomes, not errors
    """Base of the exceptions a handler raises to choose its attempt's outcome."""


def _outcome_text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a text, got {value!r}")
    return value


def _retry_after(after: Any) -> float | datetime | None:
    """``Retry``'s ``after`` as the policy reads it: seconds (a negative number is now,
    infinity the latest time the ledger keeps), or an aware datetime. Anything else raises
    here, in the handler, where it fails the attempt like any other exception of the
    handler, instead of later, where the attempt's outcome could not be written."""
    if after is None:
        return None
    if isinstance(after, datetime):
        if after.tzinfo is None:
            raise ValueError(f"Retry(after={after!r}): pass an aware datetime (with a time zone)")
        return after
    if isinstance(after, timedelta):
        return after.total_seconds()
    if isinstance(after, str):
        seconds = parse_retry_after(after)
        if seconds is None:
            raise ValueError(
                f"Retry(after={after!r}): neither a number of seconds nor an HTTP date"
            )
        return seconds
    if isinstance(after, bool) or not isinstance(after, int | float) or math.isnan(after):
        raise TypeError(
            f"Retry(after={after!r}): pass seconds, a timedelta, an aware datetime or the "
            "text of a Retry-After header"
        )
    return after


class Retry(HandlerOutcome):
    """Run the job again later. ``after`` is a delay (seconds or a ``timedelta``), an aware
    datetime, or the text of an HTTP ``Retry-After`` header (seconds or an HTTP date); anything
    else is a ``TypeError`` or a ``ValueError`` where the ``Retry`` is made, which fails the
    attempt as any other exception of the handler does.

    Without ``after`` the task's backoff decides. The attempt still counts against the budget: a
    job that keeps asking to be retried ends up dead, like any other failure.

    ``scope="group"`` (with ``after``) pauses the job's whole group until then: no worker claims
    any of the group's jobs before that time (a downstream answered 429 with ``Retry-After``).
    A job without a group is retried alone.
    """

    def __init__(
        self,
        reason: str = "retry requested",
        *,
        after: float | timedelta | datetime | str | None = None,
        error_class: str | None = None,
        scope: Literal["job", "group"] = "job",
    ):
        if scope not in ("job", "group"):
            raise ValueError(f"scope must be 'job' or 'group', got {scope!r}")
        if scope == "group" and after is None:
            raise ValueError("Retry(scope='group') needs after=: how long to pause the group")
        self.reason = _outcome_text(reason, "Retry's reason")
        self.after = _retry_after(after)
        self.error_class = _outcome_text(error_class or "Retry", "Retry's error_class")
        self.scope = scope
        super().__init__(reason)


class Permanent(HandlerOutcome):  # noqa: N818
    """The job cannot succeed by being retried; it goes to dead at once with this reason."""

    def __init__(self, reason: str, *, error_class: str | None = None):
        self.reason = _outcome_text(reason, "Permanent's reason")
        self.error_class = _outcome_text(error_class or "Permanent", "Permanent's error_class")
        super().__init__(reason)


class SubscriptionExists(JobledgerError):
    """The queue already has a subscription (a queue has at most one); nothing was created."""

    def __init__(self, queue: str, existing_id: str):
        self.queue = queue
        self.existing_id = existing_id
        super().__init__(
            f"queue {queue!r} already has subscription {existing_id}; a queue has one "
            "subscription: delete it first, or change that one"
        )
