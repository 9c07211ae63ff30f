"""Publishing over HTTP: every status the publish routes answer, on both backends."""

from __future__ import annotations

import json
import socket
import threading

from jobledger import JobState
from jobledger import _faults as faults
from jobledger.http import ServerSettings

from ..support.http import api_server
from ..support.processes import wait_until

PROBLEM = "application/problem+json"


def publish(client, body, key=None, **headers):
    if key is not None:
        headers["Idempotency-Key"] = key
    return client.post("/v1/queue/publish", json=body, headers=headers)


def assert_problem(response, status, kind):
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert body["type"] == f"urn:jobledger:problem:{kind}"
    assert body["status"] == status and body["title"] and body["detail"]
    return body


def test_created_then_replayed_with_the_same_message_id(api):
    api.queue("weekly-digests")
    body = {"queue": "weekly-digests", "payload": {"customer_id": 4187}, "priority": 3}
    first = publish(api.admin, body, "4187:2026-W33")
    assert first.status_code == 201, first.text
    created = first.json()
    assert "idempotent-replayed" not in first.headers
    assert created["key"] == "4187:2026-W33" and created["queue"] == "weekly-digests"
    assert created["state"] == "pending" and created["run_at"].endswith("Z")
    # Same key, same body (fields in another order): a replay.
    again = publish(api.admin, dict(reversed(list(body.items()))), "4187:2026-W33")
    assert again.status_code == 200, again.text
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == created
    job = api.ledger.job(int(created["message_id"]))
    assert (job.key, job.payload, job.priority, job.task) == (
        "4187:2026-W33",
        {"customer_id": 4187},
        3,
        "weekly-digests",
    )
    assert len(api.ledger.jobs()) == 1


def test_replay_reports_the_current_state(api):
    api.queue()
    first = publish(api.admin, {"queue": "q", "payload": {}}, "k").json()
    [message] = api.admin.post("/v1/queue/receive", json={"queue": "q"}).json()["messages"]
    api.admin.post("/v1/queue/ack", json={"receipt": message["receipt"]})
    again = publish(api.admin, {"queue": "q", "payload": {}}, "k")
    assert again.status_code == 200 and again.json()["message_id"] == first["message_id"]
    assert again.json()["state"] == "done"


def test_same_key_different_body_is_422_and_changes_nothing(api):
    api.queue()
    body = {"queue": "q", "payload": {"customer_id": 4187}}
    created = publish(api.admin, body, "k").json()
    for change in ({"payload": {"customer_id": 1}}, {"priority": 1}, {"delay_seconds": 60}):
        problem = assert_problem(publish(api.admin, body | change, "k"), 422, "key-reused")
        assert problem["message_id"] == created["message_id"]
    [job] = api.ledger.jobs()
    assert job.payload == {"customer_id": 4187} and job.priority == 0


def test_a_key_enqueued_from_python_replays_when_the_payload_matches(api):
    api.queue()
    job_id, _ = api.ledger.enqueue("q", {"a": 1}, key="k", queue="q")
    replay = publish(api.admin, {"queue": "q", "payload": {"a": 1}}, "k")
    assert replay.status_code == 200 and replay.json()["message_id"] == str(job_id)
    assert_problem(publish(api.admin, {"queue": "q", "payload": {"a": 2}}, "k"), 422, "key-reused")


def test_a_key_enqueued_from_python_for_another_task_is_reused_whatever_the_payload(api):
    # As for an enqueue, and for a key whose job was pruned: a key names one job of one task.
    api.queue()
    api.ledger.enqueue("other", {"a": 1}, key="k", queue="q")
    assert_problem(publish(api.admin, {"queue": "q", "payload": {"a": 1}}, "k"), 422, "key-reused")


def test_without_a_key_the_server_assigns_one(api):
    api.queue()
    a = publish(api.admin, {"queue": "q", "payload": {}})
    b = publish(api.admin, {"queue": "q", "payload": {}})
    assert a.status_code == b.status_code == 201
    assert a.json()["key"].startswith("auto:") and a.json()["key"] != b.json()["key"]


def test_a_queue_that_requires_a_key_answers_400_without_one(api):
    api.queue(require_idempotency_key=True)
    assert_problem(
        publish(api.admin, {"queue": "q", "payload": {}}), 400, "idempotency-key-required"
    )
    assert publish(api.admin, {"queue": "q", "payload": {}}, "k").status_code == 201
    assert len(api.ledger.jobs()) == 1


