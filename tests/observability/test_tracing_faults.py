"""Tracing never fails the work it traces: a span processor that raises leaves an HTTP request
answered as it would be without tracing, and says so in the log. On both backends."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from ..support.http import api_server
from ..support.otel import tracer

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


def _logged(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and text in r.getMessage()]


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
