"""Push delivery: a queue's jobs POSTed to an HTTPS endpoint, signed per Standard Webhooks.

- ``PushService`` — the delivery loop (``jobledger push``, and inside ``jobledger serve``);
- ``PushSettings`` — its settings: the SSRF allow-list, extra CAs, intervals;
- ``PushObserver``, ``PushCounters``, ``DeliveryReport`` — what it tells metrics and dashboards;
- ``WebhookReceiver`` — for applications that receive deliveries: verifies, dedupes by
  ``webhook-id``, records acceptance in the ledger and hands the event to a task;
- ``HttpTarget`` — a cron schedule whose ticks are POSTed to a URL.

- Standard Webhooks itself: ``verify_webhook``, ``sign``, ``signature_header``,
  ``generate_secret``, ``webhook_id`` and ``key_from_webhook_id``.

See docs/push.md.
"""

from __future__ import annotations

from .._webhooks import (
    WebhookVerificationError,
    generate_secret,
    key_from_webhook_id,
    sign,
    signature_header,
    verify_webhook,
    webhook_id,
)
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
    "WebhookVerificationError",
    "decide",
    "generate_secret",
    "key_from_webhook_id",
    "sign",
    "signature_header",
    "status_class",
    "verify_webhook",
    "webhook_id",
]
