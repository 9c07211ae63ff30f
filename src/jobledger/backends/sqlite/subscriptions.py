"""The subscriptions role on SQLite (``jobledger_subscriptions``, migration 005). Every write
is one short ``BEGIN IMMEDIATE`` transaction."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..._records import Subscription, SubscriptionState
from ...errors import NotFound, SubscriptionExists
from ..common import subscription_row
from .database import SqliteDatabase, to_db
from .database import to_time as _dt

__all__ = ["SqliteSubscriptions"]

_ts = to_db


class SqliteSubscriptions:
    """``Subscriptions`` for SQLite."""

    def __init__(self, db: SqliteDatabase):
        self._db = db
        self._sql = db.sql

    def _subscription(self, c: Any, subscription_id: str) -> Subscription:
        row = c.execute(
            self._sql["subscription_select"] + " WHERE id = ?", (subscription_id,)
        ).fetchone()
        if row is None:
            raise NotFound(f"no subscription with id {subscription_id!r}")
        return subscription_row(row, _dt)

    def insert(self, sub: Subscription, now: datetime | None = None) -> Subscription:
        with self._db.transaction() as c:
            row = c.execute(
                self._sql["subscription_insert"],
                {
                    "id": sub.id,
                    "queue": sub.queue,
                    "url": sub.url,
                    "secret": sub.secret,
                    "timeout_seconds": sub.timeout_seconds,
                    "concurrency": sub.concurrency,
                    "rate_per_second": sub.rate_per_second,
                    "burst": sub.burst,
                    "now": _ts(now),
                },
            ).fetchone()
            if row is None:
                (existing,) = c.execute(
                    "SELECT id FROM jobledger_subscriptions WHERE queue = ?", (sub.queue,)
                ).fetchone()
                raise SubscriptionExists(sub.queue, existing)
            return self._subscription(c, sub.id)

    def get(self, subscription_id: str) -> Subscription:
        rows = self._db.read(self._sql["subscription_select"] + " WHERE id = ?", (subscription_id,))
        if not rows:
            raise NotFound(f"no subscription with id {subscription_id!r}")
        return subscription_row(rows[0], _dt)

    def all(self) -> list[Subscription]:
        rows = self._db.read(self._sql["subscription_select"] + " ORDER BY queue")
        return [subscription_row(r, _dt) for r in rows]

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
                self._sql["subscription_state"],
                {
                    "id": subscription_id,
                    "state": SubscriptionState(state).value,
                    "actor": actor,
                    "reason": reason,
                    "now": _ts(now),
                },
            )
            return self._subscription(c, subscription_id)

    def delete(self, subscription_id: str) -> Subscription:
        with self._db.transaction() as c:
            sub = self._subscription(c, subscription_id)
            c.execute(self._sql["subscription_delete"], {"id": subscription_id})
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
                self._sql["subscription_rotate"],
                {
                    "id": subscription_id,
                    "secret": secret,
                    "overlap": float(overlap_seconds),
                    "now": _ts(now),
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
        with self._db.transaction() as c:
            c.execute(
                self._sql["subscription_record"],
                {
                    "id": subscription_id,
                    "ok": bool(ok),
                    "status": status,
                    "error": error,
                    "now": _ts(now),
                },
            )
