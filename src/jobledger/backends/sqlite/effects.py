"""The effects role on SQLite: the fence check and the record in one write transaction."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..._records import Lease
from ...errors import LeaseLost
from .database import SqliteDatabase, to_db, to_time

__all__ = ["SqliteEffects"]


def _effect(row: Sequence[Any]) -> dict[str, Any]:
    return {
        "queue": row[0],
        "key": row[1],
        "effect": row[2],
        "job_id": row[3],
        "attempt": row[4],
        "recorded_at": to_time(row[5]),
        "detail": None if row[6] is None else json.loads(row[6]),
    }


class SqliteEffects:
    """``Effects`` for SQLite."""

    def __init__(self, db: SqliteDatabase):
        self._db = db
        self._sql = db.sql

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
        with self._db.transaction(conn) as c:
            holder = c.execute(
                self._sql["effect_holder"], {"job_id": lease.job_id, "token": lease.token}
            ).fetchone()
            if holder is None:
                raise LeaseLost(lease.job_id, lease.token, f"record effect {effect!r}")
            cur = c.execute(
                self._sql["effect_record"],
                {
                    "queue": queue,
                    "key": key,
                    "effect": effect,
                    "job_id": lease.job_id,
                    "attempt": holder[0],
                    "now": to_db(now),
                    "detail": None if detail is None else json.dumps(detail),
                },
            )
            return cur.rowcount == 1

    def get(self, queue: str, key: str, effect: str) -> dict[str, Any] | None:
        rows = self._db.read(
            self._sql["effect_get"], {"queue": queue, "key": key, "effect": effect}
        )
        return _effect(rows[0]) if rows else None

    def all(self, queue: str, key: str) -> list[dict[str, Any]]:
        return [
            _effect(r)
            for r in self._db.read(self._sql["effect_list"], {"queue": queue, "key": key})
        ]
