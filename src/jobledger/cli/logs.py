"""Logging for CLI processes that run for a long time (worker, serve, scheduler, push, relay,
consume): they take ``params.log_options`` and call ``setup_logging`` first thing."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click

from ..observability.logs import configure_logging

__all__ = ["announce", "setup_logging"]


def setup_logging(level: str = "info", fmt: str | None = "console") -> None:
    configure_logging(level, fmt)


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
