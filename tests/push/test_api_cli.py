"""Subscriptions over the HTTP API and the CLI; the delivery loop inside the server and as
``jobledger push``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import standardwebhooks

from jobledger import JobState
from jobledger.http import ServerSettings

from ..cli.conftest import assert_one_line_error, cli  # noqa: F401 - the cli fixture
from ..support.http import api_server
from ..support.processes import ROOT, wait_exit, wait_until
from .conftest import fast_settings, publish


def test_subscriptions_over_the_api(ledger, endpoint):
    ep = endpoint()
    with api_server(ledger, ServerSettings(push=fast_settings())) as api:
        admin = api.admin
        created = admin.post("/v1/subscriptions", json={"queue": "weekly", "url": ep.url})
        assert created.status_code == 201, created.text
        sub = created.json()
        assert sub["secret"].startswith("whsec_") and sub["health"] == "new"
        again = admin.post("/v1/subscriptions", json={"queue": "weekly", "url": ep.url})
        assert again.status_code == 409
        assert again.json()["type"] == "urn:jobledger:problem:subscription-exists"
        assert again.json()["subscription_id"] == sub["id"]
        bad = admin.post("/v1/subscriptions", json={"queue": "q2", "url": "https://u:p@x/"})
        assert bad.status_code == 422 and "credentials" in bad.json()["detail"]
        publisher = api.client(api.key("publish:weekly"))
        assert (
            publisher.post("/v1/subscriptions", json={"queue": "w", "url": ep.url}).status_code
            == 403
        )
        assert publisher.get("/v1/subscriptions").status_code == 403
        # Every route on one subscription is the admin's too: rotate answers with the new
        # secret, and any of them could stop or redirect a queue's deliveries.
        one = f"/v1/subscriptions/{sub['id']}"
        for method, path in [
            ("GET", one),
            ("POST", f"{one}/pause"),
            ("POST", f"{one}/resume"),
            ("POST", f"{one}/rotate"),
            ("DELETE", one),
        ]:
            refused = publisher.request(method, path, json=None if method != "POST" else {})
            assert refused.status_code == 403, (method, path, refused.text)
        # The loop in the server delivers what is published.
        api.queue("weekly")
        published = publisher.post(
            "/v1/queue/publish",
            json={"queue": "weekly", "payload": {"customer": 4187}},
            headers={"Idempotency-Key": "4187:2026-W33"},
        )
        assert published.status_code == 201
        wait_until(lambda: ep.count() == 1, what="the delivery")
        [request] = ep.requests
        event = standardwebhooks.Webhook(sub["secret"]).verify(request.body, request.headers)
        assert event["data"] == {"customer": 4187}
        assert request.headers["webhook-id"] == "4187:2026-W33"
        wait_until(
            lambda: admin.get(f"/v1/subscriptions/{sub['id']}").json()["delivered"] == 1,
            what="the health to be recorded",
        )
        listed = admin.get("/v1/subscriptions").json()["subscriptions"]
        assert [s["id"] for s in listed] == [sub["id"]] and "secret" not in listed[0]
        assert listed[0]["health"] == "healthy"
        paused = admin.post(f"/v1/subscriptions/{sub['id']}/pause", json={"reason": "deploy"})
        assert paused.json()["state"] == "paused"
        assert paused.json()["state_actor"].startswith("apikey:")
        resumed = admin.post(f"/v1/subscriptions/{sub['id']}/resume", json={})
        assert resumed.json()["state"] == "active"
        rotated = admin.post(f"/v1/subscriptions/{sub['id']}/rotate", json={"overlap_seconds": 60})
        assert rotated.json()["secret"] != sub["secret"]
        assert rotated.json()["previous_secret_until"] is not None
        assert admin.delete(f"/v1/subscriptions/{sub['id']}").status_code == 200
        assert admin.get(f"/v1/subscriptions/{sub['id']}").status_code == 404
        assert admin.post("/v1/subscriptions/sub_000000000000/pause", json={}).status_code == 404


def test_subscriptions_from_the_cli(cli, ledger, tmp_path):  # noqa: F811
    db = ledger.url.raw
    made = cli(
        "subscriptions",
        "create",
        "--url",
        db,
        "-q",
        "hooks",
        "--endpoint",
        "https://hooks.example/in",
        "--rate",
        "5",
        "--json",
    )
    assert made.code == 0, made.err
    sub = made.json()
    assert sub["secret"].startswith("whsec_") and sub["rate_per_second"] == 5.0
    plain = cli(
        "subscriptions",
        "create",
        "--url",
        db,
        "-q",
        "other",
        "--endpoint",
        "https://other.example/in",
    )
    assert plain.code == 0 and plain.out.startswith("whsec_") and "not shown again" in plain.err
    listed = cli("subscriptions", "list", "--url", db, "--json")
    assert [s["queue"] for s in listed.json()] == ["hooks", "other"]
    assert "whsec_" not in listed.out
    table = cli("subscriptions", "list", "--url", db)
    assert sub["id"] in table.out and "new" in table.out
    assert cli("subscriptions", "pause", "--url", db, sub["id"], "--reason", "deploy").code == 0
    assert ledger.backend.subscriptions.get(sub["id"]).state_reason == "deploy"
    assert "paused: deploy" in cli("subscriptions", "list", "--url", db).out
    assert cli("subscriptions", "resume", "--url", db, sub["id"]).code == 0
    rotated = cli("subscriptions", "rotate", "--url", db, sub["id"], "--overlap", "1h", "--json")
    assert rotated.json()["secret"] != sub["secret"]
    assert cli("subscriptions", "delete", "--url", db, sub["id"]).code == 0
    assert_one_line_error(cli("subscriptions", "delete", "--url", db, sub["id"]), "no subscription")
    assert_one_line_error(
        cli("subscriptions", "create", "--url", db, "-q", "other", "--endpoint", "https://x/"),
        "already has subscription",
    )
    assert_one_line_error(
        cli("subscriptions", "create", "--url", db, "-q", "x", "--endpoint", "ftp://x/"),
        "https://",
    )
    assert_one_line_error(
        cli(
            "subscriptions",
            "create",
            "--url",
            db,
            "-q",
            "x",
            "--endpoint",
            "https://x/",
            "--secret",
            "whsec_nope",
        ),
        "secret",
    )
    assert_one_line_error(cli("push", "--url", db, "--push-allow-network", "localhost"), "allow")


@pytest.mark.slow
def test_jobledger_push_delivers_and_stops_on_sigterm(ledger, endpoint):
    ep = endpoint()
    from .conftest import subscribe

    sub = subscribe(ledger, ep.url)
    job_id = publish(ledger, "k1")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("JOBLEDGER_FAULTS", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jobledger",
            "push",
            "--url",
            ledger.url.raw,
            "--push-allow-network",
            "127.0.0.1",
            "--poll-interval",
            "0.1",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(lambda: ledger.job(job_id).state is JobState.DONE, what="the delivery")
    finally:
        proc.send_signal(signal.SIGTERM)  # it is delivering: its handler is in place
        code, out, _ = wait_exit(proc, 30)
    assert code == 0, out
    assert "jobledger push delivering" in out and f"push {sub.id} job {job_id}" in out
    assert "stopped" in out
    standardwebhooks.Webhook(sub.secret).verify(ep.requests[0].body, ep.requests[0].headers)


@pytest.mark.slow
def test_jobledger_serve_runs_the_delivery_loop(ledger, endpoint):
    from ..support.http import ServeProcess
    from .conftest import subscribe

    ep = endpoint()
    sub = subscribe(ledger, ep.url)
    job_id = publish(ledger, "k1")
    server = ServeProcess(ledger.url.raw, "--push-allow-network", "127.0.0.1")
    try:
        wait_until(lambda: ledger.job(job_id).state is JobState.DONE, what="the delivery")
    finally:
        server.stop()
    standardwebhooks.Webhook(sub.secret).verify(ep.requests[0].body, ep.requests[0].headers)
    assert f"push {sub.id} job {job_id}" in server.output


def test_show_prints_a_push_jobs_error_once(cli, ledger, endpoint, push):  # noqa: F811
    """A 400 with the body ``ok``: the job's error is ``HTTP 400: ok``, not ``HTTP 400: HTTP 400:
    ok`` — the class (the status) is recorded once, beside the message (the body)."""
    from ..support.endpoints import scripted
    from .conftest import subscribe

    ep = endpoint(scripted((400, {}, b"ok")))
    subscribe(ledger, ep.url)
    job_id = publish(ledger, "k1")
    push()
    wait_until(lambda: ledger.job(job_id).state is JobState.DEAD, what="the job to be dead")
    [attempt] = ledger.history(job_id).attempts
    assert (attempt.error_class, attempt.error_message) == ("HTTP 400", "ok")
    shown = cli("show", "k1", "--url", ledger.url.raw)
    assert shown.code == 0, shown.err
    assert shown.out.count("HTTP 400: ok") == 2  # the job's last error, and the attempt's
    assert "HTTP 400: HTTP 400" not in shown.out
