"""The push subscriptions page's data: each subscription with its health, last error and whether
it is paused.

PLACE FOR PUSH DELIVERY (issue 6): push subscriptions are stored by the push delivery feature.
Until a backend offers ``subscription_list()``, ``load_subscriptions`` returns None and the page
says that push delivery is not part of this server. When it does, each row it returns is shown
through ``SubscriptionView.from_row``, which reads the attributes by name and tolerates missing
ones, so the page works with whatever record type push delivery settles on.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..state import ServerState

__all__ = ["SubscriptionView", "load_subscriptions"]


@dataclass(frozen=True)
class SubscriptionView:
    """One push subscription as the dashboard shows it."""

    name: str
    queue: str
    url: str
    paused: bool
    healthy: bool | None
    """None when the subscription says nothing about its health."""
    last_error: str | None
    last_success_at: datetime | None
    last_failure_at: datetime | None
    disabled_reason: str | None

    @classmethod
    def from_row(cls, row: Any) -> SubscriptionView:
        def get(*names: str) -> Any:
            for name in names:
                value = row.get(name) if isinstance(row, dict) else getattr(row, name, None)
                if value is not None:
                    return value
            return None

        paused = bool(get("paused", "disabled") or False)
        failures = get("consecutive_failures", "failures")
        healthy = get("healthy")
        if healthy is None and failures is not None:
            healthy = int(failures) == 0
        return cls(
            name=str(get("name", "id") or "?"),
            queue=str(get("queue") or "?"),
            url=str(get("url") or ""),
            paused=paused,
            healthy=None if healthy is None else bool(healthy),
            last_error=get("last_error"),
            last_success_at=get("last_success_at", "last_delivered_at"),
            last_failure_at=get("last_failure_at", "last_error_at"),
            disabled_reason=get("disabled_reason", "paused_reason"),
        )


def load_subscriptions(state: ServerState) -> list[SubscriptionView] | None:
    """Every push subscription, or None when this ledger has no push delivery."""
    lister = getattr(state.backend, "subscription_list", None)
    if lister is None:
        return None
    return [SubscriptionView.from_row(row) for row in lister()]
