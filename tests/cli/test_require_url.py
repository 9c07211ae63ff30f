"""``JOBLEDGER_REQUIRE_URL=1``: a command left without ``--url`` and ``JOBLEDGER_URL`` refuses
the default ``sqlite:///jobledger.db`` in one ``error:`` line, exit 2, and makes nothing; an app
command (``worker APP``) refuses it when the app's own ``Ledger()`` has no URL either."""

from __future__ import annotations

import sys

import pytest

from .conftest import assert_one_line_error
from .test_never_creates import EVERY_COMMAND, _ids

EVERY_COMMAND_AND_MIGRATE = [*EVERY_COMMAND, ("migrate",)]


@pytest.fixture
def required(monkeypatch, tmp_path):
    monkeypatch.setenv("JOBLEDGER_REQUIRE_URL", "1")
    monkeypatch.chdir(tmp_path)
    # The apps' module-level Ledger(), imported afresh as a new process would: one imported by
    # an earlier test was given that test's --url.
    for name in [m for m in sys.modules if m.startswith("tests.apps.")]:
        monkeypatch.delitem(sys.modules, name)
    return tmp_path


@pytest.mark.parametrize("command", EVERY_COMMAND_AND_MIGRATE, ids=_ids)
def test_every_command_refuses_the_default(cli, required, command):
    run = cli(*command)
    assert_one_line_error(run, "no database URL given", "JOBLEDGER_REQUIRE_URL", "--url")
    assert list(required.iterdir()) == []


def test_a_given_url_is_used(cli, required):
    url = f"sqlite:///{required}/given.db"
    assert cli("migrate", "--url", url).code == 0
    assert cli("status", "--url", url).code == 0


def test_the_url_from_the_environment_is_used(cli, required, monkeypatch):
    url = f"sqlite:///{required}/given.db"
    monkeypatch.setenv("JOBLEDGER_URL", url)
    assert cli("migrate").code == 0
    run = cli("worker", "tests.apps.lifecycle_app:ledger", "--burst")
    assert run.code == 0, run.err


def test_the_help_says_so(cli):
    run = cli("status", "--help")
    assert "JOBLEDGER_REQUIRE_URL=1 refuses the default" in " ".join(run.out.split())
