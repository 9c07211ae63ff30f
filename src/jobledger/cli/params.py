"""Option types, the options several commands share, and the ways of printing.

Durations (``30d``, ``1h30m``, ``45s``, ``2w``; a bare number is seconds), points in time (ISO 8601,
or a duration meaning "that long ago"), JSON objects; the options that several commands take
(``--url``, ``--json``, ``--actor``, a job by KEY, ``--id`` or ``--key``, the log and worker
options); and output: tables for people (plain aligned columns when stdout is not a terminal, so
that ``| grep`` and ``| cat`` see one row per line, whole), ``--json`` for programs.

This module imports only click: ``rich`` is imported when a table goes to a terminal.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import socket
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..errors import ConfigError

if TYPE_CHECKING:
    from rich.console import Console

F = TypeVar("F", bound=Callable[..., Any])

#: The database a command uses without --url or JOBLEDGER_URL (``Ledger()``'s default too).
DEFAULT_URL = "sqlite:///jobledger.db"
#: Set to 1, a command left without --url and JOBLEDGER_URL refuses DEFAULT_URL.
REQUIRE_URL_ENV = "JOBLEDGER_REQUIRE_URL"

_UNITS = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)([wdhms]))+$")
_PART = re.compile(r"(\d+(?:\.\d+)?)([wdhms])")


# -- values ------------------------------------------------------------------------------------


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
    """A time in UTC to the second, ``-`` for none."""
    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def iso_time(text: str) -> datetime | None:
    """An ISO 8601 time (``Z`` accepted), UTC when it has no offset; None when it is not one."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


class _Type(click.ParamType):  # type: ignore[type-arg]
    """A parameter type whose ``parse`` raises ``ConfigError``; a value of ``kind`` passes."""

    kind: type | tuple[type, ...] = ()

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, self.kind):
            return value
        try:
            return self.parse(str(value))
        except ConfigError as exc:
            self.fail(str(exc), param, ctx)

    def parse(self, text: str) -> Any:
        raise NotImplementedError


class Duration(_Type):
    """A duration option: ``30d``, ``12h``, ``1h30m``, ``45s``, ``2w`` or seconds."""

    name = "duration"
    kind = timedelta

    def parse(self, text: str) -> timedelta:
        return parse_duration(text)


class When(_Type):
    """A point in time: ISO 8601 (UTC when it has no offset), ``now``, or a duration meaning
    that long ago (``2h`` = two hours ago)."""

    name = "time"
    kind = datetime

    def parse(self, text: str) -> datetime:
        text = text.strip()
        if text.lower() == "now":
            return datetime.now(UTC)
        from .._records import time_after  # the records only once a command reads a time

        try:
            # That long ago; longer ago than any time a datetime holds: the earliest one.
            return time_after(datetime.now(UTC), -parse_duration(text).total_seconds())
        except ConfigError:
            pass
        when = iso_time(text)
        if when is None:
            raise ConfigError(
                f"{text!r} is not a time; write an ISO 8601 time (2026-08-10T06:00:00Z), "
                "'now', or a duration meaning that long ago (2h, 3d)"
            )
        return when


class JsonObject(_Type):
    """A JSON object given on the command line, e.g. ``'{"customer_id": 4187}'``."""

    name = "json"
    kind = dict

    def parse(self, text: str) -> dict[str, Any]:
        from .._records import decode_json  # the records only once a command reads JSON

        try:
            parsed = decode_json(text)
        except ValueError as exc:
            raise ConfigError(f"not valid JSON ({exc}): {text[:80]!r}") from None
        if not isinstance(parsed, dict):
            raise ConfigError(
                "must be a JSON object such as '{\"customer_id\": 4187}', "
                f"got {type(parsed).__name__}"
            )
        return parsed


DURATION = Duration()
WHEN = When()
JSON_OBJECT = JsonObject()


