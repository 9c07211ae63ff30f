"""The root command group and the options every subcommand shares."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from .._ledger import DEFAULT_URL, Ledger
from ..errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.commands)


@click.group(
    cls=_Group,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    no_args_is_help=True,
)
@click.version_option(package_name="jobledger")
def cli() -> None:
    """jobledger: a durable job ledger on SQLite or PostgreSQL.

    Every command reads the database URL from --url, else JOBLEDGER_URL, else
    sqlite:///jobledger.db. Read commands take --json for machine-readable output.
    """


def url_option(fn: F) -> F:
    return click.option(
        "--url",
        envvar="JOBLEDGER_URL",
        default=DEFAULT_URL,
        show_default=True,
        show_envvar=True,
        help="Database URL: sqlite:///path or postgresql://user@host/db.",
    )(fn)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(
        fn
    )


def open_ledger(url: str, *, write: bool = False) -> Ledger:
    """A ledger for an operator command. Read commands never create a database or a schema, so
    that a mistyped URL is an error instead of an empty ledger."""
    ledger = Ledger(url, auto_migrate=False, create=write)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.call_on_close(ledger.close)
    ledger.backend  # noqa: B018 - connect now, so a bad URL fails before any output
    return ledger


def load_app(spec: str, url: str | None = None) -> Ledger:
    """Import ``module:attribute`` and return the Ledger it names (the working directory is on
    the import path, like ``python -m``)."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigError(f"expected MODULE:LEDGER (e.g. myapp.jobs:ledger), got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name!r}: {exc}") from None
    target = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigError(f"module {module_name!r} has no attribute {attribute!r}") from None
    if callable(target) and not isinstance(target, Ledger):
        target = target()
    if not isinstance(target, Ledger):
        raise ConfigError(f"{spec!r} is a {type(target).__name__}, not a jobledger.Ledger")
    if url:
        target.use_url(url)
    return target


def split_csv(values: tuple[str, ...]) -> list[str]:
    """``-q a,b -q c`` → ``["a", "b", "c"]``."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]
