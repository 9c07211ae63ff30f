"""The edges of the HTTP API: a header sent twice, the shortest lease, ``nosniff`` on every
answer, what a receipt tells a key that may not consume, and a document that says what the
server really requires (secrets, payloads, backoff)."""

from __future__ import annotations

import base64
import os
import re

import pytest

from jobledger._services.subscriptions import create_subscription
from jobledger._webhooks import MAX_SECRET_BYTES, MIN_SECRET_BYTES
from jobledger.errors import ConfigError
from jobledger.http import ServerSettings
from jobledger.http.routes.subscriptions import SECRET

from ..observability.test_dashboard import login
from .test_consume import receive
from .test_publish import assert_problem, publish

PUBLISH = {"queue": "q", "payload": {"n": 1}}


def test_two_idempotency_keys_are_refused_and_nothing_is_published(api):
    api.queue()
    response = api.admin.post(
        "/v1/queue/publish",
        json=PUBLISH,
        headers=[("Idempotency-Key", "k1"), ("Idempotency-Key", "k2")],
    )
    body = assert_problem(response, 400, "invalid-header")
    assert "Idempotency-Key" in body["detail"] and "2 times" in body["detail"]
    assert api.ledger.jobs() == []
    assert publish(api.admin, PUBLISH, "k1").status_code == 201


@pytest.mark.parametrize("seconds", [0.0001, 0.5, 0.999])
def test_a_lease_shorter_than_a_second_is_refused(api, seconds):
    api.queue()
    publish(api.admin, PUBLISH, "k")
    short = api.admin.post("/v1/queue/receive", json={"queue": "q", "lease_seconds": seconds})
    assert_problem(short, 422, "validation-failed")
    assert api.ledger.jobs()[0].attempts == 0  # nothing was claimed
    [m] = receive(api.admin, lease_seconds=1)
    extend = api.admin.post(
        "/v1/queue/extend", json={"receipt": m["receipt"], "lease_seconds": seconds}
    )
    assert_problem(extend, 422, "validation-failed")
    assert api.admin.put("/v1/queues/q2", json={"lease_seconds": seconds}).status_code == 422
    ok = api.admin.post("/v1/queue/extend", json={"receipt": m["receipt"], "lease_seconds": 1})
    assert ok.status_code == 200, ok.text


def test_every_answer_says_nosniff(api):
    api.queue()
    anonymous = api.client(None)
    reader = api.client(api.key("read"))
    answers = {
        "404 of an unknown path, which repeats the path": anonymous.get("/<script>x</script>"),
        "405": anonymous.delete("/healthz"),
        "401": anonymous.get("/v1/queues"),
        "403": api.client(api.key("publish:q")).get("/v1/messages/1"),
        "404 of a route": api.admin.get("/v1/messages/1"),
        "422": api.admin.put("/v1/queues/q", json={"max_attempts": 0}),
        "400": api.admin.post(
            "/v1/queue/publish", content=b"{", headers={"Content-Type": "application/json"}
        ),
        "415": api.admin.post("/v1/queue/publish", content=b"{}"),
        "200": api.admin.get("/v1/queues/q"),
        "201": publish(api.admin, PUBLISH, "k"),
        "healthz": anonymous.get("/healthz"),
        "openapi": anonymous.get("/openapi.json"),
        "metrics": reader.get("/metrics"),
        "dashboard login": anonymous.get("/ui/login"),
        "dashboard redirect": anonymous.get("/"),
        "static file": anonymous.get("/ui/static/dashboard.css"),
        "static 404": anonymous.get("/ui/static/nope.css"),
        "dashboard page": login(api, api.admin_key).get("/"),
    }
    assert "&lt;script&gt;" not in answers["404 of an unknown path, which repeats the path"].text
    for what, response in answers.items():
        assert response.headers.get("x-content-type-options") == "nosniff", (
            what,
            response.status_code,
            dict(response.headers),
        )


def test_a_receipt_tells_a_key_without_consume_nothing_about_the_queue(api):
    """A made-up receipt for a message of a queue the key may not consume is answered exactly
    as one for a message that does not exist, so receipts cannot probe which ids exist."""
    api.queue("private")
    api.queue("mine")
    publish(api.admin, {"queue": "private", "payload": {}}, "secret-order")
    [held] = receive(api.admin, "private")
    existing = int(held["message_id"])
    missing = existing + 1000
    outsider = api.client(api.key("consume:mine"))
    token = "0" * 32
    for path, extra in (
        ("/v1/queue/ack", {}),
        ("/v1/queue/nack", {"error": "probe"}),
        ("/v1/queue/extend", {"lease_seconds": 30}),
    ):
        answers = [
            outsider.post(path, json={"receipt": f"{job_id}.{token}", **extra})
            for job_id in (existing, missing)
        ]
        bodies = [a.json() for a in answers]
        assert [a.status_code for a in answers] == [409, 409], bodies
        assert bodies[0] == {
            **bodies[1],
            "message_id": str(existing),
            "detail": bodies[1]["detail"].replace(str(missing), str(existing)),
        }
        assert dict(answers[0].headers).keys() == dict(answers[1].headers).keys()
    # The receipt's own holder is still told 403 (it already knows the message exists).
    own = outsider.post("/v1/queue/ack", json={"receipt": held["receipt"]})
    assert_problem(own, 403, "forbidden")
    assert api.ledger.backend.history.events(existing) == []


