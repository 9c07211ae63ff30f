"""Every option of every command that acts on the ledger, given values nobody means (empty,
negative, past every integer and date, NaN, U+0000, very long): each run ends done or with
one ``error:`` line and exit 2, never an internal error (exit 1), on both backends.

The commands that run a service (worker, serve, push, relay, consume, scheduler) and the drill
are left out: they are started for their own tests."""

from __future__ import annotations

import click

from jobledger import Ledger
from jobledger.cli import cli as root

from .test_never_creates import EVERY_COMMAND

SERVICES = {"worker", "serve", "push", "relay", "consume", "scheduler", "drill"}
GROUPS = {"groups", "keys", "queues", "subscriptions", "schedules", "outbox"}
ODD = [
    "",
    "-1",
    "1e309",
    "nan",
    "99999999999999999999999",
    "\x00",
    "x\udcff",  # an argument that is not UTF-8, as Python reads it (surrogateescape)
    "a" * 5000,
    "99999999d",
    "0001-01-01T00:00:00+05:00",
    "9999-12-31T23:59:59Z",
]


def _command(words: list[str]) -> click.Command:
    command: click.Command = root
    for word in words[:2] if words[0] in GROUPS else words[:1]:
        assert isinstance(command, click.Group)
        found = command.get_command(click.Context(command), word)
        assert found is not None, words
        command = found
    return command


def _runs() -> list[list[str]]:
    """Each command's working invocation with one option set to one odd value."""
    runs = []
    for base in EVERY_COMMAND:
        if base[0] in SERVICES:
            continue
        command = _command([w for w in base if not w.startswith("-")])
        for option in command.params:
            if not isinstance(option, click.Option) or option.is_flag or option.name == "url":
                continue
            name = option.opts[0]
            for value in ODD:
                args = list(base)
                if name in args:
                    args[args.index(name) + 1] = value
                else:
                    args += [name, value]
                runs.append(args)
    return runs


def test_odd_values_in_every_option_are_done_or_one_line_errors(cli, db_url, ledger: Ledger):
    ledger.enqueue("send", {"n": 1}, key="some-key", queue="q")
    runs = _runs()
    assert len(runs) > 500, "the walk should reach every option"
    wrong = []
    for args in runs:
        run = cli(*args, "--url", db_url)
        lines = run.err.strip().splitlines()
        if run.code == 0 or (run.code == 2 and len(lines) == 1 and lines[0].startswith("error:")):
            continue
        wrong.append((args, run.code, run.err[:300]))
    assert wrong == []
