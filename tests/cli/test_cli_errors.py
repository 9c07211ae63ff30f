"""Every CLI error path: wrong flags, unknown keys, malformed JSON, an unreachable database —
one line on stderr, exit code 2, no traceback."""

from __future__ import annotations

import os
import sys

import pytest

from ..support.processes import ROOT
from ..support.waiting import run
from .conftest import assert_one_line_error

REFUSED_PG = "postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=3"

# One invocation of each command that would work on a reachable, migrated database.
EVERY_COMMAND = [
    ("status",),
    ("jobs",),
    ("show", "some-key"),
    ("redrive", "--all", "--reason", "r"),
    ("resolve", "some-key", "--done", "--note", "n"),
    ("cancel", "some-key", "--reason", "r"),
    ("enqueue", "send", "--key", "k", "--payload", "{}"),
    ("prune", "--older-than", "30d"),
    ("migrate",),
    ("drill",),
    ("groups", "list", "q"),
    ("groups", "pause", "q", "g", "--for", "1m"),
]


@pytest.mark.parametrize("command", EVERY_COMMAND, ids=lambda c: c[0])
def test_unreachable_postgres(cli, command):
    assert_one_line_error(cli(*command, "--url", REFUSED_PG), "PostgreSQL", "unavailable")


@pytest.mark.parametrize("command", EVERY_COMMAND, ids=lambda c: c[0])
def test_missing_sqlite_file(cli, tmp_path, command):
    url = f"sqlite:///{tmp_path}/no-such-dir/jobs.db"
    assert_one_line_error(cli(*command, "--url", url), "SQLite database")


def test_url_from_the_environment(cli, monkeypatch):
    monkeypatch.setenv("JOBLEDGER_URL", REFUSED_PG)
    assert_one_line_error(cli("status"), "127.0.0.1:1")


@pytest.mark.parametrize(
    "url, fragment",
    [
        ("mysql://x/y", "unsupported scheme"),
        ("sqlite://host/x.db", "host part"),
        ("postgresql://u:secret@127.0.0.1:1/x?schema=Bad-Name", "schema"),
    ],
)
def test_bad_urls(cli, url, fragment):
    run = cli("status", "--url", url)
    assert_one_line_error(run, fragment)
    assert "secret" not in run.err


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("jobs", "--bogus"), "No such option"),
        (("nosuchcommand",), "No such command"),
        (("jobs", "--state", "sleeping"), "sleeping"),
        (("jobs", "--limit", "many"), "many"),
        (("jobs", "--since", "the day before"), "not a time"),
        (("prune",), "--older-than"),
        (("prune", "--older-than", "30x"), "not a duration"),
        (("prune", "--older-than", "30d", "--batch", "0"), "--batch"),
        (("redrive", "--all"), "--reason"),
        (("redrive", "--reason", "r"), "name the jobs"),
        (("redrive", "--all", "--reason", "r", "--rate", "-1"), "--rate"),
        (("resolve", "k", "--note", "n"), "--done or --pending"),
        (("resolve", "k", "--done"), "--note"),
        (("cancel", "k"), "--reason"),
        (("enqueue", "send"), "--key"),
        (("enqueue", "send", "--key", "k", "--delay", "1h", "--run-at", "now"), "not both"),
        (("enqueue", "send", "--key", "k", "--priority", "x"), "--priority"),
        (("status", "--late-after", "soon"), "not a duration"),
        (("show",), "JOB"),
        (
            ("worker", "nosuchapp:ledger", "--processes", "2", "--metrics-port", "9187"),
            "--metrics-port cannot be shared by --processes children",
        ),
    ],
)
def test_wrong_flags(cli, tmp_path, args, fragment):
    # A database that exists, so that only the flags are wrong.
    url = f"sqlite:///{tmp_path}/jobs.db"
    assert cli("migrate", "--url", url).code == 0
    assert_one_line_error(cli(*args, "--url", url), fragment)


@pytest.mark.parametrize(
    "payload, fragment",
    [
        ('{"customer_id": ', "not valid JSON"),
        ("customer_id=1", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('"text"', "JSON object"),
        ('{"n": NaN}', "NaN is not valid JSON"),
        ('{"n": -Infinity}', "-Infinity is not valid JSON"),
        ('{"n": ' + "[" * 100_000 + "]" * 100_000 + "}", "it nests too deeply"),
    ],
    ids=["cut", "form", "list", "string", "nan", "infinity", "nested"],
)
def test_malformed_json(cli, db_url, ledger, payload, fragment):
    run = cli("enqueue", "send", "--url", db_url, "--key", "k", "--payload", payload)
    assert_one_line_error(run, fragment)
    assert ledger.jobs() == []


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("groups", "pause", "q", "g", "--for", "99999999d"), "a pause lasts at most 365 days"),
        (
            ("groups", "limits", "q", "--max-leased", "99999999999999999999999"),
            "max_leased must be a whole number from 1 to 1000000",
        ),
        (("groups", "limits", "q", "--rate", "10000000"), "rate must be at most 1,000,000"),
        (
            ("enqueue", "send", "--key", "k", "--delay", "99999999d"),
            "delay must come no later than 9999-12-30 (UTC), the latest time the ledger keeps",
        ),
        (
            ("redrive", "--all", "--reason", "r", "--limit", "99999999999999999999999"),
            "limit must be a whole number from 1 to 9223372036854775807",
        ),
    ],
    ids=["pause", "max-leased", "rate", "delay", "limit"],
)
def test_a_number_past_what_the_ledger_keeps_is_a_one_line_error(
    cli, db_url, ledger, args, fragment
):
    """Said by the ledger, the same on both backends: never an internal error (a date past
    what a datetime holds), nor a database said to be unusable (SQLite's driver refusing a
    number past its integer)."""
    assert_one_line_error(cli(*args, "--url", db_url), fragment)
    assert ledger.jobs() == []
    assert ledger.group_limits("q").max_leased is None


