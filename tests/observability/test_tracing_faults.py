"""Tracing never fails the work it traces: an OpenTelemetry SDK, propagator or span processor
that raises leaves an enqueue, an attempt, a push delivery and an HTTP request as they would
be without tracing, and says so in the log. And an HTTP request that raises ends its server
span with the exception recorded. Checked with the SDK's in-memory exporter, on both
backends."""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from starlette.middleware import Middleware

from jobledger import JobState, Ledger
from jobledger.http import create_app
from jobledger.observability import tracing
from jobledger.push import PushService

from ..push.conftest import fast_settings, subscribe
from ..support.endpoints import Endpoint
from ..support.http import api_server
from ..support.otel import named, recording, traceparent, tracer, until_pushed
from ..support.processes import wait_until

LOGGER = "jobledger.observability"


class _Raising(SpanProcessor):
    """A span processor that raises when a span starts or ends, while a test asks it to."""

    def __init__(self) -> None:
        self.on_start_raises = False
        self.on_end_raises = False

    def on_start(self, span: Span, parent_context: Any = None) -> None:
        if self.on_start_raises and threading.current_thread().name != "MainThread":
            raise RuntimeError("the processor broke on start")

    def on_end(self, span: ReadableSpan) -> None:
        if self.on_end_raises and threading.current_thread().name != "MainThread":
            raise RuntimeError("the processor broke on end")


_PROCESSOR = _Raising()
_ADDED = False


@contextmanager
def broken(*, start: bool = False, end: bool = False) -> Iterator[None]:
    """The SDK's span processor raises (off the test's own thread) inside the block."""
    global _ADDED
    tracer()  # the SDK's provider, installed once for the test process
    if not _ADDED:
        trace.get_tracer_provider().add_span_processor(_PROCESSOR)  # type: ignore[attr-defined]
        _ADDED = True
    _PROCESSOR.on_start_raises, _PROCESSOR.on_end_raises = start, end
    try:
        yield
    finally:
        _PROCESSOR.on_start_raises = _PROCESSOR.on_end_raises = False


class _InjectRaises(TraceContextTextMapPropagator):
    def inject(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the propagator broke")


def _drain(ledger: Ledger, job_id: int) -> None:
    def finished() -> bool:
        ledger.run_worker(burst=True, handle_signals=False)
        return ledger.job(job_id).state.is_final

    wait_until(finished, timeout=30, what=f"job {job_id} to finish")


def _logged(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and text in r.getMessage()]


def test_a_propagator_that_raises_never_fails_an_enqueue(ledger, monkeypatch, caplog):
    ledger.task(lambda ctx: None, name="plain")
    monkeypatch.setattr(tracing, "_propagator", _InjectRaises)
    with tracer().start_as_current_span("signup"):
        job = ledger.enqueue("plain", key="k")
    assert job.created and ledger.job(job.id).state is JobState.PENDING
    [claimed] = ledger.backend.jobs.claim(["default"], "test", 1)
    assert claimed.trace_context is None  # enqueued as without a span
    [record] = _logged(caplog, "reading the current trace context failed")
    assert record.exc_info is not None


@pytest.mark.parametrize("where", ["start", "end"])
def test_a_span_processor_that_raises_never_fails_an_attempt(ledger, where, caplog):
    ran = []

    @ledger.task
    def work(ctx):
        ran.append(ctx.attempt)
        return {"ok": True}

    job_id = work.enqueue({}, key="w").id
    with broken(start=where == "start", end=where == "end"):
        _drain(ledger, job_id)
    assert ran == [1]
    job = ledger.job(job_id)
    assert job.state is JobState.DONE and job.attempts == 1
    assert ledger.result(job_id) == {"ok": True}
    message = "starting the span" if where == "start" else "ending the span"
    assert _logged(caplog, f"{message} of job {job_id} failed")


def test_a_context_that_cannot_be_detached_never_fails_an_attempt(ledger, monkeypatch, caplog):
    from opentelemetry import context

    def refuse(token: object) -> None:
        raise RuntimeError("the context broke")

    @ledger.task(max_attempts=1)
    def work(ctx):
        monkeypatch.setattr(context, "detach", refuse)  # as the attempt's span is closed
        return {"ok": True}

    with recording() as spans:
        job_id = work.enqueue({}, key="w").id
        _drain(ledger, job_id)
        monkeypatch.undo()
        wait_until(lambda: named(spans, "jobledger run work"), what="the attempt's span")
    assert ledger.job(job_id).state is JobState.DONE
    [span] = named(spans, "jobledger run work")
    assert span.attributes["jobledger.outcome"] == "done"
    assert _logged(caplog, f"closing the span of job {job_id} failed")


def test_a_push_delivery_whose_traceparent_cannot_be_written_sends_the_stored_one(
    ledger, monkeypatch, caplog
):
    endpoint = Endpoint()
    subscribe(ledger, endpoint.url)
    try:
        with tracer().start_as_current_span("publish") as parent:
            job_id = ledger.enqueue("hook.event", {"n": 1}, key="h-1", queue="hooks").id
        monkeypatch.setattr(tracing, "_propagator", _InjectRaises)
        with recording() as spans:
            service = PushService(ledger, fast_settings())
            service.start()
            until_pushed(ledger, job_id, service, spans)
    finally:
        endpoint.stop()
    assert ledger.job(job_id).state is JobState.DONE
    [request] = endpoint.requests
    assert request.headers["traceparent"] == traceparent(parent.get_span_context())
    assert _logged(caplog, f"writing the trace headers of job {job_id} failed")


@pytest.mark.parametrize("where", ["start", "end"])
def test_a_span_processor_that_raises_never_fails_an_http_request(ledger, where, caplog):
    with api_server(ledger) as api:
        api.queue("orders")
        with broken(start=where == "start", end=where == "end"):
            response = api.admin.post(
                "/v1/queue/publish",
                json={"queue": "orders", "payload": {"id": 1}},
                headers={"Idempotency-Key": "o-1"},
            )
            assert response.status_code == 201, response.text
            assert api.admin.get("/v1/queues").status_code == 200
    assert [job.key for job in ledger.jobs()] == ["o-1"]
    message = "starting the server span" if where == "start" else "ending the server span"
    assert _logged(caplog, message)


def test_a_request_that_raises_records_the_exception_on_its_server_span(ledger):
    class Broken:
        """A middleware of the application's that fails."""

        def __init__(self, app: Any):
            self.app = app

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                raise RuntimeError("the middleware broke")
            await self.app(scope, receive, send)

    with warnings.catch_warnings():
        # Starlette's test client warns that it will want another httpx one day: the test
        # needs a request served in this process (its spans are recorded here), nothing more.
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    app = create_app(ledger, middleware=[Middleware(Broken)])
    with recording() as spans, TestClient(app, raise_server_exceptions=False) as client:
        response = client.get("/v1/queues")
        assert response.status_code == 500
        assert response.headers["content-type"].startswith("application/problem+json")
        wait_until(lambda: named(spans, "GET /v1/queues"), what="the server span")
    [server] = named(spans, "GET /v1/queues")
    assert server.status.status_code is StatusCode.ERROR
    assert server.status.description == "RuntimeError"
    [event] = server.events
    assert event.name == "exception"
    assert event.attributes["exception.type"] == "RuntimeError"
    assert event.attributes["exception.message"] == "the middleware broke"
