"""``jobledger.client``: a stable Idempotency-Key across retries, 429 and Retry-After, network
errors, other 4xx as exceptions — against scripted answers, and against a real server."""

from __future__ import annotations

import httpx
import pytest

from jobledger.client import (
    ApiError,
    ApiUnavailable,
    Client,
    KeyReused,
    RateLimited,
    StaleReceipt,
)

PUBLISHED = {
    "message_id": "7",
    "queue": "q",
    "key": "k",
    "state": "pending",
    "run_at": "2026-08-10T06:00:00Z",
}


def problem(status, kind, **extra):
    body = {"type": f"urn:jobledger:problem:{kind}", "title": kind, "status": status}
    return {"detail": f"{kind} detail", **body, **extra}


class Script:
    """A transport that answers from a list, and records each request."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def scripted(*answers, **options):
    script = Script(*answers)
    slept: list[float] = []
    client = Client(
        "http://jobledger.test",
        "jlk_x_y",
        transport=httpx.MockTransport(script),
        sleep=slept.append,
        **options,
    )
    return client, script, slept


def answer(status, body, **headers):
    media = "application/json" if status < 400 else "application/problem+json"
    return httpx.Response(status, json=body, headers={"content-type": media, **headers})


def test_429_waits_for_retry_after_and_keeps_the_key():
    client, script, slept = scripted(
        answer(429, problem(429, "rate-limited", retry_after=7), **{"Retry-After": "7"}),
        answer(429, problem(429, "rate-limited"), **{"Retry-After": "2"}),
        answer(201, PUBLISHED),
    )
    sent = client.publish("q", {"n": 1})
    assert sent.message_id == "7" and not sent.replayed
    assert slept == [7.0, 2.0]
    keys = {r.headers["Idempotency-Key"] for r in script.requests}
    assert len(keys) == 1 and keys.pop().startswith("client:")
    assert all(r.headers["Authorization"] == "Bearer jlk_x_y" for r in script.requests)


def test_429_without_retry_after_backs_off_exponentially():
    client, _, slept = scripted(
        *[answer(429, problem(429, "rate-limited")) for _ in range(4)],
        answer(201, PUBLISHED),
        backoff_base=1.0,
        backoff_cap=100,
    )
    client.publish("q", {}, key="k")
    assert len(slept) == 4
    assert all(0 <= s <= 2**n for n, s in enumerate(slept))


def test_429_through_every_retry_raises_rate_limited():
    client, script, _ = scripted(
        *[answer(429, problem(429, "rate-limited", retry_after=3), **{"Retry-After": "3"})] * 3,
        max_retries=2,
    )
    with pytest.raises(RateLimited) as caught:
        client.publish("q", {}, key="k")
    assert caught.value.status == 429 and caught.value.retry_after == 3
    assert len(script.requests) == 3


def test_network_errors_are_retried_with_the_same_key():
    client, script, slept = scripted(
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("no answer"),
        answer(200, PUBLISHED, **{"Idempotent-Replayed": "true"}),
    )
    sent = client.publish("q", {"n": 1}, key="4187:2026-W33")
    assert sent.replayed and len(slept) == 2
    assert [r.headers["Idempotency-Key"] for r in script.requests] == ["4187:2026-W33"] * 3
    bodies = {r.content for r in script.requests}
    assert len(bodies) == 1  # the very same request every time


def test_in_flight_and_5xx_are_retried_for_publish():
    client, script, _ = scripted(
        answer(409, problem(409, "key-in-flight")),
        answer(503, problem(503, "unavailable")),
        answer(502, {"oops": True}),
        answer(201, PUBLISHED),
    )
    assert client.publish("q", {}, key="k").message_id == "7"
    assert len(script.requests) == 4


def test_a_503_is_retried_no_sooner_than_its_retry_after_and_backs_off_beyond_it(monkeypatch):
    """While the database is down the server answers 503 with Retry-After: 1 at once: the
    client takes that as the earliest retry, and keeps backing off past it."""
    monkeypatch.setattr("jobledger.client.random.uniform", lambda low, high: high)
    unavailable = answer(503, problem(503, "unavailable"), **{"Retry-After": "1"})
    client, script, slept = scripted(*[unavailable] * 5, answer(201, PUBLISHED))
    assert client.publish("q", {}, key="k").message_id == "7"
    assert slept == [1.0, 1.0, 1.0, 1.6, 3.2]


def test_other_4xx_are_raised_with_the_problem():
    client, script, _ = scripted(answer(422, problem(422, "key-reused", message_id="3")))
    with pytest.raises(KeyReused) as caught:
        client.publish("q", {}, key="k")
    assert caught.value.problem["message_id"] == "3" and caught.value.status == 422
    assert len(script.requests) == 1
    client, _, _ = scripted(answer(404, problem(404, "not-found")))
    with pytest.raises(ApiError) as caught:
        client.publish("nope", {}, key="k")
    assert caught.value.status == 404 and caught.value.detail == "not-found detail"


def test_a_503_through_every_retry_raises_api_unavailable():
    """A server whose database stays down answers 503 to every retry: that is the server
    unavailable, as a 502 through every retry or no connection at all is, for publish and for
    the receipt calls alike."""
    unavailable = answer(503, problem(503, "unavailable"), **{"Retry-After": "1"})
    client, script, slept = scripted(*[unavailable] * 3, max_retries=2)
    with pytest.raises(ApiUnavailable) as caught:
        client.publish("q", {}, key="k")
    assert str(caught.value) == "POST /v1/queue/publish: HTTP 503: unavailable detail"
    assert len(script.requests) == 3 and len(slept) == 2
    client, script, _ = scripted(*[unavailable] * 3, max_retries=2)
    with pytest.raises(ApiUnavailable):
        client.ack("1.abc")
    assert len(script.requests) == 3


def test_an_answer_that_is_not_json_is_raised_with_its_text():
    """A proxy in front of the server answers with a page of its own: its status and text are
    what the exception says."""
    page = "<html><body>" + "Bad Gateway " * 100 + "</body></html>"
    gateway = httpx.Response(502, text=page, headers={"content-type": "text/html"})
    client, script, _ = scripted(gateway, gateway, max_retries=1)
    with pytest.raises(ApiUnavailable) as caught:
        client.publish("q", {}, key="k")
    assert str(caught.value) == f"POST /v1/queue/publish: HTTP 502: {page[:500]}"
    assert len(script.requests) == 2
    # A 5xx answer to an ack is not retried: the ack may have been done.
    client, script, _ = scripted(httpx.Response(500, text="Internal Server Error"))
    with pytest.raises(ApiUnavailable) as caught:
        client.ack("1.abc")
    assert str(caught.value) == "POST /v1/queue/ack: HTTP 500: Internal Server Error"
    assert len(script.requests) == 1
    too_large = httpx.Response(413, text="<h1>413 Request Entity Too Large</h1>")
    for body in (too_large, httpx.Response(400, json=["not", "a", "problem"])):
        client, script, _ = scripted(body)
        with pytest.raises(ApiError) as caught:
            client.publish("q", {}, key="k")
        assert (caught.value.status, caught.value.detail) == (body.status_code, body.text)
        assert type(caught.value) is ApiError and len(script.requests) == 1


def test_receipt_calls_are_not_retried_after_a_lost_answer():
    client, script, _ = scripted(httpx.ReadError("connection reset"))
    with pytest.raises(ApiUnavailable):
        client.ack("1.abc")
    assert len(script.requests) == 1
    client, _, _ = scripted(answer(409, problem(409, "stale-receipt")))
    with pytest.raises(StaleReceipt):
        client.ack("1.abc")
    client, script, _ = scripted(httpx.ConnectError("refused"), answer(200, {"state": "done"}))
    assert client.ack("1.abc") == {"state": "done"}  # never sent the first time: retried
    assert len(script.requests) == 2


def test_the_client_against_a_server(api):
    api.queue("emails", max_attempts=2)
    with (
        Client(api.url, api.key("publish:emails", "consume:emails")) as client,
        Client(api.url, api.admin_key) as admin,
    ):
        first = client.publish("emails", {"to": 1}, key="welcome:1")
        again = client.publish("emails", {"to": 1}, key="welcome:1")
        assert not first.replayed and again.replayed and again.message_id == first.message_id
        with pytest.raises(KeyReused):
            client.publish("emails", {"to": 2}, key="welcome:1")
        results = client.publish_batch("emails", [{"payload": {"to": 3}, "key": "welcome:3"}])
        assert [r["status"] for r in results] == [201]
        got = client.receive("emails", max_messages=5, wait_seconds=1, consumer="py")
        assert sorted(m.key for m in got) == ["welcome:1", "welcome:3"]
        by_key = {m.key: m for m in got}
        assert client.extend(by_key["welcome:1"].receipt, 30)["message_id"] == first.message_id
        assert client.ack(by_key["welcome:1"].receipt)["state"] == "done"
        assert (
            client.nack(by_key["welcome:3"].receipt, "bounced", permanent=True)["state"] == "dead"
        )
        with pytest.raises(StaleReceipt):
            client.ack(by_key["welcome:1"].receipt)
        [dead] = admin.find_messages("emails", state="dead")
        assert dead["key"] == "welcome:3"
        assert admin.redrive("emails", "address fixed", dry_run=True)["message_ids"] == [
            dead["message_id"]
        ]
        assert admin.redrive("emails", "address fixed")["message_ids"] == [dead["message_id"]]
        [redriven] = client.receive("emails", wait_seconds=1)
        assert redriven.attempt == 2
        client.nack(redriven.receipt, "bounced again", permanent=True)
        resolved = admin.resolve(dead["message_id"], "sent by hand")
        assert resolved["state"] == "done"
        assert admin.get_queue("emails")["counts"]["done"] == 2
        with pytest.raises(ApiError) as caught:
            client.put_queue("other")
        assert caught.value.status == 403
        # A nack that holds back the message's whole group.
        client.publish("emails", {"to": 5}, key="tenant:5", group="acme")
        [grouped] = client.receive("emails", wait_seconds=1)
        nacked = client.nack(grouped.receipt, "429", retry_after_seconds=60, pause_group=True)
        assert nacked["group_paused_until"] == nacked["run_at"] is not None


class LoseFirstAnswer(httpx.HTTPTransport):
    """Delivers the first request, then pretends the answer was lost on the way back."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if not self.lost:
            self.lost = True
            response.read()
            raise httpx.ReadError("connection reset after the server answered")
        return response


def test_a_lost_answer_is_retried_into_a_replay_not_a_second_job(api):
    api.queue()
    with Client(api.url, api.admin_key, transport=LoseFirstAnswer(), sleep=lambda s: None) as c:
        sent = c.publish("q", {"n": 1})  # no key given: the client makes one for this call
    assert sent.replayed
    [job] = api.ledger.jobs()
    assert str(job.id) == sent.message_id and job.key == sent.key and job.payload == {"n": 1}
