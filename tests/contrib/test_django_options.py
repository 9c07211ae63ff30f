"""The Django backend's OPTIONS and the mapping of Django's database settings to a jobledger
URL: validated when the backend is built, with messages that name what is wrong. (In this
process: neither needs Django's settings.)"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("django")

from django.core.exceptions import ImproperlyConfigured  # noqa: E402
from psycopg.conninfo import conninfo_to_dict  # noqa: E402

from jobledger import Backoff, PayloadError  # noqa: E402
from jobledger.backends.url import DatabaseURL  # noqa: E402
from jobledger.contrib.django.databases import _postgres_url, _sqlite_url  # noqa: E402
from jobledger.contrib.django.ledger import DjangoLedger, check_json  # noqa: E402
from jobledger.contrib.django.options import BackendOptions  # noqa: E402


def parse(options: dict[str, Any], queues: set[str] | None = None) -> BackendOptions:
    return BackendOptions.parse("default", options, queues or {"default"})


def test_defaults_share_the_default_database() -> None:
    options = parse({})
    assert (options.database, options.url, options.schema) == ("default", None, None)
    assert options.for_task("shop.tasks.add").max_attempts == 10


def test_task_options_inherit_the_backend_s() -> None:
    backoff = Backoff(base=1, cap=5)
    options = parse(
        {
            "max_attempts": 4,
            "backoff": backoff,
            "tasks": {"shop.tasks.send_digest": {"key": "{customer_id}:{week}", "timeout": 30}},
        }
    )
    digest = options.for_task("shop.tasks.send_digest")
    assert (digest.max_attempts, digest.backoff, digest.timeout) == (4, backoff, 30)
    assert digest.key_for("p", [], {"customer_id": 4187, "week": "2026-W33"}) == "4187:2026-W33"
    other = options.for_task("shop.tasks.add")
    assert (other.max_attempts, other.key) == (4, None)


def test_without_a_rule_every_key_is_new() -> None:
    rules = parse({}).for_task("shop.tasks.add")
    assert rules.key_for("p", [1], {}) != rules.key_for("p", [1], {})


def test_key_rules_take_positional_arguments_and_functions() -> None:
    options = parse(
        {
            "tasks": {
                "a.b.c": {"key": "{0}-{1}"},
                "a.b.d": {"key": lambda args, kwargs: f"{kwargs['x']}!", "group": "{x}"},
            }
        }
    )
    assert options.for_task("a.b.c").key_for("a.b.c", [1, 2], {}) == "1-2"
    assert options.for_task("a.b.d").key_for("a.b.d", [], {"x": 3}) == "3!"
    assert options.for_task("a.b.d").group_for("a.b.d", [], {"x": 3}) == "3"


def test_a_key_rule_that_does_not_fit_the_arguments_is_said() -> None:
    rules = parse({"tasks": {"a.b.c": {"key": "{customer_id}"}}}).for_task("a.b.c")
    with pytest.raises(
        PayloadError, match=r"task a\.b\.c: key rule '\{customer_id\}' cannot be filled"
    ):
        rules.key_for("a.b.c", [], {"week": 1})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"colour": "red"}, r"unknown options \['colour'\]"),
        ({"url": "sqlite:///x.db", "database": "default"}, "not both"),
        ({"url": ""}, r"\['url'\] must be a jobledger URL"),
        ({"database": 3}, "must be an alias of DATABASES"),
        ({"url": "sqlite:///x.db", "schema": "s"}, "put it in the 'url'"),
        ({"max_attempts": 0}, "max_attempts must be a whole number from 1 to 1000"),
        ({"backoff": 5}, "backoff must be a jobledger.Backoff"),
        ({"key": 5}, "key must be a format string"),
        ({"tasks": ["a.b.c"]}, "must map task paths to their options"),
        ({"tasks": {"a.b.c": {"retries": 3}}}, r"\['tasks'\]\['a\.b\.c'\] has unknown options"),
        ({"tasks": {"a.b.c": {"lease_seconds": -1}}}, r"\['tasks'\]\['a\.b\.c'\]: lease"),
    ],
)
def test_bad_options_are_refused_naming_them(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        parse(options)


def test_queue_names_must_be_jobledger_s() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"TASKS\['default'\]\['QUEUES'\]: queue name"):
        parse({}, {"default", "no spaces please"})


def test_a_sqlite_database_is_its_file() -> None:
    url = _sqlite_url("default", "/srv/app/db.sqlite3", {"timeout": 20})
    parsed = DatabaseURL.parse(url)
    assert str(parsed.sqlite_path) == "/srv/app/db.sqlite3"
    assert parsed.busy_timeout_ms == 20000


@pytest.mark.parametrize("name", [":memory:", "", "file:memdb1?mode=memory&cache=shared"])
def test_an_in_memory_sqlite_database_is_refused(name: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="in-memory SQLite database"):
        _sqlite_url("default", name, {})


def test_a_postgresql_database_is_its_connection_settings() -> None:
    url = _postgres_url(
        {"NAME": "shop", "USER": "app", "PASSWORD": "p@ss:w/rd", "HOST": "db", "PORT": 6432},
        {"sslmode": "require", "pool": True, "server_side_binding": True},
        "jobs",
    )
    parsed = DatabaseURL.parse(url)
    assert parsed.schema == "jobs"
    assert parsed.conninfo == "postgresql://app:p%40ss%3Aw%2Frd@db:6432/shop?sslmode=require"


def test_a_postgresql_socket_directory_is_the_encoded_host() -> None:
    url = _postgres_url({"NAME": "shop", "HOST": "/var/run/postgresql", "PORT": "5433"}, {}, None)
    conninfo = DatabaseURL.parse(url).conninfo
    assert conninfo == "postgresql://%2Fvar%2Frun%2Fpostgresql:5433/shop"
    assert conninfo_to_dict(conninfo) == {
        "host": "/var/run/postgresql",
        "port": "5433",
        "dbname": "shop",
    }


def test_a_task_s_options_make_the_jobledger_task_that_runs_it(tmp_path: Path) -> None:
    """The options of ``OPTIONS["tasks"][path]`` (and the backend's, for the others) are the
    registered task's: its budget, lease, timeout and backoff."""
    backoff = Backoff(base=0.5, cap=8)
    settings = parse(
        {
            "lease_seconds": 90,
            "tasks": {
                "shop.tasks.slow": {
                    "max_attempts": 2,
                    "lease_seconds": 120,
                    "timeout": 30,
                    "backoff": backoff,
                }
            },
        }
    )
    backend = SimpleNamespace(settings=settings)
    ledger = DjangoLedger(f"sqlite:///{tmp_path}/ledger.db", backend)  # type: ignore[arg-type]
    try:

        def django_task(path: str) -> Any:
            return SimpleNamespace(
                module_path=path, queue_name="default", func=lambda: None, takes_context=False
            )

        slow = ledger.django_task(django_task("shop.tasks.slow"))
        assert (slow.max_attempts, slow.lease_seconds, slow.timeout) == (2, 120, 30)
        assert slow.backoff == backoff
        other = ledger.django_task(django_task("shop.tasks.add"))
        assert (other.max_attempts, other.lease_seconds, other.timeout) == (10, 90, None)
        assert other.backoff == ledger.task(lambda ctx: None, name="plain").backoff
    finally:
        ledger.close()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([math.nan], r"args\[0\] is nan, which JSON cannot hold"),
        ([1, math.inf], r"args\[1\] is inf, which JSON cannot hold"),
        ([{"a": {1: "x"}}], r"args\[0\]\['a'\] has the key 1; JSON object keys are strings"),
        ([b"raw"], r"args\[0\] is a bytes \(b'raw'\), which JSON cannot hold"),
    ],
)
def test_arguments_json_cannot_hold_are_refused_naming_them(value: Any, message: str) -> None:
    """Checked before the job is written: JSON has no NaN or infinity, and its object keys are
    strings (``json.dumps`` would write ``NaN`` or turn ``1`` into ``"1"``, and the task would
    get other arguments than it was given)."""
    with pytest.raises(PayloadError, match=message):
        check_json(value, "args")
    assert check_json([(1, 2.5), {"k": [None, True]}], "args") == [[1, 2.5], {"k": [None, True]}]
