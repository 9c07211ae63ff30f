"""Checks on names and numbers that tasks and declared queues share. A leaf module: it imports
only the error types, so every layer (backends included) may use it."""

from __future__ import annotations

import re

from .errors import ConfigError

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_QUEUE",
    "MAX_LEASE_SECONDS",
    "validate_lease_seconds",
    "validate_max_attempts",
    "validate_queue_name",
    "validate_task_name",
]

_QUEUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
_TASK = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,199}$")

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 10
DEFAULT_LEASE_SECONDS = 60.0
MAX_LEASE_SECONDS = 7 * 24 * 3600.0


def validate_queue_name(queue: str) -> str:
    if not isinstance(queue, str) or not _QUEUE.match(queue):
        raise ConfigError(
            f"queue name {queue!r} is invalid: 1-128 characters, letters, digits and _ . : -, "
            "starting with a letter or digit"
        )
    return queue


def validate_max_attempts(value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 1000:
        raise ConfigError(f"max_attempts must be a whole number from 1 to 1000, got {value!r}")
    return value


def validate_lease_seconds(value: float) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= MAX_LEASE_SECONDS
    ):
        raise ConfigError(f"lease_seconds must be > 0 and at most 7 days, got {value!r}")
    return float(value)


def validate_task_name(name: str) -> str:
    if not isinstance(name, str) or not _TASK.match(name):
        raise ConfigError(
            f"task name {name!r} is invalid: 1-200 characters, letters, digits and _ . : -"
        )
    return name
