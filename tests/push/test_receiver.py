"""The receiver helper: verification before parsing, replays, durable acceptance, hand-off; and
a web application with only the receiver getting every job once in effect through crashes,
timeouts and 429s."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import standardwebhooks
import uvicorn
from starlette.applications import Starlette
from starlette.routing import Route

from jobledger import ConfigError, JobState, Ledger
from jobledger._records import QueueSettings
from jobledger._webhooks import generate_secret
from jobledger.push import WebhookReceiver

from ..support.outage import SqliteCut
from ..support.processes import ROOT, wait_exit, wait_until
from .conftest import publish, subscribe

SECRET = generate_secret()


class Served:
    """A Starlette app with the receiver at /hooks, served by uvicorn in a thread."""

    def __init__(self, receiver: WebhookReceiver):
        app = Starlette(routes=[Route("/hooks", receiver, methods=["POST"])])
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_until(lambda: self.server.started, what="the receiver to start")
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/hooks"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def app_ledger(tmp_path):
    """The receiving application's own ledger (another database than the sender's)."""
    led = Ledger(f"sqlite:///{tmp_path}/app.db")
    led.migrate()
    yield led
    led.close()


@pytest.fixture
def served():
    started = []

    def start(receiver):
        s = Served(receiver)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def signed(body: bytes, msg_id: str, secret: str = SECRET, at: datetime | None = None) -> dict:
    """Headers made by the standardwebhooks package's own signer."""
    at = at or datetime.now(UTC)
    signature = standardwebhooks.Webhook(secret).sign(msg_id, at, body.decode())
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature,
        "content-type": "application/json",
    }


def test_the_receiver_verifies_before_parsing_and_dedupes(app_ledger, served):
    calls = []

    @app_ledger.task(queue="inbox")
    def on_event(ctx, type, timestamp, data):  # noqa: A002
        calls.append((ctx.key, type, data))

    receiver = WebhookReceiver(app_ledger, [generate_secret(), SECRET], on_event)
    url = served(receiver).url
    body = json.dumps(
        {"type": "invoice.paid", "timestamp": "2026-08-10T06:00:00Z", "data": {"invoice": 7}}
    ).encode()
    with httpx.Client(timeout=10) as client:
        first = client.post(url, content=body, headers=signed(body, "msg_2KWPBgLlAfxdpx2AI54p"))
        again = client.post(url, content=body, headers=signed(body, "msg_2KWPBgLlAfxdpx2AI54p"))
        forged = client.post(url, content=body, headers=signed(body, "m2", generate_secret()))
        stale = client.post(
            url,
            content=b"not json at all",
            headers=signed(b"not json at all", "m3", at=datetime.now(UTC) - timedelta(minutes=6)),
        )
        future = client.post(
            url,
            content=body,
            headers=signed(body, "m4", at=datetime.now(UTC) + timedelta(minutes=6)),
        )
        missing = client.post(url, content=body, headers={"content-type": "application/json"})
        unsigned_garbage = client.post(
            url, content=b"{", headers=signed(b"{", "m5", generate_secret())
        )
        not_json = client.post(url, content=b"[1]", headers=signed(b"[1]", "m6"))
        too_big = client.post(url, content=b"x" * (1024 * 1024 + 1), headers=signed(b"x", "m7"))
        wrong_method = client.get(url)
        other = json.dumps({"type": "invoice.paid", "data": {"invoice": 8}}).encode()
        same_id = client.post(url, content=other, headers=signed(other, "msg_2KWPBgLlAfxdpx2AI54p"))
    assert (first.status_code, first.json()["status"]) == (202, "accepted")
    assert (again.status_code, again.json()["status"]) == (200, "duplicate")
    assert again.json()["job_id"] == first.json()["job_id"]
    assert (forged.status_code, forged.json()["reason"]) == (401, "no-matching-signature")
    # A stale timestamp is refused before the body is looked at (it is not even JSON).
    assert (stale.status_code, stale.json()["reason"]) == (401, "timestamp-too-old")
    assert (future.status_code, future.json()["reason"]) == (401, "timestamp-too-new")
    assert (missing.status_code, missing.json()["reason"]) == (400, "missing-header")
    # A body that is not JSON is refused for its signature, never parsed.
    assert unsigned_garbage.status_code == 401
    assert (not_json.status_code, not_json.json()["reason"]) == (400, "malformed")
    assert (too_big.status_code, too_big.json()["reason"]) == (413, "too-large")
    assert wrong_method.status_code == 405
    assert (same_id.status_code, same_id.json()["status"]) == (200, "duplicate")  # the id decides
    [job] = app_ledger.jobs()
    assert job.key == "msg_2KWPBgLlAfxdpx2AI54p" and job.queue == "inbox"
    assert job.payload == {
        "type": "invoice.paid",
        "timestamp": "2026-08-10T06:00:00Z",
        "data": {"invoice": 7},
    }
    app_ledger.run_worker(queues=["inbox"], burst=True)
    assert calls == [("msg_2KWPBgLlAfxdpx2AI54p", "invoice.paid", {"invoice": 7})]


