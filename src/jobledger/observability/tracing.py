"""OpenTelemetry: a trace that crosses the queue (see docs/integrations.md).

- An enqueue made while a span is current stores that span's W3C trace context (``traceparent``,
  ``tracestate``) with the job (``current_trace_context``).
- Each attempt is a span of its own (``AttemptTracing``, the runtime's ``AttemptTracer``),
  **linked** to the stored context rather than parented by it: an attempt may run hours after
  its enqueue, and may be one of several (retries), which is how OpenTelemetry's messaging
  conventions relate a message's processing to its creation.
- A push delivery sends its attempt's context as ``traceparent`` (``trace_headers``); the HTTP
  API continues an incoming one (``jobledger.http`` uses ``server_span``).

Nothing here imports ``opentelemetry`` unless the process already has: an application that
traces has imported it to configure its SDK, and one that has not could only make spans that
record nothing. So without the ``otel`` extra, or with it installed and unused, jobledger does
exactly what it did, and imports nothing more.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .._runtime.leases import LeaseHold
    from .._runtime.outcomes import Finished

__all__ = [
    "AttemptTracing",
    "attempt_tracer",
    "current_trace_context",
    "server_span",
    "trace_headers",
    "tracing_on",
]

log = logging.getLogger("jobledger.observability")

#: The headers of the W3C trace context, the only ones stored and sent.
TRACE_HEADERS = ("traceparent", "tracestate")

#: Outcomes that are a failed attempt (the span's status is an error).
_FAILED = frozenset({"retry", "dead", "timed_out", "lease_lost"})


def tracing_on() -> bool:
    """True when this process uses OpenTelemetry (has imported its API)."""
    return "opentelemetry.trace" in sys.modules


@functools.cache
def _tracer() -> Any:
    from importlib.metadata import PackageNotFoundError, version

    from opentelemetry import trace

    try:
        release: str | None = version("jobledger")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        release = None
    return trace.get_tracer("jobledger", release)


def _propagator() -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator()


def current_trace_context() -> str | None:
    """The current span's W3C trace context as stored with a job (a JSON object of
    ``traceparent`` and ``tracestate``), or None: no OpenTelemetry in this process, or no valid
    span current. A span that is not sampled is stored too (its flags say so): the attempt's
    span links to it as W3C propagation would."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    try:
        if not trace.get_current_span().get_span_context().is_valid:
            return None
        carrier: dict[str, str] = {}
        _propagator().inject(carrier)
    except Exception:  # tracing must never fail an enqueue
        log.exception("reading the current trace context failed")
        return None
    return json.dumps(carrier, separators=(",", ":"), sort_keys=True) if carrier else None


def stored_headers(trace_context: str | None) -> dict[str, str]:
    """The ``traceparent`` (and ``tracestate``) stored with a job; {} when none or unreadable."""
    if not trace_context:
        return {}
    try:
        carrier = json.loads(trace_context)
    except ValueError:
        return {}
    if not isinstance(carrier, dict):
        return {}
    return {k: v for k in TRACE_HEADERS if isinstance(v := carrier.get(k), str) and v.isascii()}


def trace_headers(hold: LeaseHold) -> dict[str, str]:
    """What a push delivery sends of the trace: its attempt span's context when it has one,
    else the context stored with the job (forwarded as it was enqueued), else nothing."""
    span = hold.span
    if span is not None:
        try:
            from opentelemetry import trace

            carrier: dict[str, str] = {}
            _propagator().inject(carrier, context=trace.set_span_in_context(span))
            if carrier:
                return carrier
        except Exception:
            log.exception("writing the trace headers of job %d failed", hold.job.id)
    return stored_headers(hold.job.trace_context)


def attempt_tracer() -> AttemptTracing | None:
    """An ``AttemptTracing`` when this process uses OpenTelemetry, else None (a runtime then
    traces nothing and pays nothing)."""
    return AttemptTracing() if tracing_on() else None


