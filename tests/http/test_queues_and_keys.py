"""Declared queues and API keys: the routes, the CLI, 401 vs 403, keys stored hashed."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from jobledger import ConfigError
from jobledger._records import QueueSettings, digest
from jobledger.cli import main

from .test_publish import assert_problem, publish


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(capsys):
    """Run ``jobledger ARGS --url URL`` in this process (the same ``main`` as the script)."""

    def run(*args: str, url: str) -> Result:
        capsys.readouterr()
        try:
            main([*args, "--url", url])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


def test_put_creates_then_replaces_a_queue(api):
    created = api.admin.put("/v1/queues/emails", json={"max_attempts": 4, "lease_seconds": 30})
    assert created.status_code == 201, created.text
    body = created.json()
    assert (body["name"], body["task"], body["max_attempts"], body["lease_seconds"]) == (
        "emails",
        "emails",
        4,
        30,
    )
    assert body["retention_seconds"] == 30 * 86400 and body["require_idempotency_key"] is False
    assert body["backoff"] == {"base_seconds": 2, "cap_seconds": 3600}
    assert body["counts"] == {"pending": 0, "leased": 0, "done": 0, "dead": 0, "cancelled": 0}
    replaced = api.admin.put(
        "/v1/queues/emails",
        json={"task": "send_email", "require_idempotency_key": True, "retention_seconds": 86400},
    )
    assert replaced.status_code == 200
    body = replaced.json()
    assert (body["task"], body["max_attempts"], body["require_idempotency_key"]) == (
        "send_email",
        10,
        True,
    )
    assert body["created_at"] == created.json()["created_at"]


def test_a_queue_s_timeout_is_declared_read_and_cleared(api, cli, db_url):
    body = api.admin.put("/v1/queues/slow", json={"timeout_seconds": 120}).json()
    assert body["timeout_seconds"] == 120
    assert api.ledger.queue_settings.get("slow").settings.timeout_seconds == 120.0
    assert api.admin.get("/v1/queues/slow").json()["timeout_seconds"] == 120
    # PUT replaces: a body without it clears it.
    assert api.admin.put("/v1/queues/slow", json={}).json()["timeout_seconds"] is None
    result = cli("queues", "create", "slower", "--timeout", "5m", "--json", url=db_url)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["timeout_seconds"] == 300.0


def test_invalid_queue_settings_are_422(api):
    for settings in (
        {"timeout_seconds": 0},
        {"timeout_seconds": -1},
        {"max_attempts": 0},
        {"lease_seconds": 0},
        {"retention_seconds": 3600},
        {"backoff": {"base_seconds": 10, "cap_seconds": 5}},
        {"task": "9 not a task"},
        {"unknown": 1},
    ):
        assert_problem(api.admin.put("/v1/queues/q", json=settings), 422, "validation-failed")
    assert api.ledger.backend.api.queues() == []


def test_queue_settings_at_their_widest_are_accepted(api):
    # Every upper bound is inclusive, over HTTP as in Python: a queue kept ten years, retried
    # weekly up to 1,000 times.
    week, ten_years = 7 * 86400, 3650 * 86400
    settings = {
        "max_attempts": 1000,
        "backoff": {"base_seconds": week, "cap_seconds": week},
        "retention_seconds": ten_years,
        "timeout_seconds": week,
    }
    response = api.admin.put("/v1/queues/q", json=settings)
    assert response.status_code == 201, response.text
    stored = api.ledger.queue_settings.get("q").settings
    assert (stored.max_attempts, stored.backoff_base, stored.backoff_cap) == (1000, week, week)
    assert (stored.retention_seconds, stored.timeout_seconds) == (ten_years, week)
    for name, value in (("retention_seconds", ten_years + 1), ("max_attempts", 1001)):
        over = api.admin.put("/v1/queues/q2", json={name: value})
        assert_problem(over, 422, "validation-failed")
    with pytest.raises(ConfigError, match="require_key must be true or false"):
        QueueSettings("q3", require_key="yes")


@pytest.mark.parametrize(
    "fields",
    [
        {"backoff_base": 0},
        {"backoff_base": 10, "backoff_cap": 5},
        {"backoff_base": 7 * 86400 + 0.5, "backoff_cap": 7 * 86400 + 0.5},
        {"retention_seconds": 3650 * 86400 + 0.5},
        {"backoff_base": True},
        {"backoff_base": float("nan")},
        {"retention_seconds": float("inf")},
    ],
    ids=str,
)
def test_queue_settings_built_in_python_refuse_what_the_http_api_refuses(fields):
    """The CLI and Python callers build ``QueueSettings`` without the HTTP API's schema in
    front of it: the settings check their own bounds (a backoff of zero, a cap below its base,
    more than a week, a bool or a number that is not finite)."""
    with pytest.raises(ConfigError):
        QueueSettings("q", **fields)


def test_a_queue_may_name_itself_as_its_task_even_when_that_is_no_task_name():
    """A queue's name may start with a digit, a task's may not; the default task is the
    queue's name whatever it is, and naming it explicitly is the same as leaving it out."""
    assert QueueSettings("9-digests", task="9-digests").task == "9-digests"


