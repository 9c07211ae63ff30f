"""The push subscriptions page's data: each subscription with its health, last error and state
(active, paused, or disabled — by an operator, or by the endpoint answering 410 Gone)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..._records import Subscription, SubscriptionState
from ..state import ServerState

__all__ = ["SubscriptionView", "load_subscriptions"]


@dataclass(frozen=True)
class SubscriptionView:
    """One push subscription as the dashboard shows it."""

    name: str
    queue: str
    url: str
    state: str
    """``active``, ``paused`` or ``disabled``."""
    healthy: bool | None
    """None before its first delivery attempt."""
    last_error: str | None
    last_success_at: datetime | None
    last_failure_at: datetime | None
    state_reason: str | None
    delivered: int
    failed: int

    @property
    def paused(self) -> bool:
        return self.state != SubscriptionState.ACTIVE.value

    @classmethod
    def from_row(cls, row: Subscription) -> SubscriptionView:
        return cls(
            name=row.id,
            queue=row.queue,
            url=row.url,
            state=SubscriptionState(row.state).value,
            healthy=None if row.last_attempt_at is None else row.consecutive_failures == 0,
            last_error=row.last_error,
            last_success_at=row.last_success_at,
            last_failure_at=row.last_failure_at,
            state_reason=row.state_reason,
            delivered=row.delivered,
            failed=row.failed,
        )


def load_subscriptions(state: ServerState) -> list[SubscriptionView]:
    """Every push subscription (never its secret)."""
    return [SubscriptionView.from_row(row) for row in state.ledger.subscriptions.list()]
