"""The effects role, for both dialects: a side effect recorded for a key, fenced by the lease
in the same statement."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ..._records import Lease
from ...errors import LeaseLost
from ..rows import effect as effect_row
from .database import Database

__all__ = ["SqlEffects"]


class SqlEffects:
    """``Effects`` over a dialect's database object."""

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
        params = {
            "queue": queue,
            "key": key,
            "effect": effect,
            "job_id": lease.job_id,
            "token": lease.token,
            "detail": None if detail is None else json.dumps(detail),
            "now": self._db.clock(now),
        }
        with self._db.transaction(conn) as c:
            if self._db.execute(c, "effect_record", params).rowcount == 1:
                return True
            if self._db.execute(c, "effect_holder", params).fetchone() is None:
                raise LeaseLost(lease.job_id, lease.token, f"record effect {effect!r}")
            return False

    def get(self, queue: str, key: str, effect: str) -> dict[str, Any] | None:
        rows = self._db.read("effect_get", {"queue": queue, "key": key, "effect": effect})
        return effect_row(rows[0], self._db.to_time, self._db.from_json) if rows else None

    def all(self, queue: str, key: str) -> list[dict[str, Any]]:
        rows = self._db.read("effect_list", {"queue": queue, "key": key})
        return [effect_row(r, self._db.to_time, self._db.from_json) for r in rows]