def test_queue_names_are_checked(api):
    assert_problem(api.admin.put("/v1/queues/-bad", json={}), 422, "validation-failed")
    assert_problem(api.admin.get("/v1/queues/" + "a" * 129), 422, "validation-failed")


def test_get_queue_shows_counts_and_oldest_due_age(api):
    api.queue()
    for n in range(3):
        publish(api.admin, {"queue": "q", "payload": {"n": n}}, f"k{n}")
    api.admin.post("/v1/queue/receive", json={"queue": "q", "max_messages": 1})
    body = api.admin.get("/v1/queues/q").json()
    assert body["counts"] == {"pending": 2, "leased": 1, "done": 0, "dead": 0, "cancelled": 0}
    assert body["oldest_due_pending_seconds"] >= 0
    assert_problem(api.admin.get("/v1/queues/never-declared"), 404, "not-found")


def test_keys_see_only_their_queues(api):
    for name in ("a", "b", "c"):
        api.queue(name)
    publisher = api.client(api.key("publish:a", "consume:b"))
    names = [q["name"] for q in publisher.get("/v1/queues").json()["queues"]]
    assert names == ["a", "b"]
    assert [q["name"] for q in api.admin.get("/v1/queues").json()["queues"]] == ["a", "b", "c"]
    assert publisher.get("/v1/queues/a").status_code == 200
    assert_problem(publisher.get("/v1/queues/c"), 403, "forbidden")
    assert_problem(publisher.put("/v1/queues/d", json={}), 403, "forbidden")


def test_a_read_key_sees_every_queue_and_changes_none(api):
    # A read key is the one an operator's tooling uses to look at everything: it holds no
    # per-queue scope, yet must list and read every queue (and still declare none).
    for name in ("a", "b"):
        api.queue(name)
    reader = api.client(api.key("read"))
    assert [q["name"] for q in reader.get("/v1/queues").json()["queues"]] == ["a", "b"]
    assert reader.get("/v1/queues/b").json()["name"] == "b"
    assert_problem(reader.put("/v1/queues/c", json={}), 403, "forbidden")


def test_missing_or_bad_keys_are_401(api):
    api.queue()
    for header in (None, "Bearer", "Basic dXNlcjpwYXNz", "Bearer jlk_0000000000_wrong", "Token a"):
        headers = {"Authorization": header} if header is not None else {}
        for method, path, body in (
            ("POST", "/v1/queue/publish", {"queue": "q", "payload": {}}),
            ("GET", "/v1/queues", None),
            ("PUT", "/v1/queues/q", {}),
            ("GET", "/v1/messages/1", None),
        ):
            response = api.client(None).request(method, path, json=body, headers=headers)
            problem = assert_problem(response, 401, "unauthorized")
            assert response.headers["www-authenticate"].startswith("Bearer")
            assert "jlk_" not in problem["detail"]


def test_the_bearer_scheme_is_case_insensitive_and_extra_spaces_before_the_key_are_ignored(api):
    # RFC 9110 makes the scheme case-insensitive: a client that writes "bearer" is not wrong.
    api.queue()
    for header in (f"bearer {api.admin_key}", f"BEARER   {api.admin_key}"):
        response = api.client(None).get("/v1/queues", headers={"Authorization": header})
        assert response.status_code == 200, (header, response.text)


def test_a_revoked_key_stops_working(api):
    api.queue()
    key = api.key("publish:q")
    client = api.client(key)
    assert publish(client, {"queue": "q", "payload": {}}).status_code == 201
    record = api.ledger.backend.api.key_get(digest(key))
    api.ledger.backend.api.key_revoke(record.id)
    assert_problem(publish(client, {"queue": "q", "payload": {}}), 401, "unauthorized")