def test_the_receiver_keeps_a_sender_s_correlation_id_only_if_a_job_can_have_it(app_ledger, served):
    """A ``jobledger-correlation-id`` header past 255 characters is no reason to refuse the
    event (it is for the logs): the job is accepted with a correlation id of its own."""

    @app_ledger.task(queue="inbox")
    def on_event(ctx, type, timestamp, data):  # noqa: A002
        pass

    url = served(WebhookReceiver(app_ledger, SECRET, on_event)).url
    body = json.dumps({"type": "invoice.paid", "data": {"invoice": 7}}).encode()
    with httpx.Client(timeout=10) as client:
        for msg_id, correlation in (("m-kept", "corr-7"), ("m-long", "c" * 256)):
            headers = signed(body, msg_id) | {"jobledger-correlation-id": correlation}
            answer = client.post(url, content=body, headers=headers)
            assert (answer.status_code, answer.json()["status"]) == (202, "accepted"), answer.text
    kept, long = (app_ledger.job_by_key(k) for k in ("m-kept", "m-long"))
    assert kept.correlation_id == "corr-7"
    assert long.correlation_id is not None and len(long.correlation_id) == 32


def test_the_receiver_checks_its_task_and_secrets(app_ledger):
    @app_ledger.task
    def wrong(ctx, customer_id):
        pass

    with pytest.raises(ConfigError, match="type, timestamp, data"):
        WebhookReceiver(app_ledger, SECRET, wrong)
    with pytest.raises(ConfigError, match="whsec_"):
        WebhookReceiver(app_ledger, "not-a-secret", "inbox")


def test_pushes_reach_an_application_worker_at_once(ledger, app_ledger, served, push):
    handled = []
    done = threading.Event()

    @app_ledger.task(queue="inbox")
    def on_event(ctx, type, timestamp, data):  # noqa: A002
        handled.append((ctx.key, type, data))
        if len(handled) == 3:
            done.set()

    worker = app_ledger.worker(queues=["inbox"], poll_interval=60.0)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    sub = subscribe(ledger, "http://127.0.0.1:1/hooks")  # replaced below, once served
    url = served(WebhookReceiver(app_ledger, sub.secret, on_event)).url
    ledger.backend.subscriptions.delete(sub.id)
    subscribe(ledger, url, secret=sub.secret)
    for i in range(3):
        publish(ledger, f"4187:2026-W3{i}", customer=4187)
    push()
    try:
        # The worker polls every 60 s: it got the events sooner, woken by the acceptances.
        assert done.wait(30), handled
    finally:
        worker.stop()
        thread.join(10)
    assert sorted(k for k, _, _ in handled) == ["4187:2026-W30", "4187:2026-W31", "4187:2026-W32"]
    assert {t for _, t, _ in handled} == {"hook.event"}


