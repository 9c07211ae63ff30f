"""The SQLite side of push subscriptions (``jobledger_subscriptions``). Mixed into
``SqliteBackend``; every write is one short ``BEGIN IMMEDIATE`` transaction."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .._records import Subscription, SubscriptionState
from ..errors import NotFound, SubscriptionExists
from .common import from_epoch as _dt

_TIMES = (11, 13, 14, 15, 16, 17, 18)  # columns of subscription_select that are times


def _ts(value: datetime | None) -> float:
    return time.time() if value is None else value.timestamp()


def subscription_from_row(row: Sequence[Any], to_time: Callable[[Any], Any]) -> Subscription:
    """A row of ``subscription_select`` (the dataclass's fields, in order) as a record."""
    values = list(row)
    for i in _TIMES:
        values[i] = to_time(values[i])
    values[8] = SubscriptionState(values[8])
    return Subscription(*values)


class SqlitePushMixin:
    """Push subscriptions for ``SqliteBackend``."""

    if TYPE_CHECKING:
        _sql: dict[str, str]
        _write: Callable[..., AbstractContextManager[sqlite3.Connection]]
        _read: Callable[..., list[Any]]

    def _subscription(self, c: Any, subscription_id: str) -> Subscription:
        row = c.execute(
            self._sql["subscription_select"] + " WHERE id = ?", (subscription_id,)
        ).fetchone()
        if row is None:
            raise NotFound(f"no subscription with id {subscription_id!r}")
        return subscription_from_row(row, _dt)

    def subscription_insert(self, sub: Subscription, now: datetime | None = None) -> Subscription:
        with self._write() as c:
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

    def subscription_get(self, subscription_id: str) -> Subscription:
        rows = self._read(self._sql["subscription_select"] + " WHERE id = ?", (subscription_id,))
        if not rows:
            raise NotFound(f"no subscription with id {subscription_id!r}")
        return subscription_from_row(rows[0], _dt)

    def subscription_list(self) -> list[Subscription]:
        rows = self._read(self._sql["subscription_select"] + " ORDER BY queue")
        return [subscription_from_row(r, _dt) for r in rows]

    def subscription_set_state(
        self,
        subscription_id: str,
        state: SubscriptionState,
        actor: str | None,
        reason: str | None,
        now: datetime | None = None,
    ) -> Subscription:
        with self._write() as c:
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

    def subscription_delete(self, subscription_id: str) -> Subscription:
        with self._write() as c:
            sub = self._subscription(c, subscription_id)
            c.execute(self._sql["subscription_delete"], {"id": subscription_id})
            return sub

    def subscription_rotate(
        self,
        subscription_id: str,
        secret: str,
        overlap_seconds: float,
        now: datetime | None = None,
    ) -> Subscription:
        with self._write() as c:
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

    def subscription_record(
        self,
        subscription_id: str,
        ok: bool,
        status: int | None,
        error: str | None,
        now: datetime | None = None,
    ) -> None:
        with self._write() as c:
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