def test_unknown_queue_is_404(api):
    assert_problem(
        publish(api.admin, {"queue": "never-declared", "payload": {}}, "k"), 404, "not-found"
    )
    assert api.ledger.jobs() == []


def nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


INVALID = [
    ({"queue": "q", "payload": {}, "delay_seconds": 604801}, "/delay_seconds"),
    ({"queue": "q", "payload": {}, "delay_seconds": -1}, "/delay_seconds"),
    ({"queue": "q", "payload": [1, 2]}, "/payload"),
    ({"queue": "q", "payload": "text"}, "/payload"),
    ({"queue": "q"}, "/payload"),
    ({"queue": "q", "payload": {}, "priority": 1.5}, "/priority"),
    ({"queue": "q", "payload": {}, "priority": True}, "/priority"),
    ({"queue": "q", "payload": {}, "delay_seconds": True}, "/delay_seconds"),
    ({"queue": "q", "payload": {}, "extra": 1}, "/extra"),
    ({"queue": "bad name", "payload": {}}, "/queue"),
    ({"queue": "q", "payload": {"s": "nul\u0000"}}, "/payload/s"),
    ({"queue": "q", "payload": {"deep": nested(70)}}, "/payload"),
    ([], ""),
]


def test_invalid_bodies_are_422_naming_the_field(api):
    api.queue()
    for body, pointer in INVALID:
        problem = assert_problem(publish(api.admin, body, "k"), 422, "validation-failed")
        pointers = [e["pointer"] for e in problem["errors"]]
        assert any(p.startswith(pointer) for p in pointers), (body, pointers)
    assert api.ledger.jobs() == []


def test_an_unpaired_surrogate_is_422_naming_where_it_is(api):
    """JSON may escape half of a surrogate pair (``"\\ud800"``), which no UTF-8 text (and no
    database) can hold: refused as invalid Unicode where it is, in a field, a payload's value
    or a payload's key; nothing is stored."""
    api.queue()
    headers = {"Content-Type": "application/json", "Idempotency-Key": "k"}
    for body, pointer in [
        (rb'{"queue": "q\ud800", "payload": {}}', "/queue"),
        (rb'{"queue": "q", "payload": {"s": ["ok", "\udc00 alone"]}}', "/payload/s/1"),
        (rb'{"queue": "q", "payload": {"\ud800": 1}}', "/payload"),
    ]:
        response = api.admin.post("/v1/queue/publish", content=body, headers=headers)
        problem = assert_problem(response, 422, "validation-failed")
        assert [(e["pointer"], e["detail"]) for e in problem["errors"]] == [
            (pointer, "is not valid Unicode (unpaired surrogate)")
        ], body
    assert api.ledger.jobs() == []
    paired = rb'{"queue": "q", "payload": {"s": "\ud83d\ude00"}}'  # a pair is one character
    response = api.admin.post("/v1/queue/publish", content=paired, headers=headers)
    assert response.status_code == 201, response.text
    assert api.ledger.job(int(response.json()["message_id"])).payload == {"s": "\U0001f600"}


def test_a_json_body_with_a_charset_parameter_is_accepted(api):
    # "application/json; charset=utf-8" is what many clients send: the media type is what counts.
    api.queue()
    response = api.admin.post(
        "/v1/queue/publish",
        content=json.dumps({"queue": "q", "payload": {}}).encode(),
        headers={"Content-Type": "Application/JSON; charset=utf-8", "Idempotency-Key": "k"},
    )
    assert response.status_code == 201, response.text


def test_delay_at_the_limits_is_accepted(api):
    api.queue()
    now = publish(api.admin, {"queue": "q", "payload": {}, "delay_seconds": 0}, "a")
    week = publish(api.admin, {"queue": "q", "payload": {}, "delay_seconds": 604800}, "b")
    assert now.status_code == week.status_code == 201
    assert (
        api.ledger.job(int(week.json()["message_id"])).run_at
        > api.ledger.job(int(now.json()["message_id"])).run_at
    )


def test_malformed_json_and_wrong_content_type(api):
    api.queue()
    headers = {"Content-Type": "application/json", "Idempotency-Key": "k"}
    nested = b'{"queue": "q", "payload": {"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}"
    for raw in (b"{not json", b"", b'{"queue": "q", "payload": {"x": NaN}}', nested):
        response = api.admin.post("/v1/queue/publish", content=raw, headers=headers)
        assert_problem(response, 400, "malformed-request")
    response = api.admin.post(
        "/v1/queue/publish", content=b"queue=q", headers={"Content-Type": "text/plain"}
    )
    assert_problem(response, 415, "unsupported-media-type")


