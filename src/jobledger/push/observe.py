"""What the delivery loop tells the outside: one report per delivery, and subscription changes.

For metrics and dashboards. An observer is any object with one or both of these methods —
subclass ``PushObserver`` for the defaults — added to ``PushService(observers=...)`` or to
``ledger.observers`` (the list worker observers live in: one object may observe both). Every
``PushService`` also keeps a ``PushCounters`` (``service.counters``).

Observers are called on the delivery loop's thread, after the outcome is written: keep them quick
and never raise (an exception is logged and swallowed).
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

__all__ = ["DeliveryReport", "PushCounters", "PushObserver", "SubscriptionChange", "status_class"]


def status_class(status: int | None, error_class: str | None = None) -> str:
    """``2xx`` … ``5xx`` for an HTTP answer; ``timeout``, ``refused`` (the SSRF guard) or
    ``network`` (connection, TLS, protocol errors) when there was none."""
    if status is not None:
        return f"{status // 100}xx"
    if error_class == "Timeout":
        return "timeout"
    if error_class == "TargetRefused":
        return "refused"
    return "network"


@dataclass(frozen=True, slots=True)
class DeliveryReport:
    """One delivery attempt, after its outcome was written.

    ``outcome``: ``done`` (2xx), ``retry`` (back to pending), ``dead`` (a 4xx, or the budget is
    spent), ``released`` (410: given back uncharged, the subscription disabled; or the loop
    stopped mid-request) or ``lease_lost`` (the outcome was refused: the lease had expired).
    """

    subscription_id: str
    queue: str
    job_id: int
    key: str
    webhook_id: str
    attempt: int
    status: int | None
    status_class: str
    outcome: str
    duration: float
    """Seconds from the start of the request to its answer (or failure)."""
    error_class: str | None
    error: str | None
    retry_in: float | None
    """Seconds until the next attempt, for ``retry``."""
    correlation_id: str | None


@dataclass(frozen=True, slots=True)
class SubscriptionChange:
    """The delivery loop changed a subscription's state (today: ``disabled`` after a 410)."""

    subscription_id: str
    queue: str
    url: str
    state: str
    reason: str


class PushObserver:
    """Told what the delivery loop does. Override what you need; the defaults do nothing."""

    def on_push_delivery(self, report: DeliveryReport) -> None:
        """A delivery attempt ended and its outcome was written."""

    def on_subscription_change(self, change: SubscriptionChange) -> None:
        """The loop disabled a subscription (410 Gone)."""


class PushCounters(PushObserver):
    """Counts of deliveries since the service started, thread-safe.

    ``by_status_class()``: ``{(subscription_id, queue, "2xx"): n, …}``; ``by_outcome()``:
    ``{(subscription_id, queue, "done"): n, …}``; ``durations()``: total seconds and count per
    subscription (for an average); ``disabled``: the subscriptions disabled since start.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._classes: Counter[tuple[str, str, str]] = Counter()
        self._outcomes: Counter[tuple[str, str, str]] = Counter()
        self._seconds: dict[tuple[str, str], list[float]] = {}
        self.disabled: list[SubscriptionChange] = []

    def on_push_delivery(self, report: DeliveryReport) -> None:
        ident = (report.subscription_id, report.queue)
        with self._lock:
            self._classes[(*ident, report.status_class)] += 1
            self._outcomes[(*ident, report.outcome)] += 1
            total = self._seconds.setdefault(ident, [0.0, 0.0])
            total[0] += report.duration
            total[1] += 1

    def on_subscription_change(self, change: SubscriptionChange) -> None:
        with self._lock:
            self.disabled.append(change)

    def by_status_class(self) -> dict[tuple[str, str, str], int]:
        with self._lock:
            return dict(self._classes)

    def by_outcome(self) -> dict[tuple[str, str, str], int]:
        with self._lock:
            return dict(self._outcomes)

    def durations(self) -> dict[tuple[str, str], tuple[float, int]]:
        with self._lock:
            return {k: (v[0], int(v[1])) for k, v in self._seconds.items()}

    def total(self, **match: Any) -> int:
        """Deliveries whose report matches, e.g. ``total(status_class="2xx")``,
        ``total(outcome="retry", queue="hooks")``."""
        with self._lock:
            if "outcome" in match:
                items = self._outcomes.items()
                field = match.pop("outcome")
            else:
                items = self._classes.items()
                field = match.pop("status_class", None)
        n = 0
        for (sub, queue, value), count in items:
            if field is not None and value != field:
                continue
            if match.get("queue", queue) != queue or match.get("subscription_id", sub) != sub:
                continue
            n += count
        return n
