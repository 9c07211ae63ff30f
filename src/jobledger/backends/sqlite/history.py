"""What a prune or a purge deletes on SQLite: the jobs picked under the write lock, then row by
row with ``executemany`` (a join of a long ``VALUES`` list makes SQLite's planner scan)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from ..._records import payload_digest
from .database import SqliteDatabase

__all__ = ["SqliteRemoval"]


class SqliteRemoval:
    """``Removal`` for SQLite."""

    def __init__(self, db: SqliteDatabase):
        self._db = db

    def take(self, c: sqlite3.Connection, params: dict[str, Any], states: str) -> list[Any]:
        rows = self._db.execute(c, "job_prune", params, states=states).fetchall()
        # The digest of the payload's canonical JSON, as PostgreSQL's is of its jsonb text.
        return [(*r[:4], payload_digest(r[4]), *r[5:]) for r in rows]

    def delete(
        self,
        c: sqlite3.Connection,
        rows: Sequence[Any],
        done_last: Sequence[tuple[int, int]] = (),
    ) -> tuple[int, int, int]:
        ids = [(r[0],) for r in rows]
        sql = self._db.sql
        # The attempts that completed jobs done and have no row: their jobs' rows kept them.
        kept = sum(
            1 for pair in done_last if not c.execute(sql["attempt_has_row"], pair).fetchone()
        )
        c.executemany(sql["job_delete"], ids)
        attempts = kept + c.executemany(sql["attempt_delete"], ids).rowcount
        events = c.executemany(sql["event_delete"], ids).rowcount
        effects = c.executemany(sql["effect_delete"], [(r[1], r[2]) for r in rows]).rowcount
        c.executemany(sql["publish_request_delete"], ids)
        return attempts, events, effects
