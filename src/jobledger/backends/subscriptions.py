"""The subscriptions role: push subscriptions (one per queue), their signing secrets and their
delivery health (jobledger.push)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from .._records import Subscription, SubscriptionState

__all__ = ["Subscriptions"]


class Subscriptions(Protocol):
    """Push subscriptions (``backend.subscriptions``)."""

    def insert(self, sub: Subscription, now: datetime | None = None) -> Subscription:
        """Store a new subscription; ``SubscriptionExists`` when its queue already has one."""
        ...

    def get(self, subscription_id: str) -> Subscription:
        """The subscription with this id, or ``NotFound``."""
        ...

    def all(self) -> list[Subscription]:
        """Every subscription, by queue, with its secrets (the delivery loop signs with them)."""
        ...

    def set_state(
        self,
        subscription_id: str,
        state: SubscriptionState,
        actor: str | None,
        reason: str | None,
        now: datetime | None = None,
    ) -> Subscription:
        """Pause, resume (``active``) or disable a subscription, recording who and why."""
        ...

    def delete(self, subscription_id: str) -> Subscription:
        """Delete a subscription (its queue's jobs stay); return what was deleted."""
        ...

    def rotate(
        self,
        subscription_id: str,
        secret: str,
        overlap_seconds: float,
        now: datetime | None = None,
    ) -> Subscription:
        """Make ``secret`` the signing secret; the old one keeps signing for the overlap."""
        ...

    def record(
        self,
        subscription_id: str,
        ok: bool,
        status: int | None,
        error: str | None,
        now: datetime | None = None,
    ) -> None:
        """Note a delivery's outcome on the subscription's health (last status and error,
        consecutive failures, counts). An unknown id changes nothing."""
        ...