def test_an_invalid_idempotency_key_header_is_400(api):
    api.queue()
    for bad in ("x" * 513, "caf\u00e9"):
        response = api.admin.post(
            "/v1/queue/publish",
            json={"queue": "q", "payload": {}},
            headers={"Idempotency-Key": bad.encode("utf-8")},
        )
        assert_problem(response, 400, "invalid-header")
    assert api.ledger.jobs() == []


def test_body_over_256_kib_is_413(api):
    api.queue()
    big = {"queue": "q", "payload": {"blob": "a" * (256 * 1024)}}
    response = publish(api.admin, big, "k")
    assert_problem(response, 413, "payload-too-large")
    assert response.headers["connection"] == "close"
    assert api.ledger.jobs() == []


def test_chunked_body_over_the_limit_is_413_without_content_length(api):
    api.queue()

    def chunks():
        yield b'{"queue": "q", "payload": {"blob": "'
        for _ in range(100):
            yield b"a" * 8192

    response = api.admin.post(
        "/v1/queue/publish",
        content=chunks(),
        headers={"Content-Type": "application/json", "Idempotency-Key": "k"},
    )
    assert_problem(response, 413, "payload-too-large")


def test_payload_over_256_kib_once_encoded_is_413(api):
    api.queue()
    # 1e5 is 3 bytes here and 8 ("100000.0") once encoded: the body fits, the payload does not.
    raw = b'{"queue": "q", "payload": {"n": [' + b",".join([b"1e5"] * 40000) + b"]}}"
    assert len(raw) < 256 * 1024
    response = api.admin.post(
        "/v1/queue/publish",
        content=raw,
        headers={"Content-Type": "application/json", "Idempotency-Key": "k"},
    )
    assert_problem(response, 413, "payload-too-large")


def test_a_request_with_the_key_in_flight_gets_409(api):
    """A second request with a key while the first is still being written: 409, then the first
    finishes (201) and a retry of the second is a replay (200)."""
    api.queue()
    body = {"queue": "q", "payload": {"n": 1}}
    results = {}
    faults.configure("publish.in_transaction=sleep:1.5@1")
    try:
        first = threading.Thread(target=lambda: results.update(a=publish(api.admin, body, "k")))
        first.start()
        wait_until(lambda: ("q", "k") in api.server.state.in_flight, what="the first publish")
        second = publish(api.admin, body, "k")
        first.join()
    finally:
        faults.configure(None)
    assert_problem(second, 409, "key-in-flight")
    assert results["a"].status_code == 201
    retry = publish(api.admin, body, "k")
    assert retry.status_code == 200 and retry.json() == results["a"].json()
    assert len(api.ledger.jobs()) == 1


