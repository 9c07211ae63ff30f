"""jobledger as the task backend of a real Django project (tests/django_project): enqueue in the
app's transaction, priority, run_after, queues, results, async tasks, keys, signals and the
``jobledger_worker`` command, on SQLite and PostgreSQL.

Each case runs the project in a process of its own (``manage.py shop_scenario NAME``) on a fresh
database, and asserts on the facts it prints. Django 5.2 with the django-tasks backport runs in
this interpreter's environment; Django 6 (``django.tasks``, Python 3.12 or later) in a virtual
environment of its own, built once and kept in .venv-django6/.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from glob import glob
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from ..support.postgres import PostgresServer

pytest.importorskip("django")

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "tests" / "django_project"
DJANGO6_VENV = ROOT / ".venv-django6"
REQUIRE_DJANGO6 = os.environ.get("JOBLEDGER_REQUIRE_DJANGO6") == "1"

Facts = dict[str, Any]


# -- what each scenario must show -------------------------------------------------------------------


def check_atomic(facts: Facts) -> None:
    # Enqueued in atomic(): invisible to others until the commit, gone with a rollback.
    assert facts["kept_visible_before_commit"] is False
    assert facts["kept_exists"] is True
    assert facts["lost_exists"] is False
    assert facts["enqueue_in_broken_transaction"] == "TransactionManagementError"
    assert facts["orders"] == ["kept"]
    # Outside a transaction (autocommit) the job exists at once.
    assert facts["autocommit_visible_at_once"] is True
    assert facts["ran"] == ["autocommit", "kept"]
    assert "claimed 2, completed 2" in facts["worker"]


def check_elsewhere(facts: Facts) -> None:
    # OPTIONS["url"]: a ledger database of its own, so the app's rollback does not undo it.
    # Read back through that backend, the result's task is of it: its refresh reads there too.
    assert facts == {
        "exists_after_rollback": True,
        "backend": "elsewhere",
        "fetched_task_backend": "elsewhere",
        "refreshed_status": "READY",
    }


def check_priority(facts: Facts) -> None:
    assert facts["order"] == ["p-top", "p-high", "p-mid", "p-low"]
    expected = {"p-low": -10, "p-high": 50, "p-mid": 0, "p-top": 100}
    assert facts["priorities"] == expected
    assert facts["jobledger_priorities"] == expected  # the same number in the ledger


def check_run_after(facts: Facts) -> None:
    assert facts["ran"] == ["r-now"]
    assert facts["later_status"] == "READY"
    assert facts["later_run_after_seconds"] < 0.001
    assert facts["now_status"] == "SUCCESSFUL"


def check_naive_times(facts: Facts) -> None:
    assert facts["run_after_naive"] is True
    assert facts["run_after_kept"] is True
    assert facts["enqueued_at_naive"] is True
    assert facts["run_at_utc"] == facts["expected_utc"]  # read in TIME_ZONE


def check_queues(facts: Facts) -> None:
    assert facts["refused"] == "Queue 'nowhere' is not valid for backend."
    assert facts["mail_queue"] == "emails"
    assert facts["mail_after_default_worker"] == "READY"
    assert facts["mail_after_emails_worker"] == "SUCCESSFUL"
    assert facts["plain"] == "SUCCESSFUL"
    assert "queues ['nowhere'] are not in TASKS['default']['QUEUES']" in facts["unknown_queue"]


def check_results(facts: Facts) -> None:
    assert facts["before"] == "READY"
    assert facts["id_is_job_id"] is True
    assert facts["status"] == "SUCCESSFUL"
    assert facts["return_value"] == 5
    assert facts["times_in_order"] is True
    assert (facts["attempts"], facts["worker_ids"], facts["errors"]) == (1, 1, 0)
    # An exception: FAILED (max_attempts 1), with the exception's class path and traceback.
    assert facts["failed_status"] == "FAILED"
    [(path, name, trace)] = facts["failed_errors"]
    assert (path, name) == ("builtins.ValueError", "ValueError")
    assert "raise ValueError(reason)" in trace
    assert trace.rstrip().endswith("ValueError: boom")
    assert "jobledger.errors" not in trace
    assert facts["failed_finished"] is True
    # jobledger's Permanent in a Django task: failed for good at once.
    assert facts["refused_status"] == "FAILED"
    assert facts["refused_error"] == ["jobledger.errors.Permanent"]
    # takes_context: the running TaskResult.
    assert facts["context"] == {"attempt": 1, "id": facts["context_id"], "label": "ctx"}
    # A transient failure is retried by the task's policy: READY again, then SUCCESSFUL.
    assert facts["lucky_status"] == "SUCCESSFUL"
    assert facts["lucky_return_value"] == "second time lucky"
    assert facts["lucky_attempts"] == 2
    assert facts["lucky_errors"] == ["builtins.ConnectionError"]
    assert facts["lucky_started_at_first"] is True  # started_at: its first attempt's start
    assert facts["missing"] is True
    assert facts["unicode_digit_missing"] is True
    # A plain jobledger job in the same database is no Django task's result.
    assert facts["plain_job_missing"] is True
    # The provider's Retry-After sets when a Django task is tried again.
    assert facts["busy_status"] == "READY"
    assert facts["busy_errors"] == ["shop.tasks.ProviderBusy"]
    assert 3500 < facts["busy_retry_in"] <= 3600
    # A return value JSON cannot hold fails the job for good at once (max_attempts is 5).
    assert facts["not_json_status"] == "FAILED"
    assert facts["not_json_attempts"] == 1
    assert facts["not_json_errors"] == ["builtins.TypeError"]
    assert "which JSON cannot hold" in facts["not_json_traceback"]
    # Cancelled by an operator: FAILED, and finished.
    assert (facts["cancelled_status"], facts["cancelled_finished"]) == ("FAILED", True)
    # A claim given back before the task ran is no attempt of it.
    assert facts["given_back_claimed"] is True
    assert facts["given_back_status"] == "SUCCESSFUL"
    assert facts["given_back_attempts"] == 1
    assert "gave-it-back" not in facts["given_back_workers"]


def check_async_tasks(facts: Facts) -> None:
    assert facts == {"sync_enqueued": 42, "async_enqueued": 8, "status": "SUCCESSFUL"}


def check_connections(facts: Facts) -> None:
    assert facts == {"runs": 2, "fresh": True, "closed": True, "last_closed": True}


def check_keys(facts: Facts) -> None:
    assert facts["digest_same_id"] is True
    assert facts["digest_key"] == "4187:2026-W33"
    assert facts["other_week_new"] is True
    assert facts["keyed_same_id"] is True
    assert facts["keyed_key"] == "manual-1"
    assert facts["conflict"] == "KeyConflict"
    assert facts["unkeyed_new_each_time"] is True
    assert facts["welcome_same_id"] is True
    assert facts["welcome_key"] == "welcome:7"
    assert facts["same_in_transaction"] is True
    assert facts["done_again"] == [True, "SUCCESSFUL", "sent 4187:2026-W33"]


def check_json_only(facts: Facts) -> None:
    assert facts["refused"].startswith(
        "task shop.tasks.add: args[0] is a datetime (datetime.datetime("
    )
    assert "which JSON cannot hold" in facts["refused"]
    assert facts["tuple_args"] == [[1, 2], [3]]


def check_signals(facts: Facts) -> None:
    assert facts["inside_atomic"] == []  # task_enqueued waits for the commit
    seen = facts["seen"]
    enqueued = [s for s in seen if s[0] == "enqueued"]
    # Sent for the jobs made, once each: not for the rolled back one, nor for a key's second.
    assert enqueued == [
        ["enqueued", "add", "READY"],
        ["enqueued", "fail", "READY"],
        ["enqueued", "add", "READY"],
        ["enqueued", "flaky", "READY"],
    ]
    assert ["started", "add", "RUNNING"] in seen
    assert ["finished", "add", "SUCCESSFUL"] in seen
    assert ["started", "fail", "RUNNING"] in seen
    assert ["finished", "fail", "FAILED"] in seen
    # An attempt that will be retried is not the end of its task: started twice, finished once.
    assert [s for s in seen if s[1] == "flaky" and s[0] != "enqueued"] == [
        ["started", "flaky", "RUNNING"],
        ["started", "flaky", "RUNNING"],
        ["finished", "flaky", "SUCCESSFUL"],
    ]


CHECKS: dict[str, Callable[[Facts], None]] = {
    "atomic": check_atomic,
    "elsewhere": check_elsewhere,
    "priority": check_priority,
    "run_after": check_run_after,
    "naive_times": check_naive_times,
    "queues": check_queues,
    "results": check_results,
    "async_tasks": check_async_tasks,
    "connections": check_connections,
    "keys": check_keys,
    "json_only": check_json_only,
    "signals": check_signals,
}


# -- the project on a fresh database ------------------------------------------------------------------


class Project:
    """The test project on one database, run by one Python."""

    def __init__(self, python: str, env: dict[str, str]):
        self.python = python
        self.env = env

    def manage(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [self.python, "manage.py", *args],
            cwd=PROJECT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"manage.py {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
            )
        return done

    def python_output(self, code: str) -> str:
        """The last line ``manage.py shell -c CODE`` prints."""
        return self.manage("shell", "-c", code).stdout.strip().splitlines()[-1]

    def scenario(self, *args: str) -> Facts:
        out = self.manage("shop_scenario", *args).stdout.strip().splitlines()
        facts: Facts = json.loads(out[-1])
        return facts


def _database(backend_name: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """``DATABASES["default"]`` of a new, empty database."""
    if backend_name == "sqlite":
        yield {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "app.db")}
        return
    server: PostgresServer = request.getfixturevalue("pg")
    name = f"jobledger_django_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    info = conninfo_to_dict(server.admin_url)
    try:
        yield {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "USER": info.get("user", ""),
            "PASSWORD": info.get("password", ""),
            "HOST": info.get("host", ""),
            "PORT": str(info.get("port", "")),
        }
    finally:
        with psycopg.connect(server.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def database(
    backend_name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[dict[str, Any]]:
    yield from _database(backend_name, tmp_path, request)


def _env(database: dict[str, Any], tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "JOBLEDGER_URL"))}
    env["JOBLEDGER_DJANGO_DATABASE"] = json.dumps(database)
    env["JOBLEDGER_DJANGO_LEDGER_URL"] = f"sqlite:///{tmp_path}/elsewhere.db"
    env["DJANGO_SETTINGS_MODULE"] = "djproject.settings"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT), env.get("PYTHONPATH")]))
    return env


@pytest.fixture
def project(database: dict[str, Any], tmp_path: Path) -> Project:
    return Project(sys.executable, _env(database, tmp_path))


# -- Django 5.2 with the django-tasks backport, in this environment -----------------------------------


@pytest.mark.parametrize("scenario", sorted(CHECKS))
def test_django_project(project: Project, scenario: str) -> None:
    CHECKS[scenario](project.scenario(scenario))


def test_system_checks_pass(project: Project) -> None:
    done = project.manage("check")
    assert "System check identified no issues" in done.stdout


def test_system_checks_say_a_database_the_workers_cannot_share(tmp_path: Path) -> None:
    memory = {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}
    done = Project(sys.executable, _env(memory, tmp_path)).manage("check", check=False)
    assert done.returncode != 0
    assert "(jobledger.E002)" in done.stderr
    assert "in-memory SQLite database, which workers in other processes cannot share" in done.stderr


def test_system_checks_say_the_app_is_missing(tmp_path: Path) -> None:
    database = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "app.db")}
    env = {**_env(database, tmp_path), "JOBLEDGER_DJANGO_WITHOUT_APP": "1"}
    done = Project(sys.executable, env).manage("check", check=False)
    assert done.returncode != 0
    assert "(jobledger.E001) TASKS['default'] uses jobledger, but its app is not installed" in (
        done.stderr
    )
    assert "add 'jobledger.contrib.django' to INSTALLED_APPS" in done.stderr


def test_migrate_creates_the_ledger_tables(project: Project) -> None:
    """``manage.py migrate`` creates the ledger's tables in the app's database (before any use
    of the ledger), so that the first enqueue inside a transaction finds them."""
    project.manage("migrate", "--verbosity", "0")
    tables = project.python_output(
        "from django.db import connection; print(sorted(connection.introspection.table_names()))"
    )
    assert "jobledger_jobs" in tables
    assert "shop_order" in tables


def test_worker_command_runs_what_is_due_and_returns(project: Project) -> None:
    enqueued = project.scenario("enqueue")
    assert project.scenario("result", enqueued["id"])["status"] == "READY"
    done = project.manage("jobledger_worker", "--burst", "--concurrency", "2")
    assert "claimed 1, completed 1" in done.stdout
    assert project.scenario("result", enqueued["id"]) == {
        "status": "SUCCESSFUL",
        "return_value": 42,
    }


def test_worker_command_refuses_a_queue_the_backend_does_not_have(project: Project) -> None:
    done = project.manage("jobledger_worker", "--burst", "--queue", "nowhere", check=False)
    assert done.returncode != 0
    assert "queues ['nowhere'] are not in TASKS['default']['QUEUES']" in done.stderr


def test_worker_command_help_names_its_options(project: Project) -> None:
    out = project.manage("jobledger_worker", "--help").stdout
    for option in ("--backend", "--queue", "--burst", "--concurrency", "--grace"):
        assert option in out


def test_the_docs_show_the_project_s_code() -> None:
    """Each code block of docs/integrations.md's Django section that names a file of the test
    project is a part of that file, as it is: the docs show what the tests run."""
    text = (ROOT / "docs" / "integrations.md").read_text()
    section = text[text.index("\n## Django\n") :]
    section = section[: section.find("\n## ", 1)] if "\n## " in section[1:] else section
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    shown = 0
    for block in blocks:
        first, _, code = block.partition("\n")
        if first.startswith("# tests/django_project/"):
            source = (ROOT / first[2:].strip()).read_text()
            assert code in source, f"docs/integrations.md shows code that {first[2:]} lacks"
            shown += 1
    assert shown >= 5


# -- Django 6 (django.tasks), in a Python 3.12+ environment of its own -----------------------------------


def _python312() -> str | None:
    """A Python 3.12 or later on this machine (one that runs: a pyenv shim may not): on PATH,
    else under pyenv."""
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates = [shutil.which(name) for name in ("python3.13", "python3.12")]
    candidates += sorted(glob(f"{root}/versions/3.1[2-9]*/bin/python"), reverse=True)
    for candidate in filter(None, candidates):
        try:
            answer = subprocess.run(
                [candidate, "-c", "import sys; print(sys.version_info >= (3, 12))"],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except OSError:
            continue
        if answer.returncode == 0 and answer.stdout.strip() == "True":
            return candidate
    return None


def _django6_python() -> str:
    """The Python of .venv-django6 (Django 6 and this package, editable), built on first use and
    rebuilt when pyproject.toml changes."""
    base = _python312()
    if base is None:
        message = "no Python 3.12 or later on this machine: Django 6 needs one"
        if REQUIRE_DJANGO6:
            pytest.fail(f"{message}, and JOBLEDGER_REQUIRE_DJANGO6=1")
        pytest.skip(message)
    stamp = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + base.encode()).hexdigest()
    python = DJANGO6_VENV / "bin" / "python"
    ready = DJANGO6_VENV / ".jobledger-ready"
    if not (ready.exists() and ready.read_text() == stamp and python.exists()):
        shutil.rmtree(DJANGO6_VENV, ignore_errors=True)
        subprocess.run([base, "-m", "venv", str(DJANGO6_VENV)], check=True, timeout=120)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "django>=6", "-e", str(ROOT)],
            check=True,
            timeout=600,
        )
        ready.write_text(stamp)
    return str(python)


def test_django6_project(database: dict[str, Any], tmp_path: Path) -> None:
    """The same project and scenarios on Django 6's own ``django.tasks`` (all scenarios in one
    process and one database, to keep it quick)."""
    python = _django6_python()
    project = Project(python, _env(database, tmp_path))
    assert int(project.python_output("import django; print(django.VERSION[0])")) >= 6
    source = project.python_output(
        "from jobledger.contrib.django import compat; print(compat.SOURCE)"
    )
    assert source == "django.tasks"
    assert "no issues" in project.manage("check").stdout
    facts = project.scenario("all")
    assert sorted(facts) == sorted(CHECKS)
    for name, check in CHECKS.items():
        check(facts[name])
    if database["ENGINE"].endswith("sqlite3"):
        memory = {**database, "NAME": ":memory:"}
        done = Project(python, _env(memory, tmp_path)).manage("check", check=False)
        assert done.returncode != 0
        assert "(jobledger.E002)" in done.stderr