def receiver_process(port: int, url: str, secret: str, faults: str = "", chaos: str = ""):
    env = dict(os.environ)
    env.update(
        JOBLEDGER_URL=url,
        WEBHOOK_SECRET=secret,
        RECEIVER_CHAOS=chaos,
        JOBLEDGER_FAULTS=faults,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.apps.receiver_app", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("listening on "), line + proc.stdout.read()
    return proc, int(line.split()[-1])


@pytest.mark.slow
def test_every_job_once_in_effect_through_crashes_timeouts_and_429s(ledger, push, tmp_path):
    app_url = f"sqlite:///{tmp_path}/receiver.db"
    Ledger(app_url).migrate()
    secret = generate_secret()
    proc, port = receiver_process(
        0, app_url, secret, faults="receiver.after_accept=kill@6", chaos="429:4,slow:5:2"
    )
    ledger.backend.api.queue_put(QueueSettings(name="hooks", backoff_base=0.1, backoff_cap=0.3))
    subscribe(ledger, f"http://127.0.0.1:{port}/hooks", secret=secret, timeout_seconds=1.0)
    keys = [f"{c}:2026-W33" for c in range(4180, 4200)]
    ids = [publish(ledger, key, customer=key) for key in keys]
    push()
    try:
        code, out, _ = wait_exit(proc, 30)
        assert code == -9, out  # killed after committing its 6th acceptance
        proc, _ = receiver_process(port, app_url, secret, chaos="429:4,slow:5:2")

        def delivered() -> int:
            return sum(ledger.job(i).state is JobState.DONE for i in ids)

        wait_until(
            lambda: delivered() == len(ids),
            timeout=60,
            what="every job to be delivered",
            progress=delivered,
        )
    finally:
        proc.kill()
        proc.wait(10)
    errors = [a.error_class for i in ids for a in ledger.history(i).attempts if a.error_class]
    assert "HTTP 429" in errors and "Timeout" in errors  # the chaos did happen …
    assert any(
        e in ("ProtocolError", "NetworkError", "ConnectError") for e in errors
    )  # … and the crash
    app = Ledger(app_url)
    try:
        received = app.jobs()
        assert sorted(j.key for j in received) == sorted(keys)  # each key accepted once
        effects = []

        @app.task(queue="inbox", name="on_event")
        def on_event(ctx, type, timestamp, data):  # noqa: A002
            effects.append(ctx.key)

        app.run_worker(queues=["inbox"], burst=True)
        assert sorted(effects) == sorted(keys)  # one effect per job
    finally:
        app.close()


def test_the_receiver_s_tolerance_is_more_than_0_and_at_most_an_hour(app_ledger):
    # A wider window lets a captured delivery be replayed for longer; 0 refuses everything.
    for tolerance in (0, -1, 3601):
        with pytest.raises(ConfigError, match="tolerance"):
            WebhookReceiver(app_ledger, SECRET, "inbox", tolerance=tolerance)
    assert WebhookReceiver(app_ledger, SECRET, "inbox", tolerance=3600).tolerance == 3600


def test_a_body_of_max_body_bytes_is_accepted_and_one_more_is_413_even_when_streamed(
    app_ledger, served
):
    # Without Content-Length (a chunked body) the limit is counted as the body arrives.
    receiver = WebhookReceiver(app_ledger, SECRET, "inbox", max_body=200)
    url = served(receiver).url

    def body_of(size: int, msg_id: str) -> tuple[bytes, dict]:
        prefix = b'{"type":"t","data":{"pad":"'
        body = prefix + b"x" * (size - len(prefix) - 3) + b'"}}'
        assert len(body) == size
        return body, signed(body, msg_id)

    def chunked(body: bytes):
        yield body[:100]
        yield body[100:]

    with httpx.Client(timeout=10) as client:
        fits, headers = body_of(200, "fits")
        accepted = client.post(url, content=chunked(fits), headers=headers)
        over, headers = body_of(201, "over")
        refused = client.post(url, content=chunked(over), headers=headers)
        sized = client.post(url, content=over, headers=headers)
        fits_sized = client.post(url, content=fits, headers=signed(fits, "fits"))
    assert accepted.status_code == 202, accepted.text
    assert fits_sized.json()["status"] == "duplicate"  # not refused for its Content-Length
    assert (refused.status_code, refused.json()["reason"]) == (413, "too-large")
    assert (sized.status_code, sized.json()["reason"]) == (413, "too-large")
    assert [j.key for j in app_ledger.jobs()] == ["fits"]


def test_a_webhook_id_that_cannot_be_a_key_is_400_invalid_header(app_ledger, served):
    url = served(WebhookReceiver(app_ledger, SECRET, "inbox")).url
    body = b'{"type":"t","data":{}}'
    with httpx.Client(timeout=10) as client:
        response = client.post(url, content=body, headers=signed(body, "m" * 513))
    assert (response.status_code, response.json()["reason"]) == (400, "invalid-header")
    assert app_ledger.jobs() == []


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b'{"type":"t","data":{"n":NaN}}', "the body is not JSON"),
        (b'{"type":"t","data":{"n":-Infinity}}', "the body is not JSON"),
        (b'{"type":"t","data":{"s":"nul\\u0000"}}', "U+0000"),
        (b'{"type":"t","data":{"s":"\\ud800"}}', "unpaired surrogate"),
        (b'{"type":"t","data":' + b"[" * 100_000 + b"]" * 100_000 + b"}", "the body is not JSON"),
    ],
    ids=["nan", "infinity", "nul", "surrogate", "nested"],
)
def test_a_signed_body_of_json_no_database_stores_is_400_malformed_not_413(
    app_ledger, served, body, detail
):
    # The sender gives up on any 4xx but 408/409/425/429 alike; the reason and detail tell the
    # sender's operator what is wrong with the event, which is not its size.
    url = served(WebhookReceiver(app_ledger, SECRET, "inbox")).url
    with httpx.Client(timeout=10) as client:
        response = client.post(url, content=body, headers=signed(body, "odd"))
    assert (response.status_code, response.json()["reason"]) == (400, "malformed")
    assert detail in response.json()["detail"]
    assert app_ledger.jobs() == []


