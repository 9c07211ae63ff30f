"""Declared queues: the settings that jobs published over HTTP are given.

A queue is declared explicitly (``PUT /v1/queues/{name}``, ``jobledger queues create``) before
anything can be published to it over HTTP. Its settings are copied into each job at publish time
(``max_attempts``, ``lease_seconds``, the ``task`` name), or used when a consumer reports a
failure (``backoff``), so changing them affects later jobs and later failures, never the history.

Jobs enqueued from Python with ``@ledger.task`` keep using their task's own settings: a queue's
declaration governs what arrives through the HTTP API. See docs/http-api.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..errors import ConfigError
from ..policy import Backoff
from .checks import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_MAX_ATTEMPTS,
    validate_lease_seconds,
    validate_max_attempts,
    validate_queue_name,
    validate_task_name,
    validate_timeout_seconds,
)

__all__ = [
    "DAY",
    "DEFAULT_RETENTION_SECONDS",
    "MAX_BACKOFF_SECONDS",
    "MAX_RETENTION_SECONDS",
    "MIN_LEASE_SECONDS",
    "MIN_RETENTION_SECONDS",
    "QueueInfo",
    "QueueSettings",
]

DAY = 86400.0
#: A published job is kept (and its Idempotency-Key replayed) at least this long.
MIN_RETENTION_SECONDS = DAY
DEFAULT_RETENTION_SECONDS = 30 * DAY
MAX_RETENTION_SECONDS = 3650 * DAY
MAX_BACKOFF_SECONDS = 7 * DAY
#: The shortest lease a consumer may ask for (receive, extend) or a queue may give its
#: consumers over HTTP or the CLI: a lease must outlive the round trip of its receive and its
#: ack, or every delivery expires before it can be acked and only burns the message's attempts
#: (see docs/http-api.md).
MIN_LEASE_SECONDS = 1.0


def _seconds(value: Any, what: str, low: float, high: float, *, inclusive_low: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{what} must be a number of seconds, got {value!r}")
    ok_low = value >= low if inclusive_low else value > low
    if not ok_low or value > high:
        bound = ">=" if inclusive_low else ">"
        raise ConfigError(f"{what} must be {bound} {low:g} and <= {high:g} seconds, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """How the jobs published to one queue over HTTP are run and kept. Validated when built.

    - ``task``: the task name stored in each published job, so that a Python worker with a task
      of that name can run them (default: the queue's name). Pull consumers ignore it.
    - ``max_attempts``: the retry budget of each job (default 10).
    - ``lease_seconds``: how long a received message stays leased unless extended (default 60).
    - ``backoff_base`` / ``backoff_cap``: the delay after a failure reported without
      ``retry_after_seconds`` (exponential with full jitter, as for Python tasks).
    - ``retention_seconds``: how long finished jobs are kept, and so how long an
      Idempotency-Key is replayed (at least 24 hours, default 30 days).
    - ``require_key``: refuse publishes without an ``Idempotency-Key`` header.
    - ``timeout_seconds``: the longest an attempt of the queue's jobs may run in a Python worker
      (None: no bound) — for tasks that set no ``timeout`` of their own, and for the jobs
      published over HTTP; an attempt past it is closed as ``timed_out`` (docs/concepts.md).
    """

    name: str
    task: str = ""
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    backoff_base: float = 2.0
    backoff_cap: float = 3600.0
    retention_seconds: float = DEFAULT_RETENTION_SECONDS
    require_key: bool = False
    timeout_seconds: float | None = None

    def __post_init__(self) -> None:
        validate_queue_name(self.name)
        if not self.task or self.task == self.name:
            # The default: jobs carry the queue's name as their task, whatever the name is.
            object.__setattr__(self, "task", self.name)
        else:
            validate_task_name(self.task)
        validate_max_attempts(self.max_attempts)
        object.__setattr__(self, "lease_seconds", validate_lease_seconds(self.lease_seconds))
        base = _seconds(
            self.backoff_base, "backoff_base", 0, MAX_BACKOFF_SECONDS, inclusive_low=False
        )
        cap = _seconds(
            self.backoff_cap, "backoff_cap", base, MAX_BACKOFF_SECONDS, inclusive_low=True
        )
        object.__setattr__(self, "backoff_base", base)
        object.__setattr__(self, "backoff_cap", cap)
        object.__setattr__(
            self,
            "retention_seconds",
            _seconds(
                self.retention_seconds,
                "retention_seconds",
                MIN_RETENTION_SECONDS,
                MAX_RETENTION_SECONDS,
                inclusive_low=True,
            ),
        )
        if not isinstance(self.require_key, bool):
            raise ConfigError(f"require_key must be true or false, got {self.require_key!r}")
        object.__setattr__(self, "timeout_seconds", validate_timeout_seconds(self.timeout_seconds))

    @property
    def backoff(self) -> Backoff:
        """The backoff applied when a consumer nacks without ``retry_after_seconds``."""
        return Backoff(base=self.backoff_base, cap=self.backoff_cap)


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A declared queue as stored: its settings and when they were set."""

    settings: QueueSettings
    created_at: datetime
    updated_at: datetime

    @property
    def name(self) -> str:
        return self.settings.name

    def as_dict(
        self, time: Callable[[datetime], str | None] = datetime.isoformat
    ) -> dict[str, Any]:
        """The queue as JSON (the HTTP API's and ``jobledger queues --json``), its times
        written by ``time``."""
        s = self.settings
        return {
            "name": s.name,
            "task": s.task,
            "max_attempts": s.max_attempts,
            "lease_seconds": s.lease_seconds,
            "backoff": {"base_seconds": s.backoff_base, "cap_seconds": s.backoff_cap},
            "retention_seconds": s.retention_seconds,
            "require_idempotency_key": s.require_key,
            "timeout_seconds": s.timeout_seconds,
            "created_at": time(self.created_at),
            "updated_at": time(self.updated_at),
        }
