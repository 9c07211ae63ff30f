"""The OpenAPI document describes every route, request and error — checked by reading it, and by
schemathesis generating requests from it against a real server on each backend."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from jobledger import Ledger
from jobledger._records import AttemptOutcome, QueueSettings
from jobledger._services.keys import create_api_key
from jobledger.http.api import _PathApp
from jobledger.http.routes import DEFAULT_GROUPS

from ..support.http import ServeProcess
from ..support.processes import ROOT
from ..support.waiting import run as run_patiently

#: Examples per operation and phase. Bounded so that the run takes seconds, not minutes; raise
#: it (JOBLEDGER_SCHEMATHESIS_EXAMPLES) for a deeper run.
EXAMPLES = int(os.environ.get("JOBLEDGER_SCHEMATHESIS_EXAMPLES", "10"))
SEED = os.environ.get("JOBLEDGER_SCHEMATHESIS_SEED", "20261130")


def test_the_document_describes_every_route_and_method(api):
    document = api.client(None).get("/openapi.json").json()
    assert document["openapi"] == "3.1.0"
    documented = {
        (path, method.upper()) for path, ops in document["paths"].items() for method in ops
    }
    served = {
        (route.path, method)
        for route in api.server.app.routes
        if isinstance(route.app, _PathApp)
        for method in route.app.methods
    }
    assert served == documented
    operations = {(op.path, op.method) for g in DEFAULT_GROUPS for op in g.operations}
    assert operations == documented
    expected = {
        ("/healthz", "GET"),
        ("/openapi.json", "GET"),
        ("/v1/queues", "GET"),
        ("/v1/queues/{name}", "GET"),
        ("/v1/queues/{name}", "PUT"),
        ("/v1/queue/publish", "POST"),
        ("/v1/queue/publish-batch", "POST"),
        ("/v1/queue/receive", "POST"),
        ("/v1/queue/ack", "POST"),
        ("/v1/queue/nack", "POST"),
        ("/v1/queue/extend", "POST"),
        ("/v1/messages/{message_id}", "GET"),
        ("/v1/queues/{name}/messages", "GET"),
        ("/v1/queues/{name}/redrive", "POST"),
        ("/v1/messages/{message_id}/resolve", "POST"),
        ("/v1/queues/{name}/groups", "GET"),
        ("/v1/queues/{name}/group-limits", "GET"),
        ("/v1/queues/{name}/group-limits", "PUT"),
        ("/v1/queues/{name}/groups/{group}/pause", "POST"),
        ("/v1/queues/{name}/groups/{group}/resume", "POST"),
        ("/v1/subscriptions", "GET"),
        ("/v1/subscriptions", "POST"),
        ("/v1/subscriptions/{subscription_id}", "GET"),
        ("/v1/subscriptions/{subscription_id}", "DELETE"),
        ("/v1/subscriptions/{subscription_id}/pause", "POST"),
        ("/v1/subscriptions/{subscription_id}/resume", "POST"),
        ("/v1/subscriptions/{subscription_id}/rotate", "POST"),
    }
    assert documented == expected


def test_every_operation_documents_its_errors_as_problems(api):
    document = api.client(None).get("/openapi.json").json()
    assert "Problem" in document["components"]["schemas"]
    for path, operations in document["paths"].items():
        for method, op in operations.items():
            where = f"{method.upper()} {path}"
            statuses = {int(s) for s in op["responses"]}
            assert {500, 503} <= statuses, where
            assert any(200 <= s < 300 for s in statuses), where
            if op["security"]:
                assert 401 in statuses, where
            if "requestBody" in op:
                assert {400, 413, 415, 422} <= statuses, where
            for status, response in op["responses"].items():
                if int(status) >= 400:
                    assert list(response["content"]) == ["application/problem+json"], where
            assert op["summary"] and op["operationId"], where
    publish = document["paths"]["/v1/queue/publish"]["post"]
    assert {400, 401, 403, 404, 409, 413, 415, 422, 429} <= {int(s) for s in publish["responses"]}
    assert publish["responses"]["429"]["headers"]["Retry-After"]["required"] is True
    assert "Idempotent-Replayed" in publish["responses"]["200"]["headers"]
    assert [p["name"] for p in publish["parameters"]] == ["Idempotency-Key"]


def test_the_attempt_outcomes_it_names_are_the_ledgers(api):
    """Every outcome of an attempt the server can answer is in the document's enum (an attempt
    that timed out answered an outcome the document lacked)."""
    schemas = api.client(None).get("/openapi.json").json()["components"]["schemas"]
    [named, null] = schemas["Attempt"]["properties"]["outcome"]["anyOf"]
    assert set(named["enum"]) == {o.value for o in AttemptOutcome} and null == {"type": "null"}


@pytest.mark.slow
def test_schemathesis_finds_no_server_errors_and_no_schema_violations(db_url, tmp_path):
    """Generated requests — valid and invalid, every operation, stateful sequences — against
    ``jobledger serve``: no 5xx, every status, header, content type and body as documented,
    invalid input refused with 4xx, no auth answered 401, undocumented methods 405.

    ``positive_data_acceptance`` is left out on purpose: a schema-valid publish that reuses a key
    with another body must be 422 (the API's contract), as must a nack that is both permanent
    and delayed, and an HTTP redrive whose pacing would outlast 60 s. In its place runs
    ``schema_valid_requests_are_not_refused_as_invalid`` (``schemathesis_checks.py``): a
    request the document calls valid is never refused as invalid, except by the cross-field
    rules it lists — so a requirement the document does not state fails the run.
    """
    ledger = Ledger(db_url)
    ledger.migrate()
    key, _ = create_api_key(ledger.backend, "schemathesis", ["admin"])
    ledger.backend.api.queue_put(QueueSettings("weekly-digests", max_attempts=2))
    ledger.close()
    # --no-push: the subscriptions schemathesis makes point at made-up URLs; nothing is sent.
    server = ServeProcess(db_url, "--no-access-log", "--rescue-interval", "0.5", "--no-push")
    try:
        st = Path(sys.executable).with_name("st")
        seen = tmp_path / "checked.txt"
        env = dict(
            os.environ,
            SCHEMATHESIS_HOOKS="tests.http.schemathesis_checks",
            JOBLEDGER_SCHEMATHESIS_SEEN=str(seen),
        )
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        run = run_patiently(
            [
                str(st),
                "run",
                f"{server.url}/openapi.json",
                "--header",
                f"Authorization: Bearer {key}",
                "--max-examples",
                str(EXAMPLES),
                "--seed",
                SEED,
                "--checks",
                "all",
                "--exclude-checks",
                "positive_data_acceptance",
                "--workers",
                "1",
                "--request-timeout",
                "30",
            ],
            cwd=tmp_path,
            env=env,
            text=True,
            timeout=240,
        )
    finally:
        code = server.stop()
    report = run.stdout + run.stderr
    # A 500 says only that the error was logged: the server's log says what it was.
    assert run.returncode == 0, f"{report}\n--- the server's errors:\n{_errors(server.output)}"
    assert "passed" in report and "Stateful" in report
    # The check that a valid request is never refused as invalid saw every operation
    # (schemathesis leaves out the document's own route).
    checked = set(seen.read_text().splitlines())
    operations = {f"{op.method} {op.path}" for g in DEFAULT_GROUPS for op in g.operations}
    assert checked == operations - {"GET /openapi.json"}, operations - checked
    # uvicorn ends a graceful shutdown by re-raising SIGTERM.
    assert code in (0, -15) and "Application shutdown complete" in server.output, code
    assert "unexpected error" not in server.output and "Traceback" not in server.output


def _errors(log: str) -> str:
    """The server log's error records, each with the traceback that follows it."""
    lines, keep = [], False
    for line in log.splitlines():
        if " ERROR " in line or "Traceback" in line:
            keep = True
        elif " INFO " in line or " WARNING " in line:
            keep = False
        if keep:
            lines.append(line)
    return "\n".join(lines[-200:]) or "(none logged)"
