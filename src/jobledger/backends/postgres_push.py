"""The PostgreSQL side of push subscriptions (``jobledger_subscriptions``). Mixed into
``PostgresBackend``."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg

from .._records import Subscription, SubscriptionState
from ..errors import NotFound, SubscriptionExists
from .common import utc as _utc
from .sqlite_push import subscription_from_row


class PostgresPushMixin:
    """Push subscriptions for ``PostgresBackend``."""

    if TYPE_CHECKING:
        _sql: dict[str, str]
        _tables: dict[str, str]
        _tx: Callable[..., AbstractContextManager[psycopg.Connection[Any]]]
        _run: Callable[..., list[Any]]

    def _subscription(self, c: psycopg.Connection[Any], subscription_id: str) -> Subscription:
        row = c.execute(
            (self._sql["subscription_select"] + " WHERE id = %(id)s").encode(),
            {"id": subscription_id},
        ).fetchone()
        if row is None:
            raise NotFound(f"no subscription with id {subscription_id!r}")
        return subscription_from_row(row, _utc)

    def subscription_insert(self, sub: Subscription, now: datetime | None = None) -> Subscription:
        with self._tx() as c:
            row = c.execute(
                self._sql["subscription_insert"].encode(),
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
                    f"SELECT id FROM {self._tables['subscriptions']} WHERE queue = %(q)s".encode(),
                    {"q": sub.queue},
                ).fetchone()
                raise SubscriptionExists(sub.queue, found[0] if found else "?")
            return self._subscription(c, sub.id)

    def subscription_get(self, subscription_id: str) -> Subscription:
        with self._tx() as c:
            return self._subscription(c, subscription_id)

    def subscription_list(self) -> list[Subscription]:
        with self._tx() as c:
            rows = c.execute((self._sql["subscription_select"] + " ORDER BY queue").encode())
            return [subscription_from_row(r, _utc) for r in rows.fetchall()]

    def subscription_set_state(
        self,
        subscription_id: str,
        state: SubscriptionState,
        actor: str | None,
        reason: str | None,
        now: datetime | None = None,
    ) -> Subscription:
        with self._tx() as c:
            c.execute(
                self._sql["subscription_state"].encode(),
                {
                    "id": subscription_id,
                    "state": SubscriptionState(state).value,
                    "actor": actor,
                    "reason": reason,
                    "now": now,
                },
            )
            return self._subscription(c, subscription_id)

    def subscription_delete(self, subscription_id: str) -> Subscription:
        with self._tx() as c:
            sub = self._subscription(c, subscription_id)
            c.execute(self._sql["subscription_delete"].encode(), {"id": subscription_id})
            return sub

    def subscription_rotate(
        self,
        subscription_id: str,
        secret: str,
        overlap_seconds: float,
        now: datetime | None = None,
    ) -> Subscription:
        with self._tx() as c:
            c.execute(
                self._sql["subscription_rotate"].encode(),
                {
                    "id": subscription_id,
                    "secret": secret,
                    "overlap": float(overlap_seconds),
                    "now": now,
                },
            )
            return self._subscription(c, subscription_id)

    def subscription_record(
        self,
        subscription_id: str,
        ok: bool,
        status: int | None,
        error: str | None,
        now: datetime | None = None,
    ) -> None:
        self._run(
            "subscription_record",
            {"id": subscription_id, "ok": bool(ok), "status": status, "error": error, "now": now},
        )
