"""Option types and output helpers shared by the operator commands.

Durations (``30d``, ``1h30m``, ``45s``, ``2w``; a bare number is seconds), points in time (ISO 8601,
or a duration meaning "that long ago"), JSON objects, and the two ways of printing: a rich table
for people, ``--json`` for programs.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import click
from rich.console import Console

from ..errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])

_UNITS = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)([wdhms]))+$")
_PART = re.compile(r"(\d+(?:\.\d+)?)([wdhms])")


def parse_duration(text: str) -> timedelta:
    """``"30d"`` → 30 days. Units: w, d, h, m, s, combinable (``1h30m``); a bare number is
    seconds. Raises ``ConfigError`` with the accepted forms."""
    value = text.strip().lower()
    try:
        seconds = float(value)
    except ValueError:
        if not _DURATION.match(value):
            raise ConfigError(
                f"{text!r} is not a duration; write e.g. 30d, 12h, 1h30m, 45s or 2w"
            ) from None
        seconds = sum(float(n) * _UNITS[unit] for n, unit in _PART.findall(value))
    if not seconds >= 0 or seconds == float("inf"):
        raise ConfigError(f"{text!r} is not a duration >= 0")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ConfigError(f"{text!r} is longer than any duration jobledger can use") from None


def format_duration(seconds: float | None) -> str:
    """``3725`` → ``1h2m``: short, for tables."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        n, seconds = divmod(seconds, size)
        if n:
            parts.append(f"{int(n)}{unit}")
        if len(parts) == 2:
            break
    return "".join(parts)


def format_time(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


class Duration(click.ParamType):  # type: ignore[type-arg]
    """A duration option: ``30d``, ``12h``, ``1h30m``, ``45s``, ``2w`` or seconds."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, timedelta):
            return value
        try:
            return parse_duration(str(value))
        except ConfigError as exc:
            self.fail(str(exc), param, ctx)


def iso_time(text: str) -> datetime | None:
    """An ISO 8601 time (``Z`` accepted), UTC when it has no offset; None when it is not one."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


class When(click.ParamType):  # type: ignore[type-arg]
    """A point in time: ISO 8601 (UTC when it has no offset), ``now``, or a duration meaning
    that long ago (``2h`` = two hours ago)."""

    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, datetime):
            return value
        text = str(value).strip()
        if text.lower() == "now":
            return datetime.now(UTC)
        try:
            return datetime.now(UTC) - parse_duration(text)
        except ConfigError:
            pass
        when = iso_time(text)
        if when is None:
            self.fail(
                f"{text!r} is not a time; write an ISO 8601 time (2026-08-10T06:00:00Z), "
                "'now', or a duration meaning that long ago (2h, 3d)",
                param,
                ctx,
            )
        return when


class JsonObject(click.ParamType):  # type: ignore[type-arg]
    """A JSON object given on the command line, e.g. ``'{"customer_id": 4187}'``."""

    name = "json"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, dict):
            return value
        try:
            parsed = json.loads(value, parse_constant=_no_constant)
        except ValueError as exc:
            self.fail(f"not valid JSON ({exc}): {str(value)[:80]!r}", param, ctx)
        if not isinstance(parsed, dict):
            self.fail(
                f"must be a JSON object such as '{{\"customer_id\": 4187}}', "
                f"got {type(parsed).__name__}",
                param,
                ctx,
            )
        return parsed


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


DURATION = Duration()
WHEN = When()
JSON_OBJECT = JsonObject()


def default_actor() -> str:
    """Who is acting: ``JOBLEDGER_ACTOR``, else the login name."""
    actor = os.environ.get("JOBLEDGER_ACTOR")
    if actor:
        return actor
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def actor_option(fn: F) -> F:
    return click.option(
        "--actor",
        default=default_actor,
        show_default="JOBLEDGER_ACTOR, else your login name",
        help="Who is acting; recorded in the job's history.",
    )(fn)


def queue_option(fn: F) -> F:
    return click.option(
        "--queue", "-q", default=None, help="The job's queue, when its key exists in several."
    )(fn)


def console() -> Console:
    """A console on the current stdout; wide when it is not a terminal, so tables survive pipes."""
    width = None if sys.stdout.isatty() else max(160, shutil.get_terminal_size().columns)
    return Console(highlight=False, width=width, soft_wrap=False)


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=_json_default, ensure_ascii=False))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if hasattr(value, "value"):  # enums
        return value.value
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