def test_a_time_longer_ago_than_any_date_holds_means_from_the_first(cli, db_url, ledger):
    ledger.enqueue("send", {}, key="k")
    for option in ("--since", "--until"):
        run = cli("jobs", option, "99999999d", "--json", "--url", db_url)
        assert run.code == 0, run.err
        assert [j["key"] for j in run.json()["jobs"]] == (["k"] if option == "--since" else [])


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("jobs", "--queue", "\x00"), "queue may not contain U+0000"),
        (("outbox", "route", "q", "--note", "\x00"), "note may not contain U+0000"),
    ],
    ids=["filter", "note"],
)
def test_what_postgresql_cannot_hold_is_the_same_one_line_error_on_both(
    cli, db_url, ledger, args, fragment
):
    """A text with U+0000 was PostgreSQL's refusal there and stored (or matched nothing) on
    SQLite: now one error on both, before anything is read or written."""
    ledger.enqueue("send", {}, key="k", queue="q")
    assert_one_line_error(cli(*args, "--url", db_url), fragment)


def test_a_lateness_longer_than_any_wait_counts_none_late(cli, db_url, ledger):
    """It was "out of PostgreSQL's range" there, and an answer on SQLite."""
    ledger.enqueue("send", {}, key="k", queue="q")
    run = cli("status", "--late-after", "99999999d", "--json", "--url", db_url)
    assert run.code == 0, run.err
    assert [q["late_pending"] for q in run.json()["queues"]] == [0]


@pytest.mark.parametrize(
    "args",
    [
        ("show", "no-such-key"),
        ("show", "424242"),
        ("resolve", "no-such-key", "--done", "--note", "n"),
        ("cancel", "no-such-key", "--reason", "r"),
        ("redrive", "no-such-key", "--reason", "r"),
    ],
    ids=lambda a: a[0],
)
def test_unknown_keys(cli, db_url, ledger, args):
    assert_one_line_error(cli(*args, "--url", db_url), "no job")


def test_no_traceback_from_a_real_process(tmp_path):
    """The same contract from the installed command, in a process of its own."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("JOBLEDGER_URL", None)
    for args in (
        ["status", "--url", REFUSED_PG],
        ["enqueue", "t", "--key", "k", "--payload", "{oops", "--url", f"sqlite:///{tmp_path}/x.db"],
        ["show", "k", "--url", f"sqlite:///{tmp_path}/missing.db"],
    ):
        proc = run([sys.executable, "-m", "jobledger", *args], text=True, env=env, timeout=60)
        assert proc.returncode == 2, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "Traceback" not in proc.stderr


def test_a_bug_is_exit_code_1_with_one_line_and_the_traceback_on_request(
    cli, db_url, ledger, monkeypatch
):
    # Exit code 1 tells a script "jobledger failed", 2 "your command was wrong": a bug must not
    # pass for a usage error, and must say how to see where it happened.
    from jobledger import Ledger

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(Ledger, "jobs", broken)
    monkeypatch.delenv("JOBLEDGER_DEBUG", raising=False)
    run = cli("jobs", "--url", db_url)
    assert run.code == 1, (run.code, run.err)
    assert run.err.strip().splitlines() == [
        "internal error: RuntimeError: boom (JOBLEDGER_DEBUG=1 shows the traceback)"
    ]
    monkeypatch.setenv("JOBLEDGER_DEBUG", "1")
    debug = cli("jobs", "--url", db_url)
    assert debug.code == 1 and "Traceback" in debug.err and "boom" in debug.err


@pytest.mark.parametrize(
    "args, usage",
    [
        ((), "Usage: jobledger [OPTIONS] COMMAND"),
        (("queues",), "Usage: jobledger queues [OPTIONS]"),
    ],
)
def test_no_command_shows_the_help_on_stderr_and_exits_2(cli, args, usage):
    # Nothing ran: a script's `jobledger $COMMAND` with an empty variable must not pass.
    run = cli(*args)
    assert run.code == 2, (run.code, run.err)
    assert run.out == ""
    assert run.err.startswith(usage) and "Commands:" in run.err
    assert "Traceback" not in run.err


def test_help_asked_for_goes_to_stdout_with_exit_0(cli):
    run = cli("--help")
    assert run.code == 0 and run.err == ""
    assert run.out.startswith("Usage: jobledger [OPTIONS] COMMAND") and "Commands:" in run.out


@pytest.mark.parametrize(
    "args, fragment, path",
    [
        (("frobnicate",), "No such command 'frobnicate'.", "jobledger"),
        (("status", "--bogus"), "No such option '--bogus'.", "jobledger status"),
        (("queues", "create"), "Missing argument 'NAME'.", "jobledger queues create"),
    ],
)
def test_a_usage_error_is_one_line_naming_the_help_to_read(cli, args, fragment, path):
    run = cli(*args)
    assert_one_line_error(run, fragment)
    assert run.err.strip().endswith(f" Try '{path} --help' for help."), run.err


def test_a_redrive_refuses_an_actor_no_backend_can_keep_even_when_nothing_matches(cli, db_url):
    """With no dead job (or a dry run) the ledger was never asked, and such a redrive answered
    "moved 0" where the same command with dead jobs was refused."""
    cli("migrate", "--url", db_url)
    for extra in ((), ("--dry-run",)):
        run = cli(
            "redrive", "--all", "--reason", "r", "--actor", "x\udcff", *extra, "--url", db_url
        )
        assert run.code == 2 and run.err.startswith("error: actor may not contain half of")
