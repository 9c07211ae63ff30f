"""The subscriptions role on PostgreSQL (``jobledger_subscriptions``, migration 005)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from ..._records import Subscription, SubscriptionState
from ...errors import NotFound, SubscriptionExists
from ..common import subscription_row
from .database import PostgresDatabase
from .database import to_time as _utc

__all__ = ["PostgresSubscriptions"]


class PostgresSubscriptions:
    """``Subscriptions`` for PostgreSQL."""

    def __init__(self, db: PostgresDatabase):
        self._db = db

    def _subscription(self, c: psycopg.Connection[Any], subscription_id: str) -> Subscription:
        row = c.execute(
            (self._db.sql["subscription_select"] + " WHERE id = %(id)s").encode(),
            {"id": subscription_id},
        ).fetchone()
        if row is None:
            raise NotFound(f"no subscription with id {subscription_id!r}")
        return subscription_row(row, _utc)

    def insert(self, sub: Subscription, now: datetime | None = None) -> Subscription:
        with self._db.transaction() as c:
            row = c.execute(
                self._db.sql["subscription_insert"].encode(),
                {
                    "id": sub.id,
                    "queue": sub.queue,
                    "url": sub.url,
                    "secret": sub.secret,
                    "timeout_seconds": sub.timeout_seconds,
                    "concurrency": sub.concurrency,
                    "rate_per_second": sub.rate_per_second,
                    "burst": sub.burst,
                    "now": now,
                },
            ).fetchone()
            if row is None:
                found = c.execute(
                    f"SELECT id FROM {self._db.tables['subscriptions']} WHERE queue = %(q)s".encode(),
                    {"q": sub.queue},
                ).fetchone()
                raise SubscriptionExists(sub.queue, found[0] if found else "?")
            return self._subscription(c, sub.id)

    def get(self, subscription_id: str) -> Subscription:
        with self._db.transaction() as c:
            return self._subscription(c, subscription_id)

    def all(self) -> list[Subscription]:
        with self._db.transaction() as c:
            rows = c.execute((self._db.sql["subscription_select"] + " ORDER BY queue").encode())
            return [subscription_row(r, _utc) for r in rows.fetchall()]

    def set_state(
        self,
        subscription_id: str,
        state: SubscriptionState,
        actor: str | None,
        reason: str | None,
        now: datetime | None = None,
    ) -> Subscription:
        with self._db.transaction() as c:
            c.execute(
                self._db.sql["subscription_state"].encode(),
                {
                    "id": subscription_id,
                    "state": SubscriptionState(state).value,
                    "actor": actor,
                    "reason": reason,
                    "now": now,
                },
            )
            return self._subscription(c, subscription_id)

    def delete(self, subscription_id: str) -> Subscription:
        with self._db.transaction() as c:
            sub = self._subscription(c, subscription_id)
            c.execute(self._db.sql["subscription_delete"].encode(), {"id": subscription_id})
            return sub

    def rotate(
        self,
        subscription_id: str,
        secret: str,
        overlap_seconds: float,
        now: datetime | None = None,
    ) -> Subscription:
        with self._db.transaction() as c:
            c.execute(
                self._db.sql["subscription_rotate"].encode(),
                {
                    "id": subscription_id,
                    "secret": secret,
                    "overlap": float(overlap_seconds),
                    "now": now,
                },
            )
            return self._subscription(c, subscription_id)

    def record(
        self,
        subscription_id: str,
        ok: bool,
        status: int | None,
        error: str | None,
        now: datetime | None = None,
    ) -> None:
        self._db.run(
            "subscription_record",
            {"id": subscription_id, "ok": bool(ok), "status": status, "error": error, "now": now},
        )
