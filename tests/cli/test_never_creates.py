"""A mistyped URL makes no new ledger (issue 16, item 2): every command but ``migrate`` (and
``--migrate`` where a command offers it), on a missing SQLite file, an empty one, a missing
PostgreSQL schema or database, exits 2 with one line naming what is missing and the command that
creates it — and creates nothing: no file, no schema, no table."""

from __future__ import annotations

import psycopg
import pytest

from .conftest import assert_one_line_error

APP = "tests.apps.lifecycle_app:ledger"
SCHEDULE_APP = "tests.apps.schedule_app:ledger"

# Every command that opens the ledger, with what it needs besides --url.
EVERY_COMMAND = [
    ("status",),
    ("jobs",),
    ("show", "some-key"),
    ("redrive", "--all", "--reason", "r"),
    ("resolve", "some-key", "--done", "--note", "n"),
    ("cancel", "some-key", "--reason", "r"),
    ("enqueue", "send", "--key", "k"),
    ("prune", "--older-than", "30d"),
    ("drill", "--only", "1"),
    ("groups", "list", "q"),
    ("groups", "limits", "q", "--max-leased", "2"),
    ("groups", "pause", "q", "g", "--for", "1m"),
    ("groups", "resume", "q", "g"),
    ("keys", "create", "--name", "x", "--scope", "admin"),
    ("keys", "list"),
    ("keys", "revoke", "k1"),
    ("queues", "create", "q"),
    ("queues", "list"),
    ("subscriptions", "create", "-q", "q", "--to", "https://example.com/hook"),
    ("subscriptions", "list"),
    ("subscriptions", "pause", "sub_1"),
    ("subscriptions", "resume", "sub_1"),
    ("subscriptions", "rotate", "sub_1"),
    ("subscriptions", "delete", "sub_1"),
    ("push",),
    ("serve", "--port", "0"),
    ("schedules",),
    ("schedules", "ticks"),
    ("schedules", "pause", "s"),
    ("schedules", "resume", "s"),
    ("outbox", "route", "q"),
    ("outbox", "unroute", "q"),
    ("outbox", "status"),
    ("outbox", "list"),
    ("outbox", "republish", "q"),
    ("outbox", "prune"),
    ("relay", "--to", "redis://127.0.0.1:1/0", "--once"),
    ("worker", APP, "--burst"),
    ("worker", APP, "--burst", "--processes", "2"),
    ("scheduler", SCHEDULE_APP),
    ("consume", APP, "--from", "redis://127.0.0.1:1/0"),
]


def _ids(command: tuple[str, ...]) -> str:
    words = [part for part in command[:2] if not part.startswith(("tests.", "-"))]
    return "-".join(words + (["processes"] if "--processes" in command else []))


def _sqlite_files(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize("command", EVERY_COMMAND, ids=_ids)
def test_a_missing_sqlite_file_is_not_created(cli, tmp_path, command):
    url = f"sqlite:///{tmp_path}/typo.db"
    run = cli(*command, "--url", url)
    assert_one_line_error(run, "typo.db", "does not exist", "jobledger migrate")
    assert _sqlite_files(tmp_path) == []


@pytest.mark.parametrize("command", EVERY_COMMAND, ids=_ids)
def test_an_empty_sqlite_file_is_left_as_it_was(cli, tmp_path, command):
    path = tmp_path / "empty.db"
    path.touch()
    run = cli(*command, "--url", f"sqlite:///{path}")
    assert_one_line_error(run, "empty.db", "no jobledger schema", "jobledger migrate")
    assert _sqlite_files(tmp_path) == ["empty.db"] and path.stat().st_size == 0


def _schemas(pg) -> set[str]:
    with psycopg.connect(pg.url) as conn:
        return {r[0] for r in conn.execute("SELECT nspname FROM pg_namespace")}


@pytest.mark.parametrize("command", EVERY_COMMAND, ids=_ids)
def test_a_missing_postgres_schema_is_not_created(cli, pg, command):
    schema, url = pg.new_schema_url()
    before = _schemas(pg)
    run = cli(*command, "--url", url)
    assert_one_line_error(run, f"schema {schema!r}", "no jobledger schema", "jobledger migrate")
    assert schema not in _schemas(pg) and _schemas(pg) == before


@pytest.mark.parametrize(
    "command", [("status",), ("keys", "create", "--name", "x", "--scope", "admin")], ids=_ids
)
def test_a_missing_postgres_database_says_how_to_create_it(cli, pg, command):
    url = pg.url.replace(pg.dbname, "jobledger_typo_db")
    run = cli(*command, "--url", url)
    assert_one_line_error(
        run, "'jobledger_typo_db' does not exist", "createdb", "jobledger migrate"
    )


def test_worker_migrate_creates_the_schema_on_request(cli, db_url, backend_name, tmp_path):
    run = cli("worker", APP, "--burst", "--migrate", "--url", db_url)
    assert run.code == 0, run.err
    assert "worker done: claimed 0" in run.err
    assert cli("status", "--url", db_url).code == 0