def test_a_body_within_max_body_whose_payload_is_over_256_kib_is_413(app_ledger, served):
    url = served(WebhookReceiver(app_ledger, SECRET, "inbox")).url  # max_body: 1 MiB
    body = json.dumps({"type": "t", "data": {"blob": "x" * (256 * 1024)}}).encode()
    with httpx.Client(timeout=10) as client:
        response = client.post(url, content=body, headers=signed(body, "big"))
    assert (response.status_code, response.json()["reason"]) == (413, "too-large")
    assert "the limit is 262144 bytes (256 KiB)" in response.json()["detail"]
    assert app_ledger.jobs() == []


def asgi(app, scope: dict, incoming: list[dict]) -> list[dict]:
    """What ``app`` sends for one ASGI ``scope`` while it receives ``incoming``, in order."""
    sent: list[dict] = []
    messages = list(incoming)

    async def receive() -> dict:
        return messages.pop(0)

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


def http_scope(method: str = "POST", headers: dict | None = None) -> dict:
    encoded = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    return {"type": "http", "method": method, "path": "/hooks", "headers": encoded}


def answer(sent: list[dict]) -> tuple[int, dict, dict]:
    start, body = sent
    return start["status"], dict(start["headers"]), json.loads(body["body"])


def test_a_receiver_served_as_the_app_answers_anything_but_post_405_with_allow_post(app_ledger):
    # Mounted on a Route(methods=["POST"]) the framework answers 405 first; served on its own
    # (uvicorn app:receiver) or on a route of every method, the receiver does, as RFC 9110 asks.
    receiver = WebhookReceiver(app_ledger, SECRET, "inbox")
    for method in ("GET", "PUT", "HEAD"):
        status, headers, body = answer(asgi(receiver, http_scope(method), []))
        assert (status, headers[b"allow"], body["reason"]) == (405, b"POST", "method-not-allowed")
    assert app_ledger.jobs() == []


def test_the_ledger_unavailable_is_503_and_the_sender_s_retry_is_accepted_once_it_is_back(
    tmp_path,
):
    cut = SqliteCut(tmp_path)
    app = Ledger(cut.url)
    app.migrate()
    try:
        receiver = WebhookReceiver(app, SECRET, "inbox")
        body = b'{"type":"t","data":{"n":1}}'
        delivery = [{"type": "http.request", "body": body, "more_body": False}]
        cut.cut()
        down = answer(asgi(receiver, http_scope(headers=signed(body, "m1")), delivery))
        assert (down[0], down[2]["reason"]) == (503, "unavailable")  # the sender retries 503
        cut.restore()
        answers = []

        def retried() -> int:  # as the sender does, until an answer is not 503
            answers.append(answer(asgi(receiver, http_scope(headers=signed(body, "m1")), delivery)))
            return answers[-1][0]

        wait_until(lambda: retried() != 503, what="the receiver to answer again")
        assert (answers[-1][0], answers[-1][2]["status"]) == (202, "accepted")
        assert {a[2]["reason"] for a in answers[:-1]} <= {"unavailable"}
        assert [j.key for j in app.jobs()] == ["m1"]
    finally:
        app.close()