def test_admin_routes_need_admin(api):
    api.queue()
    key = api.client(api.key("publish:*", "consume:*"))
    for method, path, body in (
        ("PUT", "/v1/queues/q", {}),
        ("GET", "/v1/messages/1", None),
        ("GET", "/v1/queues/q/messages", None),
        ("POST", "/v1/queues/q/redrive", {"reason": "r"}),
        ("POST", "/v1/messages/1/resolve", {"note": "n"}),
    ):
        assert_problem(key.request(method, path, json=body), 403, "forbidden")


def test_unknown_routes_and_methods_are_problems(api):
    assert_problem(api.admin.get("/v1/nothing-here"), 404, "not-found")
    response = api.admin.delete("/v1/queues/q")
    assert_problem(response, 405, "method-not-allowed")
    assert response.headers["allow"] == "GET, PUT"


def test_healthz(api):
    response = api.client(None).get("/healthz")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"
    assert response.json()["database"] == api.ledger.url.dialect
    # The schema version it answers is the database's, a string in its OpenAPI schema.
    assert response.json()["schema_version"] == str(api.ledger.schema_version())


def test_keys_are_stored_as_digests_only(api):
    key = api.key("admin")
    backend = api.ledger.backend
    table = "jobledger_api_keys"
    if api.ledger.url.dialect == "postgres":
        table = f"{api.ledger.url.schema}.{table}"
    with backend.transaction() as conn:
        rows = conn.execute(f"SELECT id, digest, name, scopes FROM {table}").fetchall()
    stored = " ".join(str(v) for row in rows for v in row)
    assert key not in stored and key.split("_")[-1] not in stored
    assert digest(key) in stored


def test_cli_keys_and_queues(cli, db_url):
    assert cli("migrate", url=db_url).returncode == 0
    made = cli(
        "keys", "create", "--name", "billing", "--scope", "publish:invoices", "--json", url=db_url
    )
    assert made.returncode == 0, made.stderr
    record = json.loads(made.stdout)
    assert record["key"].startswith(f"jlk_{record['id']}_")
    assert record["scopes"] == ["publish:invoices"]
    plain = cli("keys", "create", "--name", "ops", "--scope", "admin", url=db_url)
    assert plain.returncode == 0 and plain.stdout.startswith("jlk_")
    assert "not shown again" in plain.stderr
    listed = json.loads(cli("keys", "list", "--json", url=db_url).stdout)
    assert [k["name"] for k in listed] == ["billing", "ops"]
    assert all("key" not in k for k in listed)
    table = cli("keys", "list", url=db_url).stdout
    assert record["id"] in table and record["key"] not in table
    revoked = cli("keys", "revoke", record["id"], url=db_url)
    assert revoked.returncode == 0 and record["id"] in revoked.stdout
    assert json.loads(cli("keys", "list", "--json", url=db_url).stdout)[0]["revoked_at"]

    declared = cli(
        "queues", "create", "invoices", "--max-attempts", "5", "--retention", "7d",
        "--require-key", url=db_url,
    )  # fmt: skip
    assert declared.returncode == 0 and "declared queue invoices" in declared.stdout
    again = cli("queues", "create", "invoices", "--lease-seconds", "90", url=db_url)
    assert "updated queue invoices" in again.stdout
    [queue] = json.loads(cli("queues", "list", "--json", url=db_url).stdout)
    assert (queue["name"], queue["max_attempts"], queue["lease_seconds"]) == ("invoices", 10, 90)
    assert "invoices" in cli("queues", "list", url=db_url).stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (("keys", "create", "--name", "x", "--scope", "publish"), "scope 'publish' is invalid"),
        (("keys", "create", "--name", "x", "--scope", "root"), "is invalid"),
        (("keys", "revoke", "nope"), "no API key with id 'nope'"),
        (("queues", "create", "bad name"), "queue name 'bad name' is invalid"),
        (("queues", "create", "q", "--retention", "1h"), "retention_seconds must be >= 86400"),
        (("queues", "create", "q", "--retention", "soon"), "not a duration"),
    ],
)
def test_cli_errors_are_one_line(cli, tmp_path, args, message):
    url = f"sqlite:///{tmp_path}/ledger.db"
    cli("migrate", url=url)
    result = cli(*args, url=url)
    assert result.returncode == 2, result
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "name, scopes, message",
    [
        ("", ["admin"], "a key name is 1-200 characters"),
        ("   ", ["admin"], "a key name is 1-200 characters"),
        ("x" * 201, ["admin"], "a key name is 1-200 characters"),
        ("line\nbreak", ["admin"], "control characters"),
        # Each driver raised its own UnicodeEncodeError when the key was stored.
        ("ops\ud800", ["admin"], "cannot contain half of a surrogate pair"),
        ("ops", [], "needs at least one scope"),
        ("ops", ["publish:bad name"], "queue name 'bad name' is invalid"),
        ("ops", ["admin", 42], "a scope must be a string, got 42"),
        ("ops", [None], "a scope must be a string, got None"),
    ],
)
def test_a_key_with_a_bad_name_or_scope_is_refused_and_not_stored(ledger, name, scopes, message):
    with pytest.raises(ConfigError, match=message):
        ledger.keys.create(name, scopes)
    assert ledger.keys.list() == []


