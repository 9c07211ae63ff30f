"""Groups over HTTP: publish into a group, see it on messages, list a queue's groups, set its
limits, pause and resume one group; scopes and problems, on each backend."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from .test_consume import receive
from .test_publish import assert_problem, publish


def put(api, tenant: str, count: int, queue: str = "q") -> list[str]:
    ids = []
    for n in range(count):
        response = publish(
            api.admin, {"queue": queue, "payload": {"n": n}, "group": tenant}, f"{tenant}:{n}"
        )
        assert response.status_code == 201, response.text
        ids.append(response.json()["message_id"])
    return ids


def groups_of(api, queue: str = "q", client=None) -> dict[str, dict]:
    response = (client or api.admin).get(f"/v1/queues/{queue}/groups")
    assert response.status_code == 200, response.text
    return {g["group"]: g for g in response.json()["groups"]}


def test_a_published_message_carries_its_group_and_a_replay_must_match_it(api):
    api.queue()
    [acme] = put(api, "acme", 1)
    plain = publish(api.admin, {"queue": "q", "payload": {}}, "plain").json()["message_id"]
    assert api.ledger.job(int(acme)).group == "acme"
    message = api.admin.get(f"/v1/messages/{acme}").json()
    assert message["group"] == "acme"
    assert api.admin.get(f"/v1/messages/{plain}").json()["group"] is None
    again = publish(api.admin, {"queue": "q", "payload": {"n": 0}, "group": "acme"}, "acme:0")
    assert again.status_code == 200 and again.json()["message_id"] == acme
    other = publish(api.admin, {"queue": "q", "payload": {"n": 0}, "group": "globex"}, "acme:0")
    assert_problem(other, 422, "key-reused")
    # A publish without a group replays as it did before groups existed.
    assert publish(api.admin, {"queue": "q", "payload": {}}, "plain").status_code == 200
    received = {m["key"]: m for m in receive(api.admin, max_messages=10)}
    assert received["acme:0"]["group"] == "acme" and received["plain"]["group"] is None


def test_a_batch_publishes_each_message_into_its_group(api):
    api.queue()
    body = {
        "queue": "q",
        "messages": [
            {"key": "a", "payload": {}, "group": "acme"},
            {"key": "b", "payload": {}},
        ],
    }
    results = api.admin.post("/v1/queue/publish-batch", json=body).json()["results"]
    assert [r["status"] for r in results] == [201, 201]
    jobs = {j.key: j.group for j in api.ledger.jobs()}
    assert jobs == {"a": "acme", "b": None}


@pytest.mark.parametrize("bad", ["", "x" * 201, "a\nb", 7])
def test_a_bad_group_is_refused(api, bad):
    api.queue()
    response = publish(api.admin, {"queue": "q", "payload": {}, "group": bad}, "k")
    body = assert_problem(response, 422, "validation-failed")
    assert body["errors"][0]["pointer"] == "/group"
    assert api.ledger.jobs() == []


def test_the_groups_of_a_queue_with_counts_limits_and_pauses(api):
    api.queue()
    put(api, "acme", 3)
    put(api, "globex", 2)
    limits = api.admin.put("/v1/queues/q/group-limits", json={"max_leased": 1, "rate": 10})
    assert limits.status_code == 200, limits.text
    assert limits.json() == {
        "queue": "q",
        "max_leased": 1,
        "rate": 10,
        "burst": None,
        "bucket_size": 10,
    }
    assert len(receive(api.admin, max_messages=10)) == 2  # one per group: the limit
    paused = api.admin.post(
        "/v1/queues/q/groups/acme/pause", json={"seconds": 600, "reason": "acme answers 429"}
    )
    assert paused.status_code == 200, paused.text
    assert paused.json()["group"] == "acme" and paused.json()["paused_reason"] == "acme answers 429"
    listing = api.admin.get("/v1/queues/q/groups").json()
    assert listing["limits"]["max_leased"] == 1
    groups = {g["group"]: g for g in listing["groups"]}
    acme, globex = groups["acme"], groups["globex"]
    assert (acme["pending"], acme["due"], acme["leased"]) == (2, 2, 1)
    assert (globex["pending"], globex["due"], globex["leased"]) == (1, 1, 1)
    until = datetime.fromisoformat(acme["paused_until"].replace("Z", "+00:00"))
    assert timedelta(seconds=590) < until - datetime.now(UTC) <= timedelta(seconds=600)
    assert acme["paused_until"].endswith("Z") and acme["served_at"].endswith("Z")
    assert globex["paused_until"] is None and globex["paused_reason"] is None
    assert 8 <= acme["tokens"] <= 10
    # An unknown (or undeclared) queue simply has no groups.
    empty = api.admin.get("/v1/queues/nothing-here/groups").json()
    assert empty["groups"] == [] and empty["limits"]["max_leased"] is None


def test_limits_are_replaced_by_put_and_refused_when_inconsistent(api):
    assert api.admin.get("/v1/queues/q/group-limits").json() == {
        "queue": "q",
        "max_leased": None,
        "rate": None,
        "burst": None,
        "bucket_size": None,
    }
    api.admin.put("/v1/queues/q/group-limits", json={"rate": 2, "burst": 5, "max_leased": 3})
    assert api.ledger.group_limits("q").burst == 5
    replaced = api.admin.put("/v1/queues/q/group-limits", json={"max_leased": 4, "rate": None})
    assert replaced.json()["max_leased"] == 4 and replaced.json()["rate"] is None
    assert api.ledger.group_limits("q").rate is None
    assert api.admin.put("/v1/queues/q/group-limits", json={}).json()["max_leased"] is None
    assert api.ledger.group_limits("q").unlimited
    for body, pointer in [
        ({"burst": 3}, None),
        ({"max_leased": 0}, "/max_leased"),
        ({"rate": 0}, "/rate"),
        ({"rate": 1e-300}, "/rate"),  # slower than one job in 11.6 days: meaningless
        ({"rate": 1, "burst": 0.5}, "/burst"),
        ({"max_leased": 10**9}, "/max_leased"),
    ]:
        problem = assert_problem(
            api.admin.put("/v1/queues/q/group-limits", json=body), 422, "validation-failed"
        )
        if pointer:
            assert problem["errors"][0]["pointer"] == pointer
    assert api.ledger.group_limits("q").unlimited


def test_a_paused_group_is_not_received_until_it_is_resumed(api):
    api.queue()
    put(api, "throttled", 2)
    put(api, "fine", 2)
    until = (datetime.now(UTC) + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    paused = api.admin.post("/v1/queues/q/groups/throttled/pause", json={"until": until})
    assert paused.status_code == 200, paused.text
    assert paused.json()["paused_reason"].startswith("paused by apikey:")
    assert {m["group"] for m in receive(api.admin, max_messages=10)} == {"fine"}
    # A shorter pause changes nothing: it only ever extends.
    shorter = api.admin.post("/v1/queues/q/groups/throttled/pause", json={"seconds": 5})
    assert shorter.json()["paused_until"] == paused.json()["paused_until"]
    resumed = api.admin.post("/v1/queues/q/groups/throttled/resume")
    assert resumed.status_code == 200 and resumed.json()["paused_until"] is None
    assert resumed.json()["pending"] == 2
    assert {m["group"] for m in receive(api.admin, max_messages=10)} == {"throttled"}
    # Resuming a group that is not paused (or has no jobs at all) answers the same way.
    again = api.admin.post("/v1/queues/q/groups/nobody/resume")
    assert again.status_code == 200 and again.json()["pending"] == 0


def test_a_group_name_with_spaces_and_colons_is_reached_url_encoded(api):
    api.queue()
    put(api, "acme corp:eu", 1)
    response = api.admin.post("/v1/queues/q/groups/acme%20corp%3Aeu/pause", json={"seconds": 60})
    assert response.status_code == 200, response.text
    assert groups_of(api)["acme corp:eu"]["paused_until"] is not None


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"seconds": 60, "until": "2099-01-01T00:00:00Z"},
        {"until": "2020-01-01T00:00:00Z"},
        {"until": "2999-01-01T00:00:00Z"},
        {"until": "2026-08-10T06:00:00"},
        {"seconds": 0},
        {"seconds": 366 * 86400},
    ],
)
def test_a_pause_needs_one_sensible_time(api, body):
    response = api.admin.post("/v1/queues/q/groups/g/pause", json=body)
    assert_problem(response, 422, "validation-failed")
    assert groups_of(api) == {}


def test_reading_groups_needs_read_and_changing_them_admin(api):
    api.queue()
    put(api, "acme", 1)
    reader = api.client(api.key("read"))
    publisher = api.client(api.key("publish:q", "consume:q"))
    anonymous = api.client(None)
    assert "acme" in groups_of(api, client=reader)
    assert reader.get("/v1/queues/q/group-limits").status_code == 200
    for client, status, kind in [(publisher, 403, "forbidden"), (anonymous, 401, "unauthorized")]:
        assert_problem(client.get("/v1/queues/q/groups"), status, kind)
        assert_problem(client.get("/v1/queues/q/group-limits"), status, kind)
    for client, status, kind in [
        (reader, 403, "forbidden"),
        (publisher, 403, "forbidden"),
        (anonymous, 401, "unauthorized"),
    ]:
        assert_problem(
            client.put("/v1/queues/q/group-limits", json={"max_leased": 1}), status, kind
        )
        assert_problem(
            client.post("/v1/queues/q/groups/acme/pause", json={"seconds": 60}), status, kind
        )
        assert_problem(client.post("/v1/queues/q/groups/acme/resume"), status, kind)
    assert api.ledger.group_limits("q").unlimited
    assert groups_of(api)["acme"]["paused_until"] is None


def test_a_nack_can_hold_back_the_whole_group(api):
    api.queue()
    put(api, "throttled", 3)
    [first] = receive(api.admin, max_messages=1)
    needs_time = api.admin.post(
        "/v1/queue/nack", json={"receipt": first["receipt"], "pause_group": True}
    )
    assert_problem(needs_time, 422, "validation-failed")
    nacked = api.admin.post(
        "/v1/queue/nack",
        json={
            "receipt": first["receipt"],
            "retry_after_seconds": 3600,
            "pause_group": True,
            "error_class": "RateLimited",
        },
    )
    assert nacked.status_code == 200, nacked.text
    assert nacked.json()["group_paused_until"] == nacked.json()["run_at"]
    group = groups_of(api)["throttled"]
    assert group["paused_until"] is not None and "RateLimited" in group["paused_reason"]
    # The group's other two messages are held back; another group's are not.
    put(api, "fine", 1)
    assert [m["group"] for m in receive(api.admin, max_messages=10)] == ["fine"]
    # A plain nack pauses nothing.
    put(api, "other", 1)
    [other] = receive(api.admin, max_messages=10)
    plain = api.admin.post(
        "/v1/queue/nack", json={"receipt": other["receipt"], "retry_after_seconds": 3600}
    )
    assert plain.status_code == 200 and plain.json()["group_paused_until"] is None
    assert groups_of(api)["other"]["paused_until"] is None
