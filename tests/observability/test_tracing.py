"""OpenTelemetry (issue 17, item 7): a trace that crosses the queue, on both backends. The
enqueue's span context is stored with the job; each attempt is a span linked to it, with the
job's key, queue, attempt and outcome; push deliveries send ``traceparent``; the HTTP API
continues an incoming one. Checked with the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from jobledger import Ledger, Permanent, Retry
from jobledger.observability.tracing import current_trace_context, stored_headers
from jobledger.push import PushService

from ..push.conftest import fast_settings, subscribe
from ..support.endpoints import Endpoint
from ..support.http import api_server
from ..support.otel import named, recording, traceparent, tracer, until_pushed
from ..support.processes import wait_until


def _drain(ledger: Ledger, job_id: int, **options: Any) -> None:
    """Burst workers until the job is finished."""

    def finished() -> bool:
        ledger.run_worker(burst=True, handle_signals=False, **options)
        return ledger.job(job_id).state.is_final

    wait_until(finished, timeout=30, what=f"job {job_id} to finish")


def _claimed_trace_context(ledger: Ledger, queue: str) -> str | None:
    [job] = ledger.backend.jobs.claim([queue], "test", 1)
    return job.trace_context


def test_the_enqueue_context_is_stored_and_the_attempt_links_to_it(ledger):
    seen: dict[str, Any] = {}

    @ledger.task(queue="mail", key=lambda p: str(p["n"]))
    def send(ctx, n):
        # What the handler does is part of the attempt's span.
        seen["current"] = trace.get_current_span().get_span_context()
        with tracer().start_as_current_span("render") as child:
            seen["child"] = child.get_span_context()

    with recording() as spans:
        with tracer().start_as_current_span("signup") as parent:
            job_id = send.enqueue({"n": 7}).id
        _drain(ledger, job_id)
    origin = parent.get_span_context()
    [attempt] = named(spans, "jobledger run")
    assert attempt.name == "jobledger run send"
    assert attempt.kind is SpanKind.CONSUMER
    # Linked to the enqueue, not its child: a new trace, whose root is the attempt.
    assert attempt.parent is None
    [link] = attempt.links
    assert (link.context.trace_id, link.context.span_id) == (origin.trace_id, origin.span_id)
    assert attempt.context.trace_id != origin.trace_id
    assert dict(attempt.attributes) == {
        "messaging.system": "jobledger",
        "messaging.destination.name": "mail",
        "messaging.message.id": str(job_id),
        "messaging.operation.type": "process",
        "messaging.operation.name": "run",
        "messaging.message.conversation_id": ledger.job(job_id).correlation_id,
        "jobledger.job.id": job_id,
        "jobledger.job.key": "7",
        "jobledger.queue": "mail",
        "jobledger.task": "send",
        "jobledger.attempt": 1,
        "jobledger.worker": attempt.attributes["jobledger.worker"],
        "jobledger.outcome": "done",
    }
    assert attempt.status.status_code is StatusCode.UNSET
    assert seen["current"].span_id == attempt.context.span_id
    [render] = named(spans, "render")
    assert render.parent is not None and render.parent.span_id == attempt.context.span_id
    assert seen["child"].trace_id == attempt.context.trace_id


def test_the_stored_context_is_the_w3c_traceparent(ledger):
    with tracer().start_as_current_span("batch") as parent:
        ledger.enqueue_many("t", [{"payload": {}, "key": "a"}, {"payload": {}, "key": "b"}])
    ctx = parent.get_span_context()
    stored = [_claimed_trace_context(ledger, "default") for _ in range(2)]
    assert stored[0] == stored[1]  # one enqueue, one context for the batch
    headers = json.loads(stored[0])
    assert headers == stored_headers(stored[0])
    assert headers["traceparent"] == traceparent(ctx)


def test_without_a_span_nothing_is_stored_and_the_attempt_has_no_link(ledger):
    ledger.task(lambda ctx: None, name="plain")
    with recording() as spans:
        assert current_trace_context() is None
        job_id = ledger.enqueue("plain", key="k").id
        _drain(ledger, job_id)
    [attempt] = named(spans, "jobledger run plain")
    assert attempt.links == () or list(attempt.links) == []
    assert attempt.attributes["jobledger.outcome"] == "done"


def test_retry_then_success_is_two_attempt_spans(ledger):
    calls = []

    @ledger.task(max_attempts=3)
    def flaky(ctx):
        calls.append(ctx.attempt)
        if len(calls) == 1:
            raise Retry(after=0)

    with recording() as spans:
        with tracer().start_as_current_span("order") as parent:
            job_id = flaky.enqueue({}, key="o-1").id
        _drain(ledger, job_id)
    attempts = named(spans, "jobledger run flaky")
    assert [s.attributes["jobledger.attempt"] for s in attempts] == [1, 2]
    assert [s.attributes["jobledger.outcome"] for s in attempts] == ["retry", "done"]
    first, second = attempts
    assert first.status.status_code is StatusCode.ERROR
    assert first.attributes["error.type"] == "Retry"
    assert [e.name for e in first.events] == ["exception"]
    assert second.status.status_code is StatusCode.UNSET and not second.events
    # Both link to the one enqueue.
    origin = parent.get_span_context().span_id
    assert [s.links[0].context.span_id for s in attempts] == [origin, origin]


def test_a_dead_attempt_records_its_exception(ledger):
    @ledger.task
    def refuse(ctx):
        raise Permanent("no such customer")

    with recording() as spans:
        job_id = refuse.enqueue({}, key="c-404").id
        _drain(ledger, job_id)
    [attempt] = named(spans, "jobledger run refuse")
    assert attempt.attributes["jobledger.outcome"] == "dead"
    assert attempt.status.status_code is StatusCode.ERROR
    assert "no such customer" in (attempt.status.description or "")
    [event] = attempt.events
    assert event.attributes["exception.type"].endswith("Permanent")


def test_an_outcome_the_storage_refuses_ends_its_span_as_not_recorded(ledger, monkeypatch):
    """The completer gives an outcome up after the storage refused it alone three times (the
    lease then expires): the attempt's span ends anyway, as an error that says its outcome was
    not recorded, instead of staying open for ever."""
    from jobledger._runtime.outcomes import Recorder

    write = Recorder.write

    def refusing(self, batch):  # type: ignore[no-untyped-def]
        if any(item.hold.job.key == "poison" for item in batch):
            raise ValueError("the storage refuses this outcome")
        return write(self, batch)

    monkeypatch.setattr(Recorder, "write", refusing)

    @ledger.task(lease_seconds=30)
    def ok(ctx):
        return None

    with recording() as spans:
        job_id = ok.enqueue({}, key="poison").id
        ledger.run_worker(burst=True, handle_signals=False)
        wait_until(lambda: named(spans, "jobledger run ok"), what="the attempt's span")
    [attempt] = named(spans, "jobledger run ok")
    assert attempt.attributes["jobledger.outcome"] == "not_recorded"
    assert attempt.status.status_code is StatusCode.ERROR
    assert "(returned) was refused by the storage and given up" in attempt.status.description
    assert ledger.job(job_id).state.value == "leased"  # until the lease expires


def test_an_attempt_past_its_timeout_is_timed_out(ledger):
    @ledger.task(timeout=0.2, max_attempts=1)
    async def slow(ctx):
        await asyncio.sleep(30)

    with recording() as spans:
        job_id = slow.enqueue({}, key="s").id
        _drain(ledger, job_id)
        wait_until(lambda: named(spans, "jobledger run slow"), what="the attempt's span")
    [attempt] = named(spans, "jobledger run slow")
    assert attempt.attributes["jobledger.outcome"] == "timed_out"
    assert attempt.attributes["error.type"] == "Timeout"


def test_an_async_handler_runs_inside_its_attempt_span(ledger):
    seen = {}

    @ledger.task
    async def fetch(ctx):
        seen["span"] = trace.get_current_span().get_span_context().span_id

    with recording() as spans:
        job_id = fetch.enqueue({}, key="f").id
        _drain(ledger, job_id)
    [attempt] = named(spans, "jobledger run fetch")
    assert seen["span"] == attempt.context.span_id


def test_an_unreadable_stored_context_is_no_link(ledger):
    ledger.task(lambda ctx: None, name="plain")
    with recording() as spans:
        with tracer().start_as_current_span("x"):
            job_id = ledger.enqueue("plain", key="k").id
        postgres = ledger.url.dialect == "postgres"
        table = f"{ledger.url.schema}.jobledger_jobs" if postgres else "jobledger_jobs"
        mark = "%s" if postgres else "?"
        with ledger.backend.transaction() as conn:
            conn.execute(
                f"UPDATE {table} SET trace_context = {mark} WHERE id = {mark}",
                ("{not json", job_id),
            )
        _drain(ledger, job_id)
    [attempt] = named(spans, "jobledger run plain")
    assert list(attempt.links) == [] and attempt.attributes["jobledger.outcome"] == "done"


def test_stored_headers_keep_only_the_trace_context():
    assert stored_headers(None) == {} and stored_headers("") == {}
    assert stored_headers("[1]") == {} and stored_headers("{") == {}
    text = json.dumps({"traceparent": "00-a-b-01", "tracestate": "k=v", "baggage": "secret=1"})
    assert stored_headers(text) == {"traceparent": "00-a-b-01", "tracestate": "k=v"}


# -- push -------------------------------------------------------------------------------------


def _push(ledger: Ledger, with_spans: bool = True) -> PushService:
    service = PushService(ledger, fast_settings())
    if not with_spans:
        service.runtime.tracer = None  # a process without an SDK's spans: the stored context
    service.start()
    return service


def test_a_push_delivery_sends_its_attempt_spans_traceparent(ledger):
    endpoint = Endpoint()
    subscribe(ledger, endpoint.url)
    try:
        with recording() as spans:
            with tracer().start_as_current_span("publish") as parent:
                job_id = ledger.enqueue("hook.event", {"n": 1}, key="h-1", queue="hooks").id
            until_pushed(ledger, job_id, _push(ledger), spans)
    finally:
        endpoint.stop()
    [request] = endpoint.requests
    [span] = named(spans, "jobledger push")
    assert span.name == "jobledger push hook.event" and span.kind is SpanKind.CLIENT
    ctx = span.context
    assert request.headers["traceparent"] == traceparent(ctx)
    assert span.links[0].context.span_id == parent.get_span_context().span_id
    assert span.attributes["jobledger.outcome"] == "done"
    assert span.attributes["http.response.status_code"] == 200
    assert span.attributes["server.address"] == "127.0.0.1"
    assert span.attributes["messaging.operation.type"] == "send"


def test_a_push_delivery_without_spans_forwards_the_stored_context(ledger):
    endpoint = Endpoint()
    subscribe(ledger, endpoint.url)
    try:
        with tracer().start_as_current_span("publish") as parent:
            job_id = ledger.enqueue("hook.event", {"n": 1}, key="h-1", queue="hooks").id
        until_pushed(ledger, job_id, _push(ledger, with_spans=False))
    finally:
        endpoint.stop()
    [request] = endpoint.requests
    ctx = parent.get_span_context()
    assert request.headers["traceparent"] == traceparent(ctx)


# -- the HTTP API -----------------------------------------------------------------------------


def test_a_publish_continues_the_incoming_traceparent(ledger):
    trace_id, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    incoming = f"00-{trace_id}-{caller_span}-01"
    with recording() as spans, api_server(ledger) as api:
        api.queue("orders")
        response = api.admin.post(
            "/v1/queue/publish",
            json={"queue": "orders", "payload": {"id": 1}},
            headers={"Idempotency-Key": "o-1", "traceparent": incoming, "tracestate": "a=1"},
        )
        assert response.status_code == 201, response.text
        wait_until(lambda: named(spans, "POST /v1/queue/publish"), what="the server span")
    [server] = named(spans, "POST /v1/queue/publish")
    assert server.kind is SpanKind.SERVER
    assert f"{server.context.trace_id:032x}" == trace_id
    assert server.parent is not None and f"{server.parent.span_id:016x}" == caller_span
    assert server.attributes["http.route"] == "/v1/queue/publish"
    assert server.attributes["http.response.status_code"] == 201
    stored = json.loads(_claimed_trace_context(ledger, "orders") or "{}")
    # The job's context is the server span's: the caller's trace, continued.
    assert stored["traceparent"] == traceparent(server.context)
    assert stored["traceparent"].startswith(f"00-{trace_id}-")
    assert stored["tracestate"] == "a=1"


def test_a_request_without_traceparent_is_a_new_trace(ledger):
    with recording() as spans, api_server(ledger) as api:
        assert api.admin.get("/v1/queues").status_code == 200
        wait_until(lambda: named(spans, "GET /v1/queues"), what="the server span")
    [server] = named(spans, "GET /v1/queues")
    assert server.parent is None


def test_every_claim_carries_the_stored_context(ledger):
    """The plain claim, the grouped claim and the claim by key (a broker's messages)."""
    with tracer().start_as_current_span("enqueue") as parent:
        ledger.enqueue("t", {}, key="plain", queue="q")
        ledger.enqueue("t", {}, key="grouped", queue="q", group="tenant-1")
        ledger.enqueue("t", {}, key="by-key", queue="k")
    expected = traceparent(parent.get_span_context())
    claimed = ledger.backend.jobs.claim(["q"], "test", 10)
    assert sorted(j.key for j in claimed) == ["grouped", "plain"]
    [by_key] = ledger.backend.jobs.claim_keys([("k", "by-key")], "test")
    for job in [*claimed, by_key.job]:
        assert json.loads(job.trace_context)["traceparent"] == expected, job.key
