"""The effects role: a handler's record that a side effect happened for a key, fenced by its
lease, so that a retry after a crash can tell it already happened (docs/guarantees.md).

Written once for both dialects, over the dialect's database object: a side effect recorded for a key, fenced by the lease
in the same statement.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from .._records import MAX_KEY_LENGTH, Lease, encode_result, validate_name
from ..errors import LeaseLost
from .database import Database
from .rows import effect as effect_row

__all__ = ["Effects"]

log = logging.getLogger("jobledger.effects")


class Effects:
    """Effects recorded by key (``backend.effects``)."""

    def __init__(self, db: Database):
        self._db = db

    def record(
        self,
        queue: str,
        key: str,
        effect: str,
        lease: Lease,
        detail: dict[str, Any] | None = None,
        now: datetime | None = None,
        conn: Any = None,
    ) -> bool:
        """Record that ``effect`` happened for this key, fenced by the lease. Returns True when
        recorded now, False when it was already recorded. Raises ``LeaseLost`` when stale, and
        ``PayloadError`` for a name no effect can have. A ``detail`` the ledger cannot keep
        (the bounds of a result: JSON, 256 KiB, no NaN, no U+0000) is left out, with a warning:
        the effect happened, and failing its record would have it repeated. Both are checked
        here, alike on both backends (SQLite stored what PostgreSQL refused)."""
        effect = _effect_name(effect)
        try:
            detail_json = encode_result(detail)
        except ValueError as exc:
            log.warning(
                "effect %r of key %r recorded without its detail, which cannot be kept: %s",
                effect,
                key,
                exc,
            )
            detail_json = None
        params = {
            "queue": queue,
            "key": key,
            "effect": effect,
            "job_id": lease.job_id,
            "token": lease.token,
            "detail": detail_json,
            "now": self._db.clock(now),
        }
        with self._db.transaction(conn) as c:
            if self._db.execute(c, "effect_record", params).rowcount == 1:
                return True
            if self._db.execute(c, "effect_holder", params).fetchone() is None:
                raise LeaseLost(lease.job_id, lease.token, f"record effect {effect!r}")
            return False

    def get(self, queue: str, key: str, effect: str) -> dict[str, Any] | None:
        """The recorded effect (with its ``detail``), or None."""
        params = {"queue": queue, "key": key, "effect": _effect_name(effect)}
        rows = self._db.read("effect_get", params)
        return effect_row(rows[0], self._db.to_time, self._db.from_json) if rows else None

    def all(self, queue: str, key: str) -> list[dict[str, Any]]:
        """Every effect recorded for a key, oldest first."""
        rows = self._db.read("effect_list", {"queue": queue, "key": key})
        return [effect_row(r, self._db.to_time, self._db.from_json) for r in rows]


def _effect_name(effect: Any) -> str:
    """An effect's name: 1-512 characters without control characters, as a key (a number was
    stored as a number by SQLite, U+0000 stored by SQLite and refused by PostgreSQL), or
    ``PayloadError``."""
    return validate_name(effect, "an effect's name", MAX_KEY_LENGTH)
