"""Pull consumers over HTTP: receive, ack, nack, extend — fenced by the same lease tokens as the
Python worker — and long polling."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from jobledger import JobState
from jobledger._records import AttemptOutcome
from jobledger.http import ServerSettings

from ..support.http import api_server
from ..support.metrics import parse, value
from ..support.processes import wait_until
from .test_publish import assert_problem, publish


def receive(client, queue="q", **options):
    response = client.post("/v1/queue/receive", json={"queue": queue, **options})
    assert response.status_code == 200, response.text
    return response.json()["messages"]


def snapshot(ledger, job_id):
    job = ledger.job(job_id)
    return job, ledger.backend.history.attempts(job_id)


def test_receive_then_ack(api):
    api.queue(max_attempts=3, lease_seconds=30)
    created = publish(api.admin, {"queue": "q", "payload": {"n": 1}}, "k1").json()
    consumer = api.client(api.key("consume:q"))
    [message] = receive(consumer, consumer="billing-7")
    assert message["message_id"] == created["message_id"]
    assert (message["key"], message["payload"], message["attempt"], message["attempts_left"]) == (
        "k1",
        {"n": 1},
        1,
        2,
    )
    job = api.ledger.job(int(message["message_id"]))
    assert job.state is JobState.LEASED
    assert message["receipt"] == f"{job.id}.{job.lease_token}"
    assert receive(consumer) == []  # leased: nobody else gets it
    acked = consumer.post("/v1/queue/ack", json={"receipt": message["receipt"]})
    assert acked.status_code == 200 and acked.json() == {
        "message_id": message["message_id"],
        "state": "done",
    }
    [attempt] = api.ledger.backend.history.attempts(job.id)
    assert attempt.outcome is AttemptOutcome.DONE
    assert attempt.worker.startswith("http:") and attempt.worker.endswith(":billing-7")


def test_receive_respects_max_messages_priority_and_delay(api):
    api.queue()
    for n, priority in enumerate([0, 5, 1]):
        publish(api.admin, {"queue": "q", "payload": {"n": n}, "priority": priority}, f"k{n}")
    publish(api.admin, {"queue": "q", "payload": {"n": 9}, "delay_seconds": 3600}, "later")
    got = receive(api.admin, max_messages=2)
    assert [m["payload"]["n"] for m in got] == [1, 2]
    assert [m["payload"]["n"] for m in receive(api.admin)] == [0]
    assert receive(api.admin) == []


def test_a_stale_receipt_is_409_and_changes_nothing(api):
    api.queue(lease_seconds=30)
    publish(api.admin, {"queue": "q", "payload": {}}, "k")
    [first] = receive(api.admin, lease_seconds=1)
    # The lease expires; the rescuer hands the message out again under a new token.
    wait_until(
        lambda: api.ledger.job(int(first["message_id"])).state is JobState.PENDING,
        what="the expired lease to be rescued",
    )
    [second] = receive(api.admin)
    assert second["attempt"] == 2 and second["receipt"] != first["receipt"]
    before = snapshot(api.ledger, int(first["message_id"]))
    for path, extra in (
        ("/v1/queue/ack", {}),
        ("/v1/queue/nack", {"error": "late"}),
        ("/v1/queue/extend", {"lease_seconds": 60}),
    ):
        response = api.admin.post(path, json={"receipt": first["receipt"], **extra})
        assert_problem(response, 409, "stale-receipt")
    assert snapshot(api.ledger, int(first["message_id"])) == before
    events = api.ledger.backend.history.events(int(first["message_id"]))
    assert [e.kind for e in events] == ["lease_lost"] * 3
    # The current holder is unaffected.
    assert api.admin.post("/v1/queue/ack", json={"receipt": second["receipt"]}).status_code == 200
    # ... and its receipt is stale once used.
    response = api.admin.post("/v1/queue/ack", json={"receipt": second["receipt"]})
    assert_problem(response, 409, "stale-receipt")


def test_an_ack_or_nack_sent_again_is_409_and_no_lost_lease(api):
    """A consumer whose ack's answer was lost sends it again: the receipt no longer holds the
    message (409, nothing changes), but nothing was lost either — its own ack closed the
    attempt, so the history gets no ``lease_lost`` (a receipt whose lease expired does: above)."""
    api.queue(max_attempts=3)
    publish(api.admin, {"queue": "q", "payload": {}}, "acked")
    publish(api.admin, {"queue": "q", "payload": {}}, "nacked")
    acked, nacked = sorted(receive(api.admin, max_messages=2), key=lambda m: m["key"])
    assert api.admin.post("/v1/queue/ack", json={"receipt": acked["receipt"]}).status_code == 200
    nack = {"receipt": nacked["receipt"], "error": "HTTP 503", "retry_after_seconds": 3600}
    assert api.admin.post("/v1/queue/nack", json=nack).status_code == 200
    for message, done in ((acked, "acked"), (nacked, "nacked")):
        job_id = int(message["message_id"])
        before = snapshot(api.ledger, job_id)
        for path, extra in (("/v1/queue/ack", {}), ("/v1/queue/nack", {"error": "again"})):
            response = api.admin.post(path, json={"receipt": message["receipt"], **extra})
            body = assert_problem(response, 409, "stale-receipt")
            assert f"already {done} under this receipt" in body["detail"], body
        assert snapshot(api.ledger, job_id) == before
        assert api.ledger.backend.history.events(job_id) == []


def test_receipts_for_unknown_messages_are_409_and_malformed_ones_422(api):
    api.queue()
    for receipt in (
        "999.0123456789abcdef0123456789abcdef",
        "9223372036854775808.0123456789abcdef0123456789abcdef",
    ):
        assert_problem(
            api.admin.post("/v1/queue/ack", json={"receipt": receipt}), 409, "stale-receipt"
        )
    response = api.admin.post("/v1/queue/ack", json={"receipt": "not-a-receipt"})
    assert_problem(response, 422, "validation-failed")
    # A made-up token for a real message: 409, and nothing recorded in its history.
    publish(api.admin, {"queue": "q", "payload": {}}, "k")
    [m] = receive(api.admin)
    forged = f"{m['message_id']}.{'0' * 32}"
    assert_problem(api.admin.post("/v1/queue/ack", json={"receipt": forged}), 409, "stale-receipt")
    assert api.ledger.backend.history.events(int(m["message_id"])) == []
    assert api.ledger.job(int(m["message_id"])).state is JobState.LEASED


def test_nack_retries_after_the_given_delay(api):
    api.queue(max_attempts=3)
    publish(api.admin, {"queue": "q", "payload": {}}, "k")
    [m] = receive(api.admin)
    before = datetime.now(UTC)
    response = api.admin.post(
        "/v1/queue/nack",
        json={"receipt": m["receipt"], "error": "HTTP 503 upstream", "retry_after_seconds": 120},
    )
    assert response.status_code == 200, response.text
    assert response.json()["state"] == "pending"
    job = api.ledger.job(int(m["message_id"]))
    assert job.state is JobState.PENDING and job.last_error == "HTTP 503 upstream"
    assert (
        before + timedelta(seconds=119) <= job.run_at <= datetime.now(UTC) + timedelta(seconds=121)
    )
    assert job.last_error_class == "Nack"
    [attempt] = api.ledger.backend.history.attempts(job.id)
    assert attempt.outcome is AttemptOutcome.RETRY and attempt.error_message == "HTTP 503 upstream"


def test_nack_without_delay_uses_the_queue_backoff(api):
    api.queue(backoff={"base_seconds": 1000, "cap_seconds": 1000})
    publish(api.admin, {"queue": "q", "payload": {}}, "k")
    [m] = receive(api.admin)
    api.admin.post("/v1/queue/nack", json={"receipt": m["receipt"], "error": "x"})
    job = api.ledger.job(int(m["message_id"]))
    # Full jitter: anywhere in [0, 1000] s; never beyond the cap.
    assert job.run_at <= datetime.now(UTC) + timedelta(seconds=1001)


def test_nack_permanent_is_dead_at_once(api):
    api.queue(max_attempts=5)
    publish(api.admin, {"queue": "q", "payload": {}}, "k")
    [m] = receive(api.admin)
    response = api.admin.post(
        "/v1/queue/nack", json={"receipt": m["receipt"], "error": "HTTP 400", "permanent": True}
    )
    assert response.json() == {
        "message_id": m["message_id"],
        "state": "dead",
        "run_at": None,
        "group_paused_until": None,
    }
    job = api.ledger.job(int(m["message_id"]))
    assert job.state is JobState.DEAD and job.last_error_class == "Permanent"
    response = api.admin.post(
        "/v1/queue/nack",
        json={"receipt": m["receipt"], "permanent": True, "retry_after_seconds": 1},
    )
    assert_problem(response, 422, "validation-failed")


def test_a_spent_budget_is_dead(api):
    api.queue(max_attempts=2)
    publish(api.admin, {"queue": "q", "payload": {}}, "k")
    states = []
    for _ in range(2):
        [m] = receive(api.admin)
        nack = api.admin.post(
            "/v1/queue/nack", json={"receipt": m["receipt"], "retry_after_seconds": 0}
        )
        states.append(nack.json()["state"])
    assert states == ["pending", "dead"]
    assert receive(api.admin) == []


def test_extend_keeps_the_lease(api):
    api.queue(lease_seconds=30)
    publish(api.admin, {"queue": "q", "payload": {}}, "k")
    [m] = receive(api.admin, lease_seconds=1)
    response = api.admin.post(
        "/v1/queue/extend", json={"receipt": m["receipt"], "lease_seconds": 60}
    )
    assert response.status_code == 200, response.text
    until = datetime.fromisoformat(response.json()["lease_until"])
    assert until > datetime.now(UTC) + timedelta(seconds=50)
    time.sleep(1.3)  # past the first lease: the rescuer (every 0.2 s) must leave it alone
    assert api.ledger.job(int(m["message_id"])).state is JobState.LEASED
    assert api.admin.post("/v1/queue/ack", json={"receipt": m["receipt"]}).status_code == 200


def test_consume_scope_is_checked(api):
    api.queue()
    api.queue("other")
    publish(api.admin, {"queue": "q", "payload": {}}, "k")
    publisher = api.client(api.key("publish:q"))
    assert_problem(publisher.post("/v1/queue/receive", json={"queue": "q"}), 403, "forbidden")
    other = api.client(api.key("consume:other"))
    assert_problem(other.post("/v1/queue/receive", json={"queue": "q"}), 403, "forbidden")
    [m] = receive(api.admin)
    # A key that may not consume the message's queue: 403 with the right receipt.
    assert_problem(other.post("/v1/queue/ack", json={"receipt": m["receipt"]}), 403, "forbidden")
    assert api.ledger.job(int(m["message_id"])).state is JobState.LEASED
    assert_problem(
        api.admin.post("/v1/queue/receive", json={"queue": "never-declared"}), 404, "not-found"
    )


def long_poll(api, trigger):
    """Start a receive waiting up to 15 s, wait until it is waiting, ``trigger()``; return the
    messages it got and how long it took."""
    got = {}

    def wait():
        start = time.monotonic()
        got["messages"] = receive(api.admin, wait_seconds=15)
        got["elapsed"] = time.monotonic() - start

    waiter = threading.Thread(target=wait)
    waiter.start()
    wakeups = api.server.state.wakeups
    wait_until(lambda: "q" in wakeups._events, what="the receive to wait")
    trigger()
    waiter.join(20)
    return got["messages"], got["elapsed"]


def test_long_poll_is_woken_by_a_publish(ledger):
    # Polling every 60 s: only the wake-up can answer within the test's bound.
    with api_server(ledger, ServerSettings(poll_interval=60)) as api:
        api.queue()
        messages, took = long_poll(
            api, lambda: publish(api.admin, {"queue": "q", "payload": {"n": 1}}, "k")
        )
    assert [m["key"] for m in messages] == ["k"]
    assert took < 10, "the long poll was not woken by the publish"


def test_long_poll_is_woken_by_an_enqueue_elsewhere(ledger, backend_name):
    """Not through this server: an enqueue from Python. On PostgreSQL LISTEN/NOTIFY wakes the
    receive (polling is set to 60 s here); SQLite has no notifications, so it polls."""
    poll = 60 if backend_name == "postgres" else None
    with api_server(ledger, ServerSettings(poll_interval=poll)) as api:
        api.queue()
        messages, took = long_poll(
            api, lambda: api.ledger.enqueue("q", {"n": 2}, key="from-python", queue="q")
        )
    assert [m["key"] for m in messages] == ["from-python"]
    assert took < 10


def test_long_poll_with_nothing_to_receive_waits_then_returns_empty(api):
    api.queue()
    start = time.monotonic()
    assert receive(api.admin, wait_seconds=1) == []
    assert 0.9 <= time.monotonic() - start < 5


def test_a_consumer_that_dies_loses_its_lease_to_the_rescuer(api):
    api.queue(max_attempts=2)
    publish(api.admin, {"queue": "q", "payload": {}}, "k")
    [m] = receive(api.admin, lease_seconds=1)
    job_id = int(m["message_id"])
    wait_until(lambda: api.ledger.job(job_id).state is JobState.PENDING, what="rescue")
    [again] = receive(api.admin, lease_seconds=1)
    assert again["attempt"] == 2 and again["attempts_left"] == 0
    wait_until(lambda: api.ledger.job(job_id).state is JobState.DEAD, what="rescue to dead")
    outcomes = [a.outcome for a in api.ledger.backend.history.attempts(job_id)]
    assert outcomes == [AttemptOutcome.LEASE_EXPIRED, AttemptOutcome.LEASE_EXPIRED]


def _receive_scope(api, body: bytes) -> dict:
    """The ASGI scope of a receive by the admin key with ``body``, for a test that plays the
    client's side of the connection itself (its disconnect)."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/queue/receive",
        "raw_path": b"/v1/queue/receive",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"authorization", f"Bearer {api.admin_key}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "app": api.server.app,
    }


