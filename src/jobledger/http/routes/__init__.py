"""The API's route groups, one module per area. A new area (push subscriptions, the dashboard,
``/metrics``) is a new module with its own ``group``, added to ``DEFAULT_GROUPS``."""

from __future__ import annotations

from . import (
    consume,
    dashboard,
    groups,
    health,
    messages,
    metrics,
    publish,
    queues,
    subscriptions,
)

DEFAULT_GROUPS = (
    health.group,
    queues.group,
    publish.group,
    consume.group,
    messages.group,
    groups.group,
    subscriptions.group,
    metrics.group,
    dashboard.group,
)

__all__ = ["DEFAULT_GROUPS"]
