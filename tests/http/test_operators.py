"""Operators over HTTP: lookup by id and key with the attempt history, redrive, resolve."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jobledger import JobState

from .test_consume import receive
from .test_publish import assert_problem, publish


def make_dead(api, key, error="HTTP 400: template missing", queue="q"):
    publish(api.admin, {"queue": queue, "payload": {"key": key}}, key)
    [m] = [m for m in receive(api.admin, queue, max_messages=100) if m["key"] == key]
    response = api.admin.post(
        "/v1/queue/nack", json={"receipt": m["receipt"], "error": error, "permanent": True}
    )
    assert response.json()["state"] == "dead"
    return m["message_id"]


def test_message_by_id_with_its_history(api):
    api.queue(max_attempts=3)
    publish(api.admin, {"queue": "q", "payload": {"n": 1}}, "k")
    [m] = receive(api.admin, consumer="c1")
    api.admin.post(
        "/v1/queue/nack", json={"receipt": m["receipt"], "error": "boom", "retry_after_seconds": 0}
    )
    [m2] = receive(api.admin, consumer="c2")
    api.admin.post("/v1/queue/ack", json={"receipt": m2["receipt"]})
    body = api.admin.get(f"/v1/messages/{m['message_id']}").json()
    assert (body["state"], body["key"], body["attempts"], body["attempts_left"]) == (
        "done",
        "k",
        2,
        1,
    )
    attempts = body["history"]["attempts"]
    assert [(a["attempt"], a["outcome"], a["error"]) for a in attempts] == [
        (1, "retry", "boom"),
        (2, "done", None),
    ]
    assert attempts[0]["worker"].endswith(":c1") and attempts[1]["worker"].endswith(":c2")
    assert "lease_token" not in str(body) and m2["receipt"].split(".")[1] not in str(body)
    assert_problem(api.admin.get("/v1/messages/999999"), 404, "not-found")
    assert_problem(api.admin.get("/v1/messages/abc"), 422, "validation-failed")


def test_messages_by_key_and_by_state_with_paging(api):
    api.queue()
    dead = [make_dead(api, f"dead-{n}") for n in range(3)]
    publish(api.admin, {"queue": "q", "payload": {}}, "alive")
    by_key = api.admin.get("/v1/queues/q/messages", params={"key": "dead-1"}).json()
    assert [m["message_id"] for m in by_key["messages"]] == [dead[1]]
    assert by_key["messages"][0]["history"]["attempts"][0]["outcome"] == "dead"
    assert api.admin.get("/v1/queues/q/messages", params={"key": "none"}).json()["messages"] == []
    page = api.admin.get("/v1/queues/q/messages", params={"state": "dead", "limit": 2}).json()
    assert [m["message_id"] for m in page["messages"]] == dead[:2]
    assert page["next_after"] == dead[1]
    rest = api.admin.get(
        "/v1/queues/q/messages", params={"state": "dead", "after": page["next_after"]}
    ).json()
    assert [m["message_id"] for m in rest["messages"]] == dead[2:]
    assert rest["next_after"] is None
    assert_problem(
        api.admin.get("/v1/queues/q/messages", params={"state": "zombie"}), 422, "validation-failed"
    )


def test_redrive_with_filters_dry_run_actor_and_reason(api):
    api.queue()
    template = [make_dead(api, f"t{n}", "HTTP 400: template missing") for n in range(2)]
    auth = make_dead(api, "a0", "HTTP 401: bad credentials")
    preview = api.admin.post(
        "/v1/queues/q/redrive",
        json={"reason": "template fixed", "error_contains": "template", "dry_run": True},
    ).json()
    assert preview == {"dry_run": True, "message_ids": template, "skipped": []}
    assert all(api.ledger.job(int(i)).state is JobState.DEAD for i in template)
    done = api.admin.post(
        "/v1/queues/q/redrive",
        json={"reason": "template fixed", "error_contains": "template", "actor": "ana"},
    ).json()
    assert done["message_ids"] == template and not done["dry_run"]
    for message_id in template:
        job = api.ledger.job(int(message_id))
        assert job.state is JobState.PENDING and job.budget_left == 10
        [event] = api.ledger.backend.history.events(job.id)
        assert event.kind == "redrive" and event.note == "template fixed"
        assert event.actor.startswith("ana via apikey:")
    assert api.ledger.job(int(auth)).state is JobState.DEAD
    # Redriven messages are received again, with their history kept.
    got = receive(api.admin, max_messages=10)
    assert sorted(m["message_id"] for m in got) == sorted(template)
    assert {m["attempt"] for m in got} == {2}


def test_redrive_by_ids_with_a_rate_and_budget(api):
    api.queue()
    ids = [make_dead(api, f"k{n}") for n in range(3)]
    done = api.admin.post(
        "/v1/queues/q/redrive",
        json={"reason": "retry", "message_ids": ids[:2], "rate": 100, "budget": 2},
    ).json()
    assert done["message_ids"] == ids[:2]
    assert api.ledger.job(int(ids[0])).budget_left == 2
    assert api.ledger.job(int(ids[2])).state is JobState.DEAD
    too_slow = api.admin.post(
        "/v1/queues/q/redrive", json={"reason": "r", "limit": 1000, "rate": 1}
    )
    assert_problem(too_slow, 422, "validation-failed")


def test_redrive_by_time_range(api):
    api.queue()
    old = make_dead(api, "old")
    cutoff = datetime.now(UTC) + timedelta(milliseconds=1)
    while datetime.now(UTC) <= cutoff:
        pass
    new = make_dead(api, "new")
    stamp = cutoff.isoformat().replace("+00:00", "Z")
    before = api.admin.post(
        "/v1/queues/q/redrive", json={"reason": "r", "until": stamp, "dry_run": True}
    ).json()
    after = api.admin.post(
        "/v1/queues/q/redrive", json={"reason": "r", "since": stamp, "dry_run": True}
    ).json()
    assert before["message_ids"] == [old] and after["message_ids"] == [new]
    bad = api.admin.post("/v1/queues/q/redrive", json={"reason": "r", "since": "yesterday"})
    assert_problem(bad, 422, "validation-failed")


def test_resolve_one_message(api):
    api.queue()
    dead = make_dead(api, "k")
    response = api.admin.post(
        f"/v1/messages/{dead}/resolve", json={"note": "sent by hand", "actor": "ana"}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["state"] == "done"
    [event] = body["history"]["events"]
    assert (event["kind"], event["note"]) == ("resolve", "sent by hand")
    assert event["actor"].startswith("ana via apikey:")
    again = api.admin.post(f"/v1/messages/{dead}/resolve", json={"note": "twice"})
    assert_problem(again, 409, "invalid-transition")
    pending = publish(api.admin, {"queue": "q", "payload": {}}, "p").json()["message_id"]
    back = api.admin.post(
        f"/v1/messages/{pending}/resolve", json={"note": "checked", "state": "pending"}
    )
    assert back.status_code == 200 and back.json()["state"] == "pending"
    assert_problem(
        api.admin.post("/v1/messages/424242/resolve", json={"note": "n"}), 404, "not-found"
    )