@pytest.mark.parametrize("same_body", [True, False], ids=["same-body", "other-body"])
def test_a_delivery_accepted_by_a_concurrent_request_after_the_look_up_is_200_duplicate(
    app_ledger, same_body
):
    # Two requests with one webhook-id (a sender's retry crossing a slow answer) both find no
    # job, and the other one's acceptance commits first. This one's enqueue then finds the key
    # taken: with the same payload it creates nothing, with another it is a KeyConflict; either
    # way the id decides and the answer is the other one's job, as for any replay.
    receiver = WebhookReceiver(app_ledger, SECRET, "inbox")
    body = b'{"type":"t","data":{"n":1}}'
    theirs = {"type": "t", "timestamp": None, "data": {"n": 1 if same_body else 2}}
    look_up = receiver._existing
    other: list[int] = []

    def raced(msg_id: str) -> int | None:
        if not other:  # the first look-up, then the concurrent acceptance commits
            found = look_up(msg_id)
            other.append(app_ledger.enqueue("inbox", theirs, key=msg_id, queue=receiver.queue).id)
            return found
        return look_up(msg_id)

    receiver._existing = raced  # type: ignore[method-assign]
    delivery = [{"type": "http.request", "body": body, "more_body": False}]
    status, _, answered = answer(asgi(receiver, http_scope(headers=signed(body, "m1")), delivery))
    assert (status, answered) == (200, {"status": "duplicate", "job_id": other[0]})
    [job] = app_ledger.jobs()
    assert (job.id, job.payload) == (other[0], theirs)


def test_a_sender_gone_mid_body_or_a_signed_body_that_is_not_json_accepts_nothing(app_ledger):
    receiver = WebhookReceiver(app_ledger, SECRET, "inbox")
    body = b'{"type":"t","data":{"n":1}}'
    gone = [
        {"type": "http.request", "body": body[:10], "more_body": True},
        {"type": "http.disconnect"},
    ]
    status, _, answered = answer(asgi(receiver, http_scope(headers=signed(body, "m1")), gone))
    assert (status, answered["reason"]) == (400, "disconnected")
    for raw in (b"not json", b'{"type":', b"[" * 100_000):
        delivery = [{"type": "http.request", "body": raw, "more_body": False}]
        status, _, answered = answer(
            asgi(receiver, http_scope(headers=signed(raw, "m2")), delivery)
        )
        assert (status, answered["reason"], answered["detail"]) == (
            400,
            "malformed",
            "the body is not JSON",
        )
    assert app_ledger.jobs() == []
    # The whole delivery, sent again, is accepted: nothing of the broken ones was kept.
    delivery = [{"type": "http.request", "body": body, "more_body": False}]
    status, _, answered = answer(asgi(receiver, http_scope(headers=signed(body, "m1")), delivery))
    assert (status, answered["status"]) == (202, "accepted")


def test_a_receiver_served_as_the_app_completes_the_lifespan_and_ignores_websockets(app_ledger):
    # uvicorn app:receiver runs the lifespan protocol first (and fails to start, with
    # lifespan "on", when the app does not complete it).
    receiver = WebhookReceiver(app_ledger, SECRET, "inbox")
    lifespan = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent = asgi(receiver, {"type": "lifespan"}, lifespan)
    assert sent == [{"type": "lifespan.startup.complete"}, {"type": "lifespan.shutdown.complete"}]
    assert asgi(receiver, {"type": "websocket", "headers": []}, []) == []


def test_a_receiver_needs_a_secret_and_a_task(app_ledger):
    for secrets in ([], ()):
        with pytest.raises(ConfigError, match="at least one secret"):
            WebhookReceiver(app_ledger, secrets, "inbox")
    for task in ("", None, 7):
        with pytest.raises(ConfigError, match="a registered Task or a task name"):
            WebhookReceiver(app_ledger, SECRET, task)  # type: ignore[arg-type]
