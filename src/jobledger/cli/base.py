"""The root command group, its subcommands (imported when used), and opening the ledger."""

from __future__ import annotations

import functools
import importlib
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click

from ..errors import ConfigError
from .params import options

if TYPE_CHECKING:
    from .._ledger import Ledger
    from .._records import JobRow

F = TypeVar("F", bound=Callable[..., Any])

# Each subcommand: the module that defines it and its line in `jobledger --help`. A command's
# module is imported only when that command runs (or its help is shown), so that a command pays
# for what it uses and `jobledger --help` for nothing (tests/cli/test_startup.py).
COMMANDS: dict[str, tuple[str, str]] = {
    "cancel": ("actions", "Withdraw one pending job so that it never runs."),
    "consume": ("brokers", "Run APP's task handlers for the messages of a broker."),
    "demo": ("demo", "The weekly digest story, end to end, with no setup."),
    "drill": ("drill", "Run the drills of SPEC §8 against the database."),
    "enqueue": ("actions", "Enqueue one job of TASK (by name)."),
    "groups": ("groups", "The groups (tenants) of a queue: their jobs, limits and pauses."),
    "history": ("history", "Histories of runs under faults (JSON lines) and their checker."),
    "jobs": ("views", "List jobs, filtered by queue, state, task, key, group, error, time."),
    "keys": ("keys", "API keys for the HTTP API: create (shown once), list, revoke."),
    "migrate": ("worker", "Create or upgrade the jobledger schema in the database."),
    "outbox": ("brokers", "Route queues to a broker, and see what the relay still owes it."),
    "prune": ("actions", "Delete finished jobs with their history, in batches."),
    "push": ("subscriptions", "Run the push delivery loop alone."),
    "queues": ("queues", "Declared queues: the settings of jobs published over HTTP."),
    "redrive": ("actions", "Put dead jobs back to pending with a fresh retry budget."),
    "relay": ("brokers", "Publish the ledger's outbox to a broker, in order."),
    "resolve": ("actions", "Repair one dead or pending job after checking the outside world."),
    "scheduler": ("schedules", "Run the schedules of APP without running jobs."),
    "schedules": ("schedules", "List the cron schedules, their next and last tick, and leaders."),
    "serve": ("serve", "Serve the HTTP API, the dashboard and /metrics."),
    "show": ("views", "Show one job and its history as a timeline."),
    "status": ("views", "Per queue: jobs by state, oldest due, late jobs, lease expiries."),
    "subscriptions": ("subscriptions", "Push subscriptions: a queue's jobs POSTed to a URL."),
    "worker": ("worker", "Run jobs of the tasks registered on APP."),
}


class _Group(click.Group):
    """The root group: its subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module = importlib.import_module(f"{__package__}.{COMMANDS[cmd_name][0]}")
            command = getattr(module, cmd_name.replace("-", "_"))
            command.short_help = COMMANDS[cmd_name][1]
            self.add_command(command, cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(
    cls=_Group,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    no_args_is_help=True,
)
@click.version_option(package_name="jobledger")
def cli() -> None:
    """jobledger: a durable job ledger on SQLite or PostgreSQL.

    Every command reads the database URL from --url, else JOBLEDGER_URL, else
    sqlite:///jobledger.db, and never creates a database or a schema: `jobledger migrate`
    does (or --migrate, where a command offers it). Read commands take --json for
    machine-readable output.
    """


def open_ledger(url: str | None, *, migrate: bool = False, listen_url: str | None = None) -> Ledger:
    """A ledger for an operator command, open now so that a bad URL fails before any output.
    It creates no database file and no schema, so that a mistyped URL is an error (naming what
    is missing and `jobledger migrate`) instead of an empty ledger; with ``migrate``
    (``--migrate``), the schema is created or upgraded first."""
    from .._ledger import Ledger

    ledger = Ledger(url, auto_migrate=migrate, create=migrate)
    ledger.use_listen_url(listen_url)
    _close_with_the_command(ledger)
    return ledger.open()


def _close_with_the_command(ledger: Ledger) -> None:
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.call_on_close(ledger.close)


def load_app(
    spec: str, url: str | None = None, *, migrate: bool = False, listen_url: str | None = None
) -> Ledger:
    """Import ``module:attribute`` and return the Ledger it names, open (the working directory
    is on the import path, like ``python -m``). Unless ``migrate``, a missing database or schema
    is an error, as for every command; with it, the schema is created or upgraded first."""
    from .._ledger import Ledger

    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigError(f"expected MODULE:LEDGER (e.g. myapp.jobs:ledger), got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise ConfigError(f"cannot import {module_name!r}: {exc}") from None
        raise ConfigError(_failure(f"importing {module_name}", exc)) from exc
    except Exception as exc:  # noqa: BLE001 - the app's own error, reported where it happened
        raise ConfigError(_failure(f"importing {module_name}", exc)) from exc
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigError(f"module {module_name!r} has no attribute {attribute!r}") from None
    if callable(target) and not isinstance(target, Ledger):
        try:
            target = target()
        except Exception as exc:  # noqa: BLE001
            raise ConfigError(_failure(f"calling {spec}", exc)) from exc
    if not isinstance(target, Ledger):
        raise ConfigError(f"{spec!r} is a {type(target).__name__}, not a jobledger.Ledger")
    if url:
        target.use_url(url)
    target.use_listen_url(listen_url)
    target.auto_migrate = target.create = migrate
    _close_with_the_command(target)
    return target.open()


def _failure(doing: str, exc: BaseException) -> str:
    """``importing app failed: KeyError: 'X' (app.py:3)``: the exception and where in the
    app's code it was raised (the innermost frame outside Python's and jobledger's own)."""
    if os.environ.get("JOBLEDGER_DEBUG"):
        traceback.print_exception(exc)
    where = ""
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f" ({_relative(exc.filename)}:{exc.lineno})"
    else:
        frames = traceback.extract_tb(exc.__traceback__)
        own = [f for f in frames if _is_app_file(f.filename)]
        if own or frames:
            frame = (own or frames)[-1]
            where = f" ({_relative(frame.filename)}:{frame.lineno})"
    text = exc.msg if isinstance(exc, SyntaxError) else str(exc) or "(no message)"
    return f"{doing} failed: {type(exc).__name__}: {text}{where}"


