"""Push delivery: a queue's jobs POSTed to an HTTPS endpoint, signed per Standard Webhooks.

- ``PushService`` — the delivery loop (``jobledger push``, and inside ``jobledger serve``);
- ``PushSettings`` — its settings: the SSRF allow-list, extra CAs, intervals;
- ``PushObserver``, ``PushCounters``, ``DeliveryReport`` — what it tells metrics and dashboards;
- ``WebhookReceiver`` — for applications that receive deliveries: verifies, dedupes by
  ``webhook-id``, records acceptance in the ledger and hands the event to a task;
- ``HttpTarget`` — a cron schedule whose ticks are POSTed to a URL.

Subscriptions themselves are in ``jobledger.subscriptions``; signatures in ``jobledger.webhooks``.
See docs/push.md.
"""

from __future__ import annotations

from .cron import HttpTarget
from .delivery import Decision, PushService, PushSettings, decide
from .guard import AddressPolicy, TargetRefused
from .observe import DeliveryReport, PushCounters, PushObserver, SubscriptionChange, status_class
from .receiver import WebhookReceiver

__all__ = [
    "AddressPolicy",
    "Decision",
    "DeliveryReport",
    "HttpTarget",
    "PushCounters",
    "PushObserver",
    "PushService",
    "PushSettings",
    "SubscriptionChange",
    "TargetRefused",
    "WebhookReceiver",
    "decide",
    "status_class",
]
