"""The subscriptions role, for both dialects (``jobledger_subscriptions``, migration 005)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..._records import Subscription, SubscriptionState
from ...errors import NotFound, SubscriptionExists
from ..rows import subscription
from .database import Database

__all__ = ["SqlSubscriptions"]


class SqlSubscriptions:
    """``Subscriptions`` over a dialect's database object."""

    def __init__(self, db: Database):
        self._db = db
        self._by_id = f"WHERE id = {db.param('id')}"

    def _get(self, c: Any, subscription_id: str) -> Subscription:
        row = self._db.execute(
            c, "subscription_select", {"id": subscription_id}, where=self._by_id
        ).fetchone()
        if row is None:
            raise NotFound(f"no subscription with id {subscription_id!r}")
        return subscription(row, self._db.to_time)

    def insert(self, sub: Subscription, now: datetime | None = None) -> Subscription:
        params = {
            "id": sub.id,
            "queue": sub.queue,
            "url": sub.url,
            "secret": sub.secret,
            "timeout_seconds": sub.timeout_seconds,
            "concurrency": sub.concurrency,
            "rate_per_second": sub.rate_per_second,
            "burst": sub.burst,
            "now": self._db.clock(now),
        }
        with self._db.transaction() as c:
            if self._db.execute(c, "subscription_insert", params).fetchone() is None:
                found = self._db.execute(c, "subscription_of_queue", params).fetchone()
                raise SubscriptionExists(sub.queue, found[0] if found else "?")
            return self._get(c, sub.id)

    def get(self, subscription_id: str) -> Subscription:
        with self._db.reading() as c:
            return self._get(c, subscription_id)

    def all(self) -> list[Subscription]:
        rows = self._db.read("subscription_select", where="ORDER BY queue")
        return [subscription(r, self._db.to_time) for r in rows]

    def set_state(
        self,
        subscription_id: str,
        state: SubscriptionState,
        actor: str | None,
        reason: str | None,
        now: datetime | None = None,
    ) -> Subscription:
        params = {
            "id": subscription_id,
            "state": SubscriptionState(state).value,
            "actor": actor,
            "reason": reason,
            "now": self._db.clock(now),
        }
        with self._db.transaction() as c:
            self._db.execute(c, "subscription_state", params)
            return self._get(c, subscription_id)

    def delete(self, subscription_id: str) -> Subscription:
        with self._db.transaction() as c:
            sub = self._get(c, subscription_id)
            self._db.execute(c, "subscription_delete", {"id": subscription_id})
            return sub

    def rotate(
        self,
        subscription_id: str,
        secret: str,
        overlap_seconds: float,
        now: datetime | None = None,
    ) -> Subscription:
        params = {
            "id": subscription_id,
            "secret": secret,
            "overlap": float(overlap_seconds),
            "now": self._db.clock(now),
        }
        with self._db.transaction() as c:
            self._db.execute(c, "subscription_rotate", params)
            return self._get(c, subscription_id)

    def record(
        self,
        subscription_id: str,
        ok: bool,
        status: int | None,
        error: str | None,
        now: datetime | None = None,
    ) -> None:
        params = {
            "id": subscription_id,
            "ok": bool(ok),
            "status": status,
            "error": error,
            "now": self._db.clock(now),
        }
        self._db.count("subscription_record", params)