class AttemptTracing:
    """One span per attempt: ``jobledger run <task>`` (a consumer span; a push delivery's is
    ``jobledger push <task>``, a client span), linked to the enqueue's stored context, with the
    job's key, queue, task, attempt and id, and once written its outcome (``done``, ``retry``,
    ``dead``, ``timed_out``, ``released``, ``lease_lost``). A failed attempt's span records the
    handler's exception and has an error status."""

    def __init__(self) -> None:
        from opentelemetry import context, trace

        self._trace = trace
        self._context = context
        # The global provider, looked up when a span starts (a proxy until one is set).
        self._tracer = _tracer()

    def start(self, hold: LeaseHold, holder: str, target: str | None = None) -> object:
        try:
            return self._start(hold, holder, target)
        except Exception:
            log.exception("starting the span of job %d failed", hold.job.id)
            return None

    def _start(self, hold: LeaseHold, holder: str, target: str | None) -> object:
        trace = self._trace
        job = hold.job
        attributes: dict[str, Any] = {
            "messaging.system": "jobledger",
            "messaging.destination.name": job.queue,
            "messaging.message.id": str(job.id),
            "messaging.operation.type": "send" if target else "process",
            "messaging.operation.name": "push" if target else "run",
            "jobledger.job.id": job.id,
            "jobledger.job.key": job.key,
            "jobledger.queue": job.queue,
            "jobledger.task": job.task,
            "jobledger.attempt": job.attempt,
            "jobledger.worker": holder,
        }
        if job.correlation_id:
            attributes["messaging.message.conversation_id"] = job.correlation_id
        if job.group is not None:
            attributes["jobledger.group"] = job.group
        if target:
            attributes["server.address"] = target
        links = []
        stored = stored_headers(job.trace_context)
        if stored:
            linked = trace.get_current_span(_propagator().extract(stored)).get_span_context()
            if linked.is_valid:
                links.append(trace.Link(linked))
        span = self._tracer.start_span(
            f"jobledger {'push' if target else 'run'} {job.task}",
            # A fresh root: the attempt is not a child of whatever the runner's thread holds.
            context=self._context.Context(),
            kind=trace.SpanKind.CLIENT if target else trace.SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
        )
        hold.span = span
        return self._context.attach(trace.set_span_in_context(span))

    def returned(self, hold: LeaseHold, token: object, error: BaseException | None) -> None:
        try:
            if token is not None:
                self._context.detach(token)  # type: ignore[arg-type]
            span = hold.span
            if error is not None and span is not None and span.is_recording():
                span.record_exception(error)
        except Exception:
            log.exception("closing the span of job %d failed", hold.job.id)

    def ended(self, item: Finished) -> None:
        outcome = item.outcome
        if outcome not in _FAILED:
            self._end(item, outcome, None, None)
            return
        failure = item.failure
        error_class = failure.error_class if failure is not None else "LeaseLost"
        detail = f"{error_class}: {failure.message}" if failure else "lease lost"
        self._end(item, outcome, error_class, detail)

    def given_up(self, item: Finished) -> None:
        # Never written, so never made a done, retry, dead… of: what the handler's attempt
        # ended as is kept in the error's text.
        failure = item.failure
        ended = f"{failure.error_class}: {failure.message}" if failure else "returned"
        detail = (
            f"its outcome ({ended}) was refused by the storage and given up; the lease "
            "expires and the job is handed out again"
        )
        self._end(item, "not_recorded", None, detail)

    def _end(
        self, item: Finished, outcome: str, error_type: str | None, detail: str | None
    ) -> None:
        """End the attempt's span (once) with its outcome, and an error status when ``detail``
        says what went wrong. Never raises."""
        hold = item.hold
        span, hold.span = hold.span, None
        if span is None:
            return
        try:
            span.set_attribute("jobledger.outcome", outcome)
            if error_type is not None:
                span.set_attribute("error.type", error_type)
            if detail is not None:
                span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, detail))
            span.end()
        except Exception:
            log.exception("ending the span of job %d failed", hold.job.id)


@contextmanager
def server_span(method: str, path: str, headers: Mapping[str, str]) -> Iterator[Any]:
    """A server span for one HTTP request, continuing the caller's ``traceparent`` (its
    parent), current while the request is handled: a publish made in it stores its context with
    the message's job. The caller names it by its route and sets the answer's status. An SDK
    (or span processor) that raises costs the request its span, never its answer: it is
    logged, and the request runs under a span that records nothing."""
    from opentelemetry import context, trace

    try:
        parent = _propagator().extract(dict(headers))
        attributes = {"http.request.method": method, "url.path": path}
        span = _tracer().start_span(
            f"{method}", context=parent, kind=trace.SpanKind.SERVER, attributes=attributes
        )
    except Exception:  # tracing must never fail a request
        log.exception("starting the server span of %s %s failed", method, path)
        span = trace.INVALID_SPAN
    token = context.attach(trace.set_span_in_context(span))
    try:
        yield span
    except BaseException as exc:
        if span.is_recording():
            span.record_exception(exc)
            span.set_status(trace.Status(trace.StatusCode.ERROR, type(exc).__name__))
        raise
    finally:
        context.detach(token)
        try:
            span.end()
        except Exception:
            log.exception("ending the server span of %s %s failed", method, path)