def split_csv(values: Iterable[str]) -> list[str]:
    """``-q a,b -q c`` → ``["a", "b", "c"]``."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def default_actor() -> str:
    """Who is acting: ``JOBLEDGER_ACTOR``, else ``login@host``."""
    actor = os.environ.get("JOBLEDGER_ACTOR")
    if actor:
        return actor
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


# -- options several commands share --------------------------------------------------------------


def options(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    """Several option decorators as one, applied in the order given (first is topmost)."""

    def apply(fn: F) -> F:
        for decorator in reversed(decorators):
            fn = decorator(fn)
        return fn

    return apply


def setting(name: str, kind: Any, default: Any, *, help: str) -> Callable[[F], F]:  # noqa: A002
    """An option of type ``kind`` (a range of numbers, a duration, a choice…) whose
    ``default`` ``--help`` shows: how a command writes what it can be tuned by."""
    return click.option(name, type=kind, default=default, show_default=True, help=help)


def database_url(note: str) -> Callable[[F], F]:
    """``--url``, from ``JOBLEDGER_URL``, else the default; ``note`` says what becomes of a
    database that does not exist."""
    return click.option(
        "--url",
        envvar="JOBLEDGER_URL",
        default=DEFAULT_URL,
        show_default=True,
        show_envvar=True,
        callback=_refuse_default_url,
        help=f"Database URL: sqlite:///path or postgresql://user@host/db. {note} "
        f"{REQUIRE_URL_ENV}=1 refuses the default: a URL must then be given.",
    )


def _refuse_default_url(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """The default URL, unless the deployment forbids it (as ``Ledger()`` does)."""
    source = ctx.get_parameter_source(param.name or "url")
    if source is click.core.ParameterSource.DEFAULT and os.environ.get(REQUIRE_URL_ENV):
        from .._ledger import refuse_default_url

        refuse_default_url()
    return value


url_option = database_url("Never created: `jobledger migrate` creates it.")

app_url_option = click.option(
    "--url",
    envvar="JOBLEDGER_URL",
    default=None,
    help="Override the app's database URL (default: JOBLEDGER_URL, else the app's own).",
)

listen_url_option = click.option(
    "--listen-url",
    envvar="JOBLEDGER_LISTEN_URL",
    default=None,
    show_envvar=True,
    help="PostgreSQL: where LISTEN sessions connect, when --url goes through a pooler in "
    "transaction mode (?pooler=transaction): a direct URL of the same database. Without it "
    "such a ledger polls for new jobs (docs/deployment.md).",
)

migrate_option = click.option(
    "--migrate",
    is_flag=True,
    help="Create or upgrade the schema first, as `jobledger migrate` would (by default a "
    "missing database or schema is an error, so that a mistyped URL makes no new ledger).",
)


def json_flag(help: str = "Print JSON instead of a table.") -> Callable[[F], F]:  # noqa: A002
    """``--json`` with its help text."""
    return click.option("--json", "as_json", is_flag=True, help=help)


json_option = json_flag()


def recorded_actor(what: str) -> Callable[[F], F]:
    """``--actor``: who is acting, recorded in ``what``."""
    return click.option(
        "--actor",
        default=default_actor,
        show_default="JOBLEDGER_ACTOR, else login@host",
        help=f"Who is acting; recorded in {what}.",
    )


actor_option = recorded_actor("the job's history")


def logging_options(formats: bool = True) -> Callable[[F], F]:
    """``--log-level`` and (with ``formats``) ``--log-format json|console``."""
    level = setting(
        "--log-level",
        click.Choice(["debug", "info", "warning", "error"]),
        "info",
        help="Least severe log messages shown.",
    )
    # The formats of jobledger.observability.logs.LOG_FORMATS (a test checks it), written here
    # so that a command's options cost no import.
    fmt = click.option(
        "--log-format",
        type=click.Choice(["console", "json"]),
        envvar="JOBLEDGER_LOG_FORMAT",
        default="console",
        show_default=True,
        show_envvar=True,
        help="json: one JSON object per line (every attempt outcome with job id, key, queue, "
        "task, attempt, outcome, duration, error class, correlation id); console: readable "
        "lines.",
    )
    return options(level, fmt) if formats else level


log_options = logging_options()
log_level_option = logging_options(formats=False)

queues_option = click.option(
    "-q",
    "--queues",
    multiple=True,
    help="Queues to work on (comma-separated or repeated). Default: every queue of the app's "
    "tasks.",
)


def concurrency(held: str = "") -> Callable[[F], F]:
    return click.option(
        "-c",
        "--concurrency",
        type=click.IntRange(1, 1000),
        default=4,
        show_default=True,
        help=f"Jobs run at once{held}.",
    )


concurrency_option = concurrency()

grace_option = setting(
    "--grace",
    click.FloatRange(0),
    30.0,
    help="Seconds running jobs get to finish after SIGTERM/SIGINT.",
)


def poll_interval(help: str) -> Callable[[F], F]:  # noqa: A002
    """``--poll-interval``: the longest pause between looks when idle (None: the default the
    help names)."""
    return click.option("--poll-interval", type=click.FloatRange(0.001), default=None, help=help)


rescue_interval_option = click.option(
    "--rescue-interval",
    type=click.FloatRange(0.01),
    default=None,
    help="Seconds between scans for expired leases.",
)


def no_scheduler(what: str) -> Callable[[F], F]:
    return click.option(
        "--no-scheduler",
        is_flag=True,
        help=f"Do not run the app's schedules in this {what} (by default it takes part in "
        "scheduling: it ticks them while it holds the leader lease).",
    )


def metrics_options(what: str) -> Callable[[F], F]:
    """``--metrics-port`` and ``--metrics-host``: Prometheus metrics of ``what``."""
    return options(
        click.option(
            "--metrics-port",
            type=click.IntRange(0, 65535),
            default=None,
            help=f"Serve Prometheus metrics ({what}, and the ledger's gauges) on this port at "
            "/metrics; 0 picks a free port (the log says which).",
        ),
        click.option(
            "--metrics-host",
            default="127.0.0.1",
            show_default=True,
            help="Address the metrics port listens on (0.0.0.0 for every interface).",
        ),
    )


def rate_options(rate: str, burst: str, *, prefix: str = "") -> Callable[[F], F]:
    """``--rate`` (per second, > 0) and ``--burst`` (>= 1), or ``--PREFIX-rate``…"""
    return options(
        click.option(f"--{prefix}rate", type=click.FloatRange(min=0.001), default=None, help=rate),
        click.option(f"--{prefix}burst", type=click.FloatRange(min=1), default=None, help=burst),
    )


def exclusive(**given: Any) -> None:
    """Refuse options that say contradictory things: at most one of ``given`` may be set
    (not None, not False, not empty). The names are the options' (``--done``…)."""
    named = [name for name, v in given.items() if v is not None and v is not False and v != ()]
    if len(named) > 1:
        raise click.UsageError(
            f"{' and '.join(named)} contradict each other: give one of them, not both"
        )