def test_concurrent_publishes_with_one_key_make_one_job(api):
    api.queue()
    body = {"queue": "q", "payload": {"n": 1}}
    statuses = []
    barrier = threading.Barrier(8)

    def go(key):
        barrier.wait()
        statuses.append((key, publish(api.admin, body, key)))

    for round_ in range(5):
        threads = [threading.Thread(target=go, args=(f"k{round_}",)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for round_ in range(5):
        answers = [r for k, r in statuses if k == f"k{round_}"]
        codes = sorted(r.status_code for r in answers)
        assert codes.count(201) == 1 and set(codes) <= {200, 201, 409}, codes
        ids = {r.json()["message_id"] for r in answers if r.status_code in (200, 201)}
        assert len(ids) == 1
    assert len(api.ledger.jobs()) == 5


def test_rate_limit_answers_429_with_retry_after(api):
    api.queue()
    limited = api.client(api.key("publish:q", rate=0.5, burst=2))
    codes = [publish(limited, {"queue": "q", "payload": {"n": n}}).status_code for n in range(3)]
    assert codes == [201, 201, 429]
    refused = publish(limited, {"queue": "q", "payload": {"n": 3}})
    problem = assert_problem(refused, 429, "rate-limited")
    assert (
        refused.headers["Retry-After"].isdigit() and 1 <= int(refused.headers["Retry-After"]) <= 2
    )
    assert problem["retry_after"] == int(refused.headers["Retry-After"])
    assert len(api.ledger.jobs()) == 2
    # Another key has a bucket of its own.
    assert publish(api.admin, {"queue": "q", "payload": {"n": 9}}).status_code == 201


def test_a_batch_costs_its_size_capped_at_the_burst(api):
    # Otherwise a batch would be a way round the limit (500 messages for the price of one), or,
    # uncapped, a batch bigger than the burst would be refused forever.
    api.queue()
    limited = api.client(api.key("publish:q", rate=0.001, burst=3))
    batch = {"queue": "q", "messages": [{"key": f"b{n}", "payload": {}} for n in range(5)]}
    assert limited.post("/v1/queue/publish-batch", json=batch).status_code == 200
    assert_problem(publish(limited, {"queue": "q", "payload": {}}, "one"), 429, "rate-limited")
    assert len(api.ledger.jobs()) == 5


def test_the_server_s_default_rate_limits_keys_without_their_own(ledger):
    # --default-rate and --default-burst: the limit of every key that has none, each key with
    # a bucket of its own; a key's own rate still wins.
    settings = ServerSettings(default_rate=0.001, default_burst=2)
    with api_server(ledger, settings) as served:
        served.queue()
        plain = served.client(served.key("publish:q"))
        codes = [
            publish(plain, {"queue": "q", "payload": {}}, f"p{n}").status_code for n in range(3)
        ]
        assert codes == [201, 201, 429]
        other = served.client(served.key("publish:q"))
        assert publish(other, {"queue": "q", "payload": {}}, "o0").status_code == 201
        own = served.client(served.key("publish:q", rate=100, burst=5))
        codes = [publish(own, {"queue": "q", "payload": {}}, f"k{n}").status_code for n in range(5)]
        assert codes == [201] * 5


def test_rate_limit_is_shared_by_two_servers_on_one_database(api, ledger):
    """The bucket lives in the database: a second server process (here, a second app with its
    own connections) sees what the first spent."""
    from jobledger import Ledger

    from ..support.http import api_server

    api.queue()
    key = api.key("publish:q", rate=0.1, burst=3)
    other_ledger = Ledger(ledger.url.raw)
    try:
        with api_server(other_ledger) as other:
            one, two = api.client(key), other.client(key)
            codes = [publish(c, {"queue": "q", "payload": {}}).status_code for c in (one, two, one)]
            assert codes == [201, 201, 201]
            assert publish(two, {"queue": "q", "payload": {}}).status_code == 429
            assert publish(one, {"queue": "q", "payload": {}}).status_code == 429
    finally:
        other_ledger.close()


def test_publish_batch_gives_each_message_its_own_result(api):
    api.queue()
    publish(api.admin, {"queue": "q", "payload": {"n": 0}}, "k0")
    messages = [
        {"key": "k0", "payload": {"n": 0}},  # replay of the single publish
        {"key": "k1", "payload": {"n": 1}},
        {"key": "k0", "payload": {"n": 99}},  # key reused with another payload
        {"key": "k1", "payload": {"n": 1}},  # same key twice in the batch: a replay
        {"payload": {"n": 2}, "delay_seconds": 30, "priority": 5},
    ]
    response = api.admin.post("/v1/queue/publish-batch", json={"queue": "q", "messages": messages})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["status"] for r in results] == [200, 201, 422, 200, 201]
    assert [r["index"] for r in results] == [0, 1, 2, 3, 4]
    assert results[3]["message_id"] == results[1]["message_id"]
    assert results[2]["error"]["type"] == "urn:jobledger:problem:key-reused"
    assert results[4]["key"].startswith("auto:")
    assert len(api.ledger.jobs()) == 3
    assert api.ledger.job(int(results[4]["message_id"])).priority == 5


def test_a_new_key_named_twice_in_a_batch_with_another_body_is_422_the_second_time(api):
    """A key new to the ledger, named twice in one batch: the first message creates its job,
    the second is a replay of it with the same body and reuses the key with another one."""
    api.queue()
    messages = [
        {"key": "k", "payload": {"n": 1}},
        {"key": "k", "payload": {"n": 2}},
        {"key": "k", "payload": {"n": 1}},
    ]
    response = api.admin.post("/v1/queue/publish-batch", json={"queue": "q", "messages": messages})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["status"] for r in results] == [201, 422, 200]
    assert results[1]["error"]["type"] == "urn:jobledger:problem:key-reused"
    assert results[2]["message_id"] == results[0]["message_id"]
    [job] = api.ledger.jobs()
    assert job.payload == {"n": 1}


