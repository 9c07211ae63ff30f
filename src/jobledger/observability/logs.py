"""Structured logs: one JSON object per line for machines, readable lines for a terminal.

``configure_logging(level, "json")`` makes every log record of the process one JSON line on
stderr: ``ts`` (UTC, RFC 3339 with microseconds), ``level``, ``logger``, ``message``, the
record's ``extra`` fields as they are (the worker gives each attempt outcome ``job_id``,
``key``, ``queue``, ``task``, ``attempt``, ``outcome``, ``duration``, ``error_class``,
``correlation_id`` and ``worker``), and ``exc`` with the traceback when there is one.
``"console"`` gives the same records as plain lines, with the correlation id appended.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

__all__ = ["LOG_FORMATS", "ConsoleFormatter", "JsonFormatter", "configure_logging"]

LOG_FORMATS = ("console", "json")

#: Attributes every LogRecord has; anything else on a record came from ``extra``.
_STANDARD = frozenset(
    vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None)).keys()
    | {"message", "asctime", "taskName"}
)


def record_extras(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a record was given through ``extra=``."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    return str(value)


class JsonFormatter(logging.Formatter):
    """A log record as one line of JSON. Never raises: a value JSON cannot hold is written as
    its ``str``."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="microseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        args = record.args
        if record.name == "uvicorn.access" and isinstance(args, tuple) and len(args) == 5:
            # uvicorn's access line: (client, method, path, http version, status).
            entry.update(client=str(args[0]), method=args[1], path=args[2], status=args[4])
        for key, value in record_extras(record).items():
            if key not in entry:
                entry[key] = _plain(value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc"] = record.exc_text
        if record.stack_info:
            entry["stack"] = record.stack_info
        return json.dumps(entry, ensure_ascii=False, separators=(",", ":"), default=str)


class ConsoleFormatter(logging.Formatter):
    """``2026-08-10 06:00:01,234 INFO    jobledger.worker: job 42 digests/4187:2026-W33 attempt 1:
    done  [correlation_id=…]`` — the correlation id, when a record carries one, at the end."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        correlation = getattr(record, "correlation_id", None)
        if correlation:
            first, sep, rest = line.partition("\n")
            line = f"{first}  [correlation_id={correlation}]{sep}{rest}"
        return line


def configure_logging(
    level: str = "info", fmt: str | None = None, stream: TextIO | None = None
) -> logging.Handler:
    """Send every log record of this process to ``stream`` (stderr) in ``fmt``: ``console``
    (default; ``JOBLEDGER_LOG_FORMAT`` may say otherwise) or ``json``. Replaces the root
    logger's handlers, so uvicorn's loggers and the application's own go the same way."""
    fmt = (fmt or os.environ.get("JOBLEDGER_LOG_FORMAT") or "console").lower()
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else ConsoleFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    return handler