def _client_that_leaves(body: bytes) -> tuple[Any, Any, list[dict]]:
    """The client's side of one request: it sends ``body``, then disconnects. Returns the ASGI
    ``receive`` and ``send`` to serve it with, and the list of what the server sent."""
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict] = []

    async def receive_message():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    return receive_message, send, sent


def test_a_receive_whose_client_left_gives_its_messages_back(api):
    """The client disconnected before its answer could be sent: the claimed messages are
    released at once (outcome ``released``, not charged) rather than left to their lease."""
    api.queue(max_attempts=3)
    publish(api.admin, {"queue": "q", "payload": {}}, "k")
    body = json.dumps({"queue": "q"}).encode()
    scope = _receive_scope(api, body)
    receive_message, send, sent = _client_that_leaves(body)

    asyncio.run(api.server.app(scope, receive_message, send))
    [start, answer] = sent
    assert start["status"] == 200 and json.loads(answer["body"]) == {"messages": []}
    [job] = api.ledger.jobs()
    assert job.state is JobState.PENDING and job.budget_left == 3
    [attempt] = api.ledger.backend.history.attempts(job.id)
    assert attempt.outcome is AttemptOutcome.RELEASED


def test_a_long_poll_whose_client_left_stops_waiting_and_takes_nothing(api):
    """The client of a receive waiting for a message (``wait_seconds``) disconnects: the
    server stops waiting at once and answers nothing, and a message published afterwards is
    left for the next consumer, unclaimed and uncharged."""
    api.queue(max_attempts=3)
    body = json.dumps({"queue": "q", "wait_seconds": 20}).encode()
    scope = _receive_scope(api, body)
    receive_message, send, sent = _client_that_leaves(body)

    async def served():  # well before the 20 s the client asked to wait
        await asyncio.wait_for(api.server.app(scope, receive_message, send), 10)

    asyncio.run(served())
    [start, answer] = sent
    assert start["status"] == 200 and json.loads(answer["body"]) == {"messages": []}
    job_id = publish(api.admin, {"queue": "q", "payload": {}}, "k").json()["message_id"]
    [message] = receive(api.admin)
    assert message["attempt"] == 1 and message["attempts_left"] == 2
    assert [a.outcome for a in api.ledger.backend.history.attempts(int(job_id))] == [None]