def test_publish_batch_limits(api):
    api.queue()
    too_many = [{"payload": {"n": n}} for n in range(501)]
    response = api.admin.post("/v1/queue/publish-batch", json={"queue": "q", "messages": too_many})
    assert_problem(response, 422, "validation-failed")
    full = [{"key": f"k{n}", "payload": {"n": n}} for n in range(500)]
    response = api.admin.post("/v1/queue/publish-batch", json={"queue": "q", "messages": full})
    assert response.status_code == 200
    assert [r["status"] for r in response.json()["results"]] == [201] * 500
    assert len(api.ledger.jobs()) == 500
    api.queue("strict", require_idempotency_key=True)
    response = api.admin.post(
        "/v1/queue/publish-batch", json={"queue": "strict", "messages": [{"payload": {}}]}
    )
    assert_problem(response, 400, "idempotency-key-required")
    response = api.admin.post(
        "/v1/queue/publish-batch", json={"queue": "nope", "messages": [{"payload": {}}]}
    )
    assert_problem(response, 404, "not-found")


def test_published_jobs_carry_the_queue_settings(api):
    api.queue("emails", task="send_email", max_attempts=4, lease_seconds=45)
    created = publish(api.admin, {"queue": "emails", "payload": {"to": 7}}, "e7").json()
    job = api.ledger.job(int(created["message_id"]))
    assert (job.task, job.max_attempts, job.lease_seconds, job.state) == (
        "send_email",
        4,
        45.0,
        JobState.PENDING,
    )


def test_a_python_worker_runs_jobs_published_over_http(api):
    api.queue("emails", task="send_email")
    sent = []

    @api.ledger.task(name="send_email", queue="emails")
    def send_email(ctx, to: int) -> None:
        sent.append((ctx.key, to))

    publish(api.admin, {"queue": "emails", "payload": {"to": 7}}, "welcome:7")
    api.ledger.run_worker(["emails"], burst=True, handle_signals=False)
    assert sent == [("welcome:7", 7)]


def read_until_closed(sock):
    """Everything the server sends until it closes the connection (413 closes it)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data.decode()


def test_the_body_is_refused_from_content_length_before_it_is_sent(api):
    """Headers alone get the 413: the server does not wait for (or read) the body."""
    api.queue()
    host, port = api.url.removeprefix("http://").split(":")
    key = api.admin_key
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            (
                "POST /v1/queue/publish HTTP/1.1\r\n"
                f"Host: {host}\r\nAuthorization: Bearer {key}\r\n"
                "Content-Type: application/json\r\nContent-Length: 104857600\r\n\r\n"
            ).encode()
        )
        answer = read_until_closed(sock)
    assert answer.startswith("HTTP/1.1 413"), answer
    body = json.loads(answer.split("\r\n\r\n", 1)[1])
    assert body["type"] == "urn:jobledger:problem:payload-too-large"


def test_publish_is_refused_to_keys_without_the_scope(api):
    api.queue()
    api.queue("other")
    consumer = api.client(api.key("consume:q"))
    assert_problem(publish(consumer, {"queue": "q", "payload": {}}), 403, "forbidden")
    scoped = api.client(api.key("publish:other"))
    assert_problem(publish(scoped, {"queue": "q", "payload": {}}), 403, "forbidden")
    assert publish(scoped, {"queue": "other", "payload": {}}).status_code == 201
    wildcard = api.client(api.key("publish:*"))
    assert publish(wildcard, {"queue": "q", "payload": {}}).status_code == 201


def test_publish_batch_is_refused_to_keys_without_the_scope(api):
    # The batch route checks the scope itself, as the single publish does: a consumer's key
    # must not be able to publish by sending a batch of one.
    api.queue()
    api.queue("other")
    batch = {"queue": "q", "messages": [{"key": "b1", "payload": {}}]}
    for scopes in (("consume:q",), ("publish:other",), ("read",)):
        refused = api.client(api.key(*scopes)).post("/v1/queue/publish-batch", json=batch)
        assert_problem(refused, 403, "forbidden")
    assert api.ledger.jobs() == []
    publisher = api.client(api.key("publish:q"))
    assert publisher.post("/v1/queue/publish-batch", json=batch).status_code == 200
    assert [j.key for j in api.ledger.jobs()] == ["b1"]
