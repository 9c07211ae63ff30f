"""Start-up stays quick (issue 16, item 12): what ``import jobledger``, ``jobledger --help`` and
``jobledger status`` import. Checked by module, not by milliseconds, so that a loaded machine
cannot fail it; the figures are in docs/operations.md ("Start-up time")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta

import click
import pytest

from jobledger.cli import base, params

from ..support.processes import ROOT

# Never imported by a command that does not need them: the event loop, the web stack, the broker
# and metrics clients, the worker runtime, the PostgreSQL driver for a SQLite ledger.
HEAVY = [
    "asyncio",
    "starlette",
    "uvicorn",
    "httpx",
    "jinja2",
    "aio_pika",
    "aiormq",
    "nats",
    "redis",
    "prometheus_client",
    "standardwebhooks",
    "psycopg",
    "psycopg_pool",
    "jobledger._runtime.worker",
    "jobledger.brokers",
    "jobledger.http",
    "jobledger.push",
    "jobledger.testing",
]


def modules_after(code: str, *argv: str) -> set[str]:
    """The modules a fresh interpreter has imported when ``code`` (run with ``argv``) exits."""
    probe = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: sys.__stderr__.write('\\nMODULES ' + json.dumps(sorted(sys.modules))))\n"
        + code
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("JOBLEDGER_URL", None)
    proc = subprocess.run(
        [sys.executable, "-c", probe, *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert "MODULES " in proc.stderr, proc.stderr
    return set(json.loads(proc.stderr.rsplit("MODULES ", 1)[1]))


def imported(modules: set[str], names: list[str]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


CLI = "from jobledger.cli import main\nmain()\n"


def test_import_jobledger_imports_nothing_heavy():
    modules = modules_after("import jobledger\n")
    assert imported(modules, [*HEAVY, "click", "rich", "sqlite3", "jobledger._ledger"]) == []


def test_the_ledger_alone_imports_no_runtime_and_no_driver():
    modules = modules_after("from jobledger import Ledger\nLedger('sqlite:///x.db')\n")
    assert imported(modules, [*HEAVY, "click", "rich", "jobledger.scheduling"]) == []


def test_help_imports_click_and_nothing_of_the_ledger():
    modules = modules_after(CLI, "--help")
    assert imported(modules, [*HEAVY, "rich", "sqlite3", "jobledger._ledger"]) == []
    assert imported(modules, ["jobledger._records", "jobledger.backends"]) == []
    assert "jobledger.cli.views" not in modules  # no command's module


def test_status_on_sqlite_imports_what_it_reads_with(tmp_path):
    url = f"sqlite:///{tmp_path}/ledger.db"
    subprocess.run(
        [sys.executable, "-m", "jobledger", "migrate", "--url", url],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    modules = modules_after(CLI, "status", "--url", url)
    assert "jobledger.backends.sqlite" in modules  # it did read the ledger
    # Piped, its table is plain text: no rich. No scheduling stack for counting jobs.
    assert imported(modules, [*HEAVY, "rich", "jobledger.scheduling"]) == []
    assert imported(modules, ["jobledger.cli"]) == sorted(
        {"jobledger.cli", "jobledger.cli._main", "jobledger.cli.base", "jobledger.cli.params"}
        | {"jobledger.cli.views"}
    )


# -- the constants the CLI writes down so that its options cost no import ------------------------


def test_the_cli_constants_are_the_librarys():
    from jobledger import JobState
    from jobledger._ledger import DEFAULT_KEEP_KEYS
    from jobledger._records import DEFAULT_RETENTION_SECONDS
    from jobledger._records import subscriptions as subs
    from jobledger.backends.url import DEFAULT_URL, REQUIRE_URL_ENV
    from jobledger.cli import actions, queues, subscriptions, views, worker
    from jobledger.observability.logs import LOG_FORMATS
    from jobledger.scheduling.schedule import DEFAULT_COHORT
    from jobledger.testing.drill.runner import DRILLS
    from jobledger.testing.history import ENV

    assert params.DEFAULT_URL == DEFAULT_URL
    assert params.REQUIRE_URL_ENV == REQUIRE_URL_ENV
    assert [s.value for s in JobState] == views.STATES
    assert timedelta(days=actions._KEEP_KEYS_DAYS) == DEFAULT_KEEP_KEYS
    assert queues._RETENTION_DAYS * 86400 == DEFAULT_RETENTION_SECONDS
    assert subscriptions.DEFAULT_TIMEOUT_SECONDS == subs.DEFAULT_TIMEOUT_SECONDS
    assert subscriptions.DEFAULT_CONCURRENCY == subs.DEFAULT_CONCURRENCY
    assert timedelta(hours=subscriptions.DEFAULT_OVERLAP_HOURS) == subs.DEFAULT_OVERLAP
    assert worker.HISTORY_ENV == ENV
    assert sorted(LOG_FORMATS) == ["console", "json"]
    assert sorted(DRILLS) == [1, 2, 3, 4, 5]
    import inspect

    from jobledger import Ledger

    assert inspect.signature(Ledger.schedule).parameters["cohort"].default == DEFAULT_COHORT


@pytest.mark.parametrize("name", sorted(base.COMMANDS))
def test_every_listed_command_is_there(name):
    ctx = click.Context(base.cli)
    command = base.cli.get_command(ctx, name)
    assert isinstance(command, click.Command) and command.name == name
    assert command.get_short_help_str(100) == base.COMMANDS[name][1]
