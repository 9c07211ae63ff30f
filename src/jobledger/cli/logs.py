"""Logging for CLI processes: ``--log-level`` and ``--log-format json|console``.

Commands that run for a long time (worker, serve, scheduler, push) take both options through
``log_options`` and call ``setup_logging`` first thing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

from ..observability.logs import LOG_FORMATS, configure_logging

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["announce", "log_format_option", "setup_logging"]


def setup_logging(level: str = "info", fmt: str | None = "console") -> None:
    configure_logging(level, fmt)


def log_format_option(fn: F) -> F:
    """``--log-format json|console`` (default console, or ``JOBLEDGER_LOG_FORMAT``)."""
    return click.option(
        "--log-format",
        type=click.Choice(LOG_FORMATS),
        envvar="JOBLEDGER_LOG_FORMAT",
        default="console",
        show_default=True,
        show_envvar=True,
        help="json: one JSON object per line (every attempt outcome with job id, key, queue, "
        "task, attempt, outcome, duration, error class, correlation id); console: readable lines.",
    )(fn)


def announce(message: str, fmt: str | None, logger: str = "jobledger", **fields: Any) -> None:
    """A line on stderr whatever the log level (where a server listens, what a worker did):
    plain, or with ``--log-format json`` a JSON object like every other line."""
    if fmt == "json":
        message = json.dumps(
            {
                "ts": datetime.now(UTC).isoformat(timespec="microseconds"),
                "level": "info",
                "logger": logger,
                "message": message,
                **fields,
            },
            separators=(",", ":"),
        )
    click.echo(message, err=True)