def test_a_key_s_name_and_scopes_are_stored_trimmed_and_once(ledger):
    _, record = ledger.keys.create(" ops ", [" admin ", "publish:q", "publish:q"])
    assert (record.name, record.scopes) == ("ops", ("admin", "publish:q"))
    _, longest = ledger.keys.create("x" * 200, "read consume:*")
    assert longest.scopes == ("read", "consume:*")


@pytest.mark.parametrize(
    "limits, message",
    [
        ({"rate_per_second": 0}, "rate must be >= 0.001"),
        ({"rate_per_second": 0.0005}, "rate must be >= 0.001"),
        ({"rate_per_second": float("inf")}, "rate must be a number"),
        ({"rate_per_second": True}, "rate must be a number"),
        ({"rate_per_second": 1, "burst": 0.5}, "burst must be >= 1"),
        ({"burst": 5}, "burst needs a rate"),
    ],
)
def test_a_key_with_a_bad_publish_limit_is_refused_and_not_stored(ledger, limits, message):
    with pytest.raises(ConfigError, match=message):
        ledger.keys.create("ops", ["publish:q"], **limits)
    assert ledger.keys.list() == []


def test_a_key_s_burst_defaults_to_its_rate_and_at_least_one(ledger):
    # A burst below 1 would refuse every publish: a message costs 1.
    slow = ledger.keys.create("slow", ["publish:q"], rate_per_second=0.001)[1]
    fast = ledger.keys.create("fast", ["publish:q"], rate_per_second=5)[1]
    assert (slow.rate_per_second, slow.burst) == (0.001, 1.0)
    assert (fast.rate_per_second, fast.burst) == (5.0, 5.0)


def test_cli_on_an_unmigrated_database_says_what_to_do(cli, tmp_path):
    result = cli(
        "keys", "create", "--name", "x", "--scope", "admin", url=f"sqlite:///{tmp_path}/x.db"
    )
    assert result.returncode == 2 and "jobledger migrate" in result.stderr
    served = cli("serve", "--port", "0", url=f"sqlite:///{tmp_path}/x.db")
    assert served.returncode == 2 and "jobledger migrate" in served.stderr


def test_an_unavailable_database_is_503_and_a_bug_is_500(api, monkeypatch, caplog):
    from jobledger import BackendUnavailable

    api.queue()
    backend = api.ledger.backend

    def down(*args, **kwargs):
        raise BackendUnavailable("PostgreSQL at postgresql://app@db/app is unavailable: gone")

    def bug(*args, **kwargs):
        raise RuntimeError("a bug with a secret in its message")

    monkeypatch.setattr(backend.api, "queue_get", down)
    problem = assert_problem(publish(api.admin, {"queue": "q", "payload": {}}), 503, "unavailable")
    assert "postgresql://" not in problem["detail"]
    monkeypatch.setattr(backend, "schema_version", down)
    assert_problem(api.client(None).get("/healthz"), 503, "unavailable")
    monkeypatch.setattr(backend.api, "queue_get", bug)
    problem = assert_problem(
        publish(api.admin, {"queue": "q", "payload": {}}), 500, "internal-error"
    )
    assert "secret" not in problem["detail"]
    assert "a bug with a secret" in caplog.text  # logged, with its traceback, for the operator


@pytest.mark.parametrize("presented", ["\ud800", "jl_é", 7, None, b"jl_x"], ids=repr)
def test_a_presented_key_no_key_can_be_is_unknown(ledger, presented):
    """Every key is ASCII text: anything else authenticates nobody, and raises nothing (a lone
    surrogate was a UnicodeEncodeError when hashed, a number an AttributeError)."""
    key, _ = ledger.keys.create("ops", "admin")
    assert ledger.keys.authenticate(presented) is None
    assert ledger.keys.authenticate(key) is not None