def _is_app_file(filename: str) -> bool:
    if filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    library = [os.path.dirname(os.__file__), os.path.dirname(os.path.dirname(__file__))]
    return not any(path.startswith(root + os.sep) for root in library) and (
        "site-packages" not in path.split(os.sep)
    )


def _relative(filename: str) -> str:
    path = os.path.abspath(filename)
    cwd = os.getcwd()
    return os.path.relpath(path, cwd) if path.startswith(cwd + os.sep) else path


@dataclass(frozen=True)
class JobRef:
    """The job a command names: a bare ``JOB`` (a key, or an id when it is digits), ``--id N``
    or ``--key K``, and ``--queue`` for a key in several queues."""

    ref: str | None = None
    job_id: int | None = None
    key: str | None = None
    queue: str | None = None

    @property
    def given(self) -> bool:
        return any(v is not None for v in (self.ref, self.job_id, self.key))

    def find(self, ledger: Ledger) -> JobRow:
        """The job. A bare reference that is one job's id and another job's key is refused,
        naming both."""
        ref, job_id, key, queue = self.ref, self.job_id, self.key, self.queue
        given = [n for n, v in (("JOB", ref), ("--id", job_id), ("--key", key)) if v is not None]
        if len(given) != 1:
            raise click.UsageError(
                "name the job by JOB (a key or an id), --id N or --key K: "
                + ("not both" if given else "none given")
            )
        if job_id is not None:
            return ledger.job(job_id)
        if key is not None:
            return ledger.job_by_key(key, queue)
        assert ref is not None
        if not ref.isdigit():
            return ledger.job_by_key(ref, queue)
        from ..errors import NotFound

        try:
            by_key = ledger.job_by_key(ref, queue)
        except NotFound as no_key:
            try:
                return ledger.job(int(ref))
            except NotFound:
                raise NotFound(f"no job with id {ref}, and {no_key}") from None
        try:
            by_id = ledger.job(int(ref))
        except NotFound:
            return by_key
        if by_id.id == by_key.id:
            return by_key
        raise ConfigError(
            f"{ref} names two jobs: job {by_id.id} ({by_id.queue}/{by_id.key}) by its id, and "
            f"job {by_key.id} ({by_key.queue}/{by_key.key}) by its key; say which with --id "
            f"{ref} or --key {ref}"
        )


def job_option(fn: F) -> F:
    """``JOB``, ``--id N``, ``--key K``, ``--queue Q``: the command gets ``job: JobRef``."""

    @functools.wraps(fn)
    def command(*args: Any, job: Any, job_id: Any, job_key: Any, queue: Any, **kw: Any) -> Any:
        return fn(*args, job=JobRef(job, job_id, job_key, queue), **kw)

    return cast(F, _job_params(many=False)(command))


def jobs_option(fn: F) -> F:
    """``JOBS…`` and repeatable ``--id`` / ``--key``: the command gets ``jobs: list[JobRef]``
    (its ``--queue`` is a filter of its own, and applies to the keys)."""

    @functools.wraps(fn)
    def command(*args: Any, jobs: Any, job_id: Any, job_key: Any, **kw: Any) -> Any:
        refs = [JobRef(ref=r) for r in jobs] + [JobRef(job_id=i) for i in job_id]
        return fn(*args, jobs=refs + [JobRef(key=k) for k in job_key], **kw)

    return cast(F, _job_params(many=True)(command))


def _job_params(many: bool) -> Callable[[F], F]:
    return options(
        click.argument("jobs" if many else "job", nargs=-1 if many else 1, required=False),
        click.option(
            "--id",
            "job_id",
            type=click.IntRange(1),
            multiple=many,
            help="The job with this id" + (" (repeatable)." if many else "."),
        ),
        click.option(
            "--key",
            "job_key",
            multiple=many,
            help="The job with this key" + (" (repeatable)." if many else "."),
        ),
        *(
            []
            if many
            else [
                click.option(
                    "--queue", "-q", help="The job's queue, when its key exists in several."
                )
            ]
        ),
    )
