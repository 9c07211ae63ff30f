"""The history role on PostgreSQL: reading jobs, their attempts and events; operators'
repairs (each one statement: the change and its event together); pruning and purging."""

from __future__ import annotations

import json
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
)
from ...errors import InvalidTransition, NotFound
from ..common import JOB_COLUMNS, ORDERS, filter_sql, job_row
from .database import PostgresDatabase
from .database import to_time as _utc

__all__ = ["PostgresHistory"]


class PostgresHistory:
    """``History`` for PostgreSQL."""

    def __init__(self, db: PostgresDatabase):
        self._db = db

    # -- reading ---------------------------------------------------------------------------------

    def _jobs_where(
        self, clause: str, params: dict[str, Any], order: str = "id", limit: int | None = None
    ) -> list[JobRow]:
        text = f"SELECT {JOB_COLUMNS} FROM {self._db.tables['jobs']} WHERE {clause} ORDER BY {ORDERS[order]}"
        if limit is not None:
            text += f" LIMIT {int(limit)}"
        return [job_row(r, _utc) for r in self._db.read(text, params)]

    def get(self, job_id: int) -> JobRow:
        rows = self._jobs_where("id = %(id)s", {"id": int(job_id)})
        if not rows:
            raise NotFound(f"no job with id {job_id}")
        return rows[0]

    def get_by_key(self, queue: str, key: str) -> JobRow:
        rows = self._jobs_where("queue = %(queue)s AND key = %(key)s", {"queue": queue, "key": key})
        if not rows:
            raise NotFound(f"no job with key {key!r} in queue {queue!r}")
        return rows[0]

    def find_key(self, key: str) -> list[JobRow]:
        return self._jobs_where("key = %(key)s", {"key": key})

    def find(self, where: JobFilter, order: str = "id") -> list[JobRow]:
        clause, params = filter_sql(where, lambda n: f"%({n})s", lambda t: t, like="ILIKE")
        return self._jobs_where(clause, params, order, where.limit)

    def attempts(self, job_id: int) -> list[Attempt]:
        return [
            Attempt(
                job_id=r[0],
                attempt=r[1],
                lease_token=str(r[2]),
                worker=r[3],
                started_at=_utc(r[4]),  # type: ignore[arg-type]
                finished_at=_utc(r[5]),
                outcome=None if r[6] is None else AttemptOutcome(r[6]),
                error_class=r[7],
                error_message=r[8],
                traceback=r[9],
            )
            for r in self._db.run("attempt_list", {"job_id": job_id})
        ]

    def events(self, job_id: int) -> list[Event]:
        return [
            Event(r[0], _utc(r[1]), r[2], r[3], r[4], r[5])  # type: ignore[arg-type]
            for r in self._db.run("event_list", {"job_id": job_id})
        ]

    # -- operators -------------------------------------------------------------------------------

    def redrive(
        self,
        job_ids: Sequence[int],
        actor: str,
        reason: str,
        now: datetime | None = None,
        budget: int | None = None,
    ) -> list[int]:
        if not job_ids:
            return []
        params = {
            "ids": list(job_ids),
            "actor": actor,
            "reason": reason,
            "now": now,
            "budget": budget,
        }
        return sorted(r[0] for r in self._db.run("job_redrive", params))

    def _transition(self, name: str, job_id: int, params: dict[str, Any], what: str) -> JobRow:
        rows = self._db.run(name, params | {"id": job_id})
        if not rows:
            job = self.get(job_id)
            raise InvalidTransition(f"cannot {what} job {job_id}: it is {job.state.value}")
        return self.get(job_id)

    def resolve(
        self, job_id: int, state: JobState, actor: str, note: str, now: datetime | None = None
    ) -> JobRow:
        state = JobState(state)
        if state not in (JobState.DONE, JobState.PENDING):
            raise InvalidTransition(f"resolve moves a job to done or pending, not {state.value}")
        return self._transition(
            "job_resolve",
            job_id,
            {"state": state.value, "actor": actor, "note": note, "now": now},
            "resolve",
        )

    def cancel(self, job_id: int, actor: str, reason: str, now: datetime | None = None) -> JobRow:
        return self._transition(
            "job_cancel", job_id, {"actor": actor, "reason": reason, "now": now}, "cancel"
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
        params = {
            "job_id": job_id,
            "kind": kind,
            "actor": actor,
            "note": note,
            "detail": None if detail is None else json.dumps(detail),
            "now": now,
        }
        self._db.run("event_record", params)

    # -- pruning -----------------------------------------------------------------------------------

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
        window = self._db.sql["job_prune_window"].replace("{limit}", str(max(1, int(limit))))
        with self._db.transaction() as c:
            seen = c.execute(window, {"after": after_id}).fetchall()
            if not seen:
                return PruneResult(), None
            last = seen[-1][0]
            going_on = None if min(r[1] for r in seen) >= before else last
            params = {
                "after": after_id,
                "last": last,
                "states": [JobState(s).value for s in states],
                "before": before,
                "queue": queue,
                "now": now,
            }
            if dry_run:
                counts = dict(c.execute(self._db.sql["job_prune_count"], params).fetchall())
                return PruneResult(jobs=sum(counts.values()), by_state=counts), going_on
            rows = c.execute(self._db.sql["job_prune"], params).fetchall()
            if not rows:
                return PruneResult(), going_on
            if keep_keys_seconds is not None:
                c.execute(
                    self._db.sql["tombstone_record"],
                    {
                        "queues": [r[1] for r in rows],
                        "keys": [r[2] for r in rows],
                        "ids": [r[0] for r in rows],
                        "tasks": [r[3] for r in rows],
                        "digests": [r[4] for r in rows],
                        "states": [r[5] for r in rows],
                        "finished": [r[6] for r in rows],
                        "keep": float(keep_keys_seconds),
                        "now": now,
                    },
                )
            attempts, events, effects = c.execute(
                self._db.sql["job_history_delete"],
                {
                    "ids": [r[0] for r in rows],
                    "queues": [r[1] for r in rows],
                    "keys": [r[2] for r in rows],
                },
            ).fetchone()  # type: ignore[misc]
        by_state: dict[str, int] = {}
        for r in rows:
            by_state[r[5]] = by_state.get(r[5], 0) + 1
        result = PruneResult(
            jobs=len(rows),
            attempts=attempts,
            events=events,
            effects=effects,
            tombstones=len(rows) if keep_keys_seconds is not None else 0,
            by_state=by_state,
        )
        return result, going_on

    def prune_tombstones(self, now: datetime | None = None, limit: int = 1000) -> int:
        return len(self._db.run("tombstone_prune", {"now": now}, limit=limit))

    def tombstones(self, key: str, queue: str | None = None) -> list[Tombstone]:
        return [
            Tombstone(r[0], r[1], r[2], r[3], JobState(r[4]), _utc(r[5]), _utc(r[6]), _utc(r[7]))  # type: ignore[arg-type]
            for r in self._db.run("tombstone_find", {"key": key, "queue": queue})
        ]

    def purge(self, job_ids: Sequence[int]) -> int:
        if not job_ids:
            return 0
        with self._db.transaction() as c:
            rows = c.execute(self._db.sql["job_purge"], {"ids": list(job_ids)}).fetchall()
            if rows:
                c.execute(
                    self._db.sql["job_history_delete"],
                    {
                        "ids": [r[0] for r in rows],
                        "queues": [r[1] for r in rows],
                        "keys": [r[2] for r in rows],
                    },
                )
        return len(rows)
