"""What a prune or a purge deletes on PostgreSQL: the jobs in the statement that picks them
(a row another transaction changes meanwhile is re-checked after it commits), then their
attempts, events, effects and publish records in one statement over arrays."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from .database import PostgresDatabase

__all__ = ["PostgresRemoval"]


class PostgresRemoval:
    """``Removal`` for PostgreSQL."""

    def __init__(self, db: PostgresDatabase):
        self._db = db

    def take(self, c: psycopg.Connection[Any], params: dict[str, Any], states: str) -> list[Any]:
        return self._db.execute(c, "job_prune", params, states=states).fetchall()

    def delete(
        self,
        c: psycopg.Connection[Any],
        rows: Sequence[Any],
        done_last: Sequence[tuple[int, int]] = (),
    ) -> tuple[int, int, int]:
        params = {
            "ids": [r[0] for r in rows],
            "queues": [r[1] for r in rows],
            "keys": [r[2] for r in rows],
            "done_ids": [job_id for job_id, _ in done_last],
            "done_attempts": [attempt for _, attempt in done_last],
        }
        attempts, events, effects = self._db.execute(c, "job_history_delete", params).fetchone()  # type: ignore[misc]
        return int(attempts), int(events), int(effects)