def taken_over_after_the_check(api, monkeypatch):
    """Make every receipt lose its lease between the server's check of it and its write: the
    lease runs out and another consumer receives the message, as when an ack arrives at the
    very end of its lease. Returns the receipts the other consumer got, by message id."""
    pull = api.server.state.pull
    check = pull.find
    taken: dict[int, str] = {}

    def find(job_id, token):
        found = check(job_id, token)
        jobs = api.ledger.backend.jobs
        later = found.job.lease_until + timedelta(seconds=1)
        assert [r.job_id for r in jobs.rescue(later)] == [job_id]
        [again] = jobs.claim([found.job.queue], "http:other", 1, later)
        taken[again.id] = again.lease_token
        return found

    monkeypatch.setattr(pull, "find", find)
    return taken


def test_a_receipt_whose_lease_runs_out_after_its_check_is_409_and_changes_nothing(
    api, monkeypatch
):
    """The receipt held its lease when the server looked, and no longer does when it writes:
    the fenced write changes nothing, the answer is the stale receipt's 409, and the refusal is
    in the message's history and the stale-token count under its own name, as any late
    write's."""
    api.queue(max_attempts=5, lease_seconds=30)
    cases = (
        ("ack", {}),
        ("nack", {"error": "late"}),
        ("nack", {"permanent": True}),
        ("extend", {"lease_seconds": 600}),
    )
    taken = taken_over_after_the_check(api, monkeypatch)
    for n, (action, extra) in enumerate(cases):
        publish(api.admin, {"queue": "q", "payload": {}}, f"k{n}")
        [message] = receive(api.admin)
        job_id = int(message["message_id"])
        response = api.admin.post(
            f"/v1/queue/{action}", json={"receipt": message["receipt"], **extra}
        )
        body = assert_problem(response, 409, "stale-receipt")
        assert "its lease expired a moment ago" in body["detail"], body
        job = api.ledger.job(job_id)
        assert (job.state, job.lease_token, job.attempts) == (JobState.LEASED, taken[job_id], 2)
        attempts = api.ledger.backend.history.attempts(job_id)
        assert [a.outcome for a in attempts] == [AttemptOutcome.LEASE_EXPIRED, None]
        [event] = api.ledger.backend.history.events(job_id)
        assert event.kind == "lease_lost" and event.actor.startswith("apikey:")
        assert (event.detail["action"], event.detail["attempt"]) == (action, 1)
    families = parse(api.admin.get("/metrics").text)
    counts = {
        action: value(families, "jobledger_stale_token_writes_total", queue="q", action=action)
        for action in ("ack", "nack", "extend", "complete", "fail", "heartbeat")
    }
    assert counts == {"ack": 1, "nack": 2, "extend": 1, "complete": 0, "fail": 0, "heartbeat": 0}
    # The consumer that has the message now acks it.
    monkeypatch.undo()
    for job_id, token in taken.items():
        response = api.admin.post("/v1/queue/ack", json={"receipt": f"{job_id}.{token}"})
        assert response.status_code == 200, response.text