# -- output ------------------------------------------------------------------------------------


def console() -> Console:
    """A rich console on the current stdout (for a terminal; see ``table``)."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


def to_terminal() -> bool:
    return sys.stdout.isatty()


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


Cell = str | tuple[str, str]
"""A table cell: its text, or ``(text, style)`` with a rich style for terminals."""


def table(
    columns: Sequence[str],
    rows: Iterable[Sequence[Cell]],
    *,
    title: str | None = None,
    right: Iterable[str] = (),
    empty: str | None = None,
) -> None:
    """Print a table. On a terminal: a rich table (styles, wrapping to the width). Elsewhere
    (a pipe, a file): the title, then the header and one line per row, columns aligned by
    spaces, nothing cut, no box drawing, so that ``| grep`` keeps whole rows. ``right``: the
    columns aligned right. ``empty``: printed instead when there are no rows."""
    rows = [list(r) for r in rows]
    if not rows and empty is not None:
        click.echo(empty)
        return
    right = set(right)
    if to_terminal():
        from rich.table import Table
        from rich.text import Text

        t = Table(title=title, title_justify="left")
        for name in columns:
            t.add_column(name, justify="right" if name in right else "left")
        for row in rows:
            t.add_row(*(Text(c) if isinstance(c, str) else Text(c[0], style=c[1]) for c in row))
        console().print(t)
        return
    if title:
        click.echo(title)
    lines = [list(columns)] + [[_plain(c) for c in row] for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns))]
    for line in lines:
        cells = [
            cell.rjust(w) if name in right else cell.ljust(w)
            for cell, w, name in zip(line, widths, columns, strict=True)
        ]
        click.echo("  ".join(cells).rstrip())


def listing(
    records: Sequence[Any],
    as_json: bool,
    as_dict: Callable[[Any], Any],
    columns: Sequence[str],
    as_row: Callable[[Any], Sequence[Cell]],
    **how: Any,
) -> None:
    """Print ``records``: with ``as_json`` a JSON list (``as_dict`` of each), else a ``table``
    (``as_row`` of each; ``how``: its title, right-aligned columns, text when empty)."""
    if as_json:
        echo_json([as_dict(r) for r in records])
        return
    table(columns, [as_row(r) for r in records], **how)


def _plain(cell: Cell) -> str:
    text = cell if isinstance(cell, str) else cell[0]
    return " ".join(text.split("\n"))
