"""The history role on SQLite: reading jobs, their attempts and events; operators' repairs;
pruning and purging. Every write is one ``BEGIN IMMEDIATE`` transaction."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..._records import (
    Attempt,
    AttemptOutcome,
    Event,
    JobFilter,
    JobRow,
    JobState,
    PruneResult,
    Tombstone,
    payload_digest,
)
from ...errors import InvalidTransition, NotFound
from ..common import JOB_COLUMNS, ORDERS, filter_sql, job_row
from .database import SqliteDatabase, to_db, to_time

__all__ = ["SqliteHistory"]


class SqliteHistory:
    """``History`` for SQLite."""

    def __init__(self, db: SqliteDatabase):
        self._db = db
        self._sql = db.sql

    # -- reading ---------------------------------------------------------------------------------

    def _jobs_where(
        self, clause: str, params: Any, order: str = "id", limit: int | None = None
    ) -> list[JobRow]:
        text = f"SELECT {JOB_COLUMNS} FROM jobledger_jobs WHERE {clause} ORDER BY {ORDERS[order]}"
        if limit is not None:
            text += f" LIMIT {int(limit)}"
        return [job_row(r, to_time) for r in self._db.read(text, params)]

    def get(self, job_id: int) -> JobRow:
        rows = self._jobs_where("id = ?", (int(job_id),))
        if not rows:
            raise NotFound(f"no job with id {job_id}")
        return rows[0]

    def get_by_key(self, queue: str, key: str) -> JobRow:
        rows = self._jobs_where("queue = ? AND key = ?", (queue, key))
        if not rows:
            raise NotFound(f"no job with key {key!r} in queue {queue!r}")
        return rows[0]

    def find_key(self, key: str) -> list[JobRow]:
        return self._jobs_where("key = ?", (key,))

    def find(self, where: JobFilter, order: str = "id") -> list[JobRow]:
        clause, params = filter_sql(where, lambda n: f":{n}", to_db)
        return self._jobs_where(clause, params, order, where.limit)

    def attempts(self, job_id: int) -> list[Attempt]:
        return [
            Attempt(
                job_id=r[0],
                attempt=r[1],
                lease_token=r[2],
                worker=r[3],
                started_at=to_time(r[4]),  # type: ignore[arg-type]
                finished_at=to_time(r[5]),
                outcome=None if r[6] is None else AttemptOutcome(r[6]),
                error_class=r[7],
                error_message=r[8],
                traceback=r[9],
            )
            for r in self._db.read(self._sql["attempt_list"], {"job_id": job_id})
        ]

    def events(self, job_id: int) -> list[Event]:
        return [
            Event(r[0], to_time(r[1]), r[2], r[3], r[4], None if r[5] is None else json.loads(r[5]))  # type: ignore[arg-type]
            for r in self._db.read(self._sql["event_list"], {"job_id": job_id})
        ]

    # -- operators -------------------------------------------------------------------------------

    def _event(
        self,
        c: sqlite3.Connection,
        job_id: int,
        kind: str,
        actor: str | None,
        note: str | None,
        detail: dict[str, Any] | None,
        clock: float,
    ) -> None:
        c.execute(
            self._sql["event_record"],
            {
                "job_id": job_id,
                "now": clock,
                "kind": kind,
                "actor": actor,
                "note": note,
                "detail": None if detail is None else json.dumps(detail),
            },
        )

    def record_event(
        self,
        job_id: int,
        kind: str,
        actor: str | None,
        note: str | None,
        detail: dict[str, Any] | None = None,
        now: datetime | None = None,
    ) -> None:
        with self._db.transaction() as c:
            self._event(c, job_id, kind, actor, note, detail, to_db(now))

    def redrive(
        self,
        job_ids: Sequence[int],
        actor: str,
        reason: str,
        now: datetime | None = None,
        budget: int | None = None,
    ) -> list[int]:
        clock = to_db(now)
        moved = []
        with self._db.transaction() as c:
            for job_id in job_ids:
                cur = c.execute(
                    self._sql["job_redrive"], {"id": job_id, "now": clock, "budget": budget}
                )
                if cur.rowcount == 1:
                    self._event(c, job_id, "redrive", actor, reason, None, clock)
                    moved.append(job_id)
        return sorted(moved)

    def _transition(
        self,
        name: str,
        job_id: int,
        params: dict[str, Any],
        kind: str,
        actor: str,
        note: str,
        detail: dict[str, Any] | None,
        clock: float,
    ) -> JobRow:
        with self._db.transaction() as c:
            cur = c.execute(self._sql[name], params | {"id": job_id, "now": clock})
            if cur.rowcount == 1:
                self._event(c, job_id, kind, actor, note, detail, clock)
                moved = True
            else:
                moved = False
        job = self.get(job_id)
        if not moved:
            raise InvalidTransition(f"cannot {kind} job {job_id}: it is {job.state.value}")
        return job

    def resolve(
        self, job_id: int, state: JobState, actor: str, note: str, now: datetime | None = None
    ) -> JobRow:
        state = JobState(state)
        if state not in (JobState.DONE, JobState.PENDING):
            raise InvalidTransition(f"resolve moves a job to done or pending, not {state.value}")
        return self._transition(
            "job_resolve",
            job_id,
            {"state": state.value},
            "resolve",
            actor,
            note,
            {"state": state.value},
            to_db(now),
        )

    def cancel(self, job_id: int, actor: str, reason: str, now: datetime | None = None) -> JobRow:
        return self._transition("job_cancel", job_id, {}, "cancel", actor, reason, None, to_db(now))

    # -- pruning ---------------------------------------------------------------------------------

    def _delete_history(self, c: sqlite3.Connection, rows: Sequence[Any]) -> tuple[int, int, int]:
        """Delete the jobs of ``rows`` (id, queue, key, …) with their attempts, events, effects."""
        ids = [(r[0],) for r in rows]
        c.executemany(self._sql["job_delete"], ids)
        attempts = c.executemany(self._sql["attempt_delete"], ids).rowcount
        events = c.executemany(self._sql["event_delete"], ids).rowcount
        effects = c.executemany(self._sql["effect_delete"], [(r[1], r[2]) for r in rows]).rowcount
        c.executemany(self._sql["publish_request_delete"], ids)
        return attempts, events, effects

    def prune(
        self,
        before: datetime,
        states: Sequence[JobState],
        keep_keys_seconds: float | None,
        queue: str | None = None,
        limit: int = 1000,
        after_id: int = 0,
        now: datetime | None = None,
        dry_run: bool = False,
    ) -> tuple[PruneResult, int | None]:
        clock, cutoff = to_db(now), to_db(before)
        names = ", ".join(f"'{JobState(s).value}'" for s in states) or "NULL"
        window = self._sql["job_prune_window"].replace("{limit}", str(max(1, int(limit))))
        pick = self._sql["job_prune_pick"].replace("{states}", names)
        with self._db.transaction() as c:
            seen = c.execute(window, {"after": after_id}).fetchall()
            if not seen:
                return PruneResult(), None
            last = seen[-1][0]
            params = {
                "after": after_id,
                "last": last,
                "before": cutoff,
                "queue": queue,
                "now": clock,
            }
            rows = c.execute(pick, params).fetchall()
            attempts = events = effects = 0
            if rows and not dry_run:
                if keep_keys_seconds is not None:
                    c.executemany(
                        self._sql["tombstone_record"],
                        [
                            {
                                "queue": r[1],
                                "key": r[2],
                                "job_id": r[0],
                                "task": r[3],
                                "payload_digest": payload_digest(r[4]),
                                "state": r[5],
                                "finished_at": r[6],
                                "now": clock,
                                "expires_at": r[6] + keep_keys_seconds,
                            }
                            for r in rows
                        ],
                    )
                attempts, events, effects = self._delete_history(c, rows)
        by_state: dict[str, int] = {}
        for r in rows:
            by_state[r[5]] = by_state.get(r[5], 0) + 1
        result = PruneResult(
            jobs=len(rows),
            attempts=attempts,
            events=events,
            effects=effects,
            tombstones=len(rows) if keep_keys_seconds is not None and not dry_run else 0,
            by_state=by_state,
        )
        over = min(r[1] for r in seen) >= cutoff
        return result, None if over else last

    def prune_tombstones(self, now: datetime | None = None, limit: int = 1000) -> int:
        text = self._sql["tombstone_prune"].replace("{limit}", str(max(1, int(limit))))
        with self._db.transaction() as c:
            return c.execute(text, {"now": to_db(now)}).rowcount

    def tombstones(self, key: str, queue: str | None = None) -> list[Tombstone]:
        return [
            Tombstone(
                r[0],
                r[1],
                r[2],
                r[3],
                JobState(r[4]),
                to_time(r[5]),
                to_time(r[6]),  # type: ignore[arg-type]
                to_time(r[7]),  # type: ignore[arg-type]
            )
            for r in self._db.read(self._sql["tombstone_find"], {"key": key, "queue": queue})
        ]

    def purge(self, job_ids: Sequence[int]) -> int:
        if not job_ids:
            return 0
        marks = ", ".join("?" for _ in job_ids)
        with self._db.transaction() as c:
            rows = c.execute(
                f"SELECT id, queue, key FROM jobledger_jobs WHERE id IN ({marks})",
                [int(i) for i in job_ids],
            ).fetchall()
            self._delete_history(c, rows)
        return len(rows)
