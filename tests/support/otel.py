"""OpenTelemetry for the tests: one SDK tracer provider for the test process (OpenTelemetry's
global provider can be set only once), whose finished spans an ``InMemorySpanExporter`` keeps
only while a test records them (``recording()``), so that the rest of the suite, which now
runs with OpenTelemetry imported, keeps nothing."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from .processes import wait_until


class _WhileRecording(SpanProcessor):
    def __init__(self, exporter: InMemorySpanExporter):
        self.exporter = exporter
        self.on = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.on:
            self.exporter.export([span])


_EXPORTER = InMemorySpanExporter()
_GATE = _WhileRecording(_EXPORTER)
_LOCK = threading.Lock()
_INSTALLED = False


def _install() -> None:
    global _INSTALLED
    with _LOCK:
        if _INSTALLED:
            return
        provider = trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            provider = TracerProvider()
            trace.set_tracer_provider(provider)
        provider.add_span_processor(_GATE)
        _INSTALLED = True


@contextmanager
def recording() -> Iterator[InMemorySpanExporter]:
    """The exporter of the spans that end inside the block."""
    _install()
    _EXPORTER.clear()
    _GATE.on = True
    try:
        yield _EXPORTER
    finally:
        _GATE.on = False


def tracer() -> Any:
    _install()
    return trace.get_tracer("tests")


def named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    """The finished spans whose names start with ``prefix``, in the order they started."""
    spans = [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]
    return sorted(spans, key=lambda s: s.start_time or 0)


def traceparent(ctx: Any) -> str:
    """A span context as the W3C ``traceparent`` header writes it."""
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def until_pushed(
    ledger: Any, job_id: int, service: Any, spans: InMemorySpanExporter | None = None
) -> None:
    """Wait until the push ``service`` (started) has finished job ``job_id`` and, with
    ``spans``, recorded its push span; then stop the service."""
    try:
        wait_until(lambda: ledger.job(job_id).state.is_final, what="the delivery")
        if spans is not None:
            wait_until(lambda: named(spans, "jobledger push"), what="the push span")
    finally:
        service.stop()