def test_the_secret_pattern_is_exactly_what_the_server_accepts(ledger):
    pattern = re.compile(SECRET.pattern)
    candidates = []
    for size in range(MIN_SECRET_BYTES - 3, MAX_SECRET_BYTES + 4):
        encoded = base64.b64encode(os.urandom(size)).decode()
        candidates += [
            "whsec_" + encoded,
            "whsec_" + encoded.rstrip("="),
            "whsec_" + encoded + "=",
            "whsec_" + encoded[:-1],
            "whsec_" + encoded.replace("A", "-", 1),
            "whsec_" + encoded[:-3] + "R==",  # unused bits set
            "whsec_" + encoded[:-2] + "B=",
        ]
    candidates += ["whsec_", "whsec_A", "whsec_====", "nope_" + "A" * 44, "whsec_" + "A" * 43]
    for n, secret in enumerate(candidates):
        try:
            create_subscription(ledger.backend, f"q{n}", "https://example.com/", secret=secret)
            accepted = True
        except ConfigError:
            accepted = False
        assert bool(pattern.match(secret)) == accepted, secret


def test_the_document_says_payload_strings_hold_no_nul_and_backoff_cap_is_at_least_base(api):
    document = api.admin.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    publish_body = schemas["PublishRequest"]["properties"]["payload"]
    assert publish_body["additionalProperties"] == {"$ref": "#/components/schemas/JsonValue"}
    assert publish_body["propertyNames"]["pattern"] == "^[^\\u0000]*$"
    strings = [s for s in schemas["JsonValue"]["anyOf"] if s.get("type") == "string"]
    assert strings == [{"type": "string", "pattern": "^[^\\u0000]*$"}]
    backoff = schemas["QueueSettings"]["properties"]["backoff"]
    assert "cap_seconds must be at least base_seconds" in backoff["description"]
    nul = api.admin.post("/v1/queue/publish", json={"queue": "q", "payload": {"a": ["x\u0000y"]}})
    assert_problem(nul, 422, "validation-failed")


def test_backoff_bounds_left_out_follow_the_one_given(api):
    low_cap = api.admin.put("/v1/queues/q", json={"backoff": {"cap_seconds": 1}})
    assert low_cap.status_code == 201, low_cap.text
    assert low_cap.json()["backoff"] == {"base_seconds": 1, "cap_seconds": 1}
    high_base = api.admin.put("/v1/queues/q", json={"backoff": {"base_seconds": 7200}})
    assert high_base.json()["backoff"] == {"base_seconds": 7200, "cap_seconds": 7200}
    crossed = api.admin.put(
        "/v1/queues/q", json={"backoff": {"base_seconds": 10, "cap_seconds": 5}}
    )
    body = assert_problem(crossed, 422, "validation-failed")
    assert body["errors"] == [{"pointer": "/backoff/cap_seconds", "detail": "below base_seconds"}]


def test_a_burst_without_a_rate_points_at_the_burst(api):
    for path, body in (
        ("/v1/queues/q/group-limits", {"burst": 5}),
        ("/v1/subscriptions", {"queue": "q", "url": "https://example.com/", "burst": 5}),
    ):
        method = api.admin.put if path.endswith("limits") else api.admin.post
        problem = assert_problem(method(path, json=body), 422, "validation-failed")
        assert [e["pointer"] for e in problem["errors"]] == ["/burst"]


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"default_rate": 0}, "default rate must be > 0"),
        ({"default_burst": 5}, "a default burst needs a default rate"),
        ({"default_rate": 1, "default_burst": 0.5}, "default burst must be >= 1"),
        ({"max_wait_seconds": 20.5}, "max_wait_seconds must be 0..20"),
        ({"max_wait_seconds": -1}, "max_wait_seconds must be 0..20"),
        ({"rescue_interval": 0}, "rescue_interval must be > 0"),
        ({"poll_interval": 0}, "poll_interval must be > 0"),
        ({"snapshot_seconds": 3601}, "snapshot_seconds must be 0..3600"),
        ({"finished_seconds": 86401}, "finished_seconds must be 0..86400"),
        ({"dashboard_refresh_seconds": 0.1}, "dashboard_refresh_seconds must be 0.2..3600"),
        ({"session_seconds": 59}, "session_seconds must be 60..2592000"),
        ({"session_seconds": 30 * 86400 + 1}, "session_seconds must be 60..2592000"),
    ],
)
def test_bad_server_settings_are_refused_naming_them(settings, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        ServerSettings(**settings)


def test_server_settings_at_their_bounds_are_accepted():
    # Every range above is inclusive at both ends.
    for settings in (
        {"default_rate": 0.001, "default_burst": 1},
        {"max_wait_seconds": 0, "snapshot_seconds": 0, "finished_seconds": 0},
        {"max_wait_seconds": 20, "snapshot_seconds": 3600, "finished_seconds": 86400},
        {"dashboard_refresh_seconds": 0.2, "session_seconds": 60},
        {"dashboard_refresh_seconds": 3600, "session_seconds": 30 * 86400},
    ):
        ServerSettings(**settings)
