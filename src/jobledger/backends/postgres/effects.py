"""The effects role on PostgreSQL: the fence check and the record in one statement."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..._records import Lease
from ...errors import LeaseLost
from .database import PostgresDatabase
from .database import to_time as _utc

__all__ = ["PostgresEffects"]


def _effect(row: Sequence[Any]) -> dict[str, Any]:
    return {
        "queue": row[0],
        "key": row[1],
        "effect": row[2],
        "job_id": row[3],
        "attempt": row[4],
        "recorded_at": _utc(row[5]),
        "detail": row[6],
    }


class PostgresEffects:
    """``Effects`` for PostgreSQL."""

    def __init__(self, db: PostgresDatabase):
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
            "now": now,
        }
        held, recorded = self._db.run("effect_record", params, conn=conn)[0]
        if not held:
            raise LeaseLost(lease.job_id, lease.token, f"record effect {effect!r}")
        return bool(recorded)

    def get(self, queue: str, key: str, effect: str) -> dict[str, Any] | None:
        rows = self._db.run("effect_get", {"queue": queue, "key": key, "effect": effect})
        return _effect(rows[0]) if rows else None

    def all(self, queue: str, key: str) -> list[dict[str, Any]]:
        return [_effect(r) for r in self._db.run("effect_list", {"queue": queue, "key": key})]
