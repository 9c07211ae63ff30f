"""Logging for CLI processes: ``--log-level`` and ``--log-format json|console``.

Commands that run for a long time (worker, serve, scheduler, push) take both options through
``log_options`` and call ``setup_logging`` first thing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..observability.logs import LOG_FORMATS, configure_logging

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["log_format_option", "setup_logging"]


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
