"""The history role: reading jobs and what happened to them, and what operators do to them —
redrive, resolve, cancel, prune, purge.

Written once for both dialects, over the dialect's database object: reading jobs, their attempts and events; operators'
repairs (each change and its event in one transaction); pruning and purging.

What a prune or a purge deletes, and how, is each dialect's own (a ``Removal``): PostgreSQL
deletes the jobs in the statement that picks them and the rest in one statement over arrays;
SQLite picks them under its write lock and deletes row by row with ``executemany``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

from .._records import (
    MAX_JOB_ID,
    Attempt,
    Event,
    JobFilter,
    JobRow,
    JobState,
    PruneResult,
    Tombstone,
    job_id_number,
)
from ..errors import ConfigError, InvalidTransition, NotFound
from .common import ORDERS, filter_sql
from .database import Database
from .rows import attempt, event, job_row, tombstone

__all__ = ["Removal", "History"]

#: Jobs an operator's redrive moves per statement (a statement's parameters are bounded).
_REDRIVE_CHUNK = 500


class Removal(Protocol):
    """How a dialect deletes jobs with everything recorded about them."""

    def take(self, c: Any, params: dict[str, Any], states: str) -> list[Any]:
        """The jobs a prune deletes, as ``(id, queue, key, task, payload digest, state,
        finished_at, attempts)`` rows (``job_prune``, with ``{states}`` filled)."""
        ...

    def delete(
        self, c: Any, rows: Sequence[Any], done_last: Sequence[tuple[int, int]] = ()
    ) -> tuple[int, int, int]:
        """Delete what is left of the jobs of ``rows`` (id, queue, key, …) after ``take`` or
        ``job_purge``; return how many attempts, events and effects went with them.
        ``done_last``: the (job id, attempt) of the attempt that completed each job done among
        them, counted too where it had no row (the job's own row kept it, and went with it)."""
        ...


class History:
    """Jobs as they are and were, and the operators' repairs (``backend.history``)."""

    def __init__(self, db: Database, removal: Removal):
        self._db = db
        self._removal = removal
        #: Called after a repair made jobs pending again (a redrive, a resolve to pending): a
        #: dialect whose claims start from a position rewinds it (postgres/cursor.py).
        self.made_pending: Callable[[], object] = lambda: None

    # -- reading ---------------------------------------------------------------------------------

    def _jobs(
        self, where: str, params: dict[str, Any], order: str = "id", limit: int | None = None
    ) -> list[JobRow]:
        page = "" if limit is None else f"LIMIT {int(limit)}"
        rows = self._db.read("job_find", params, where=where, order=ORDERS[order], page=page)
        return [job_row(r, self._db.to_time) for r in rows]

    def get(self, job_id: int) -> JobRow:
        """The job with this id, or ``NotFound``."""
        rows = self._jobs(f"id = {self._db.param('id')}", {"id": _job_id(job_id)})
        if not rows:
            raise NotFound(f"no job with id {job_id}")
        return rows[0]

    def get_by_key(self, queue: str, key: str) -> JobRow:
        """The job with this key in this queue, or ``NotFound``."""
        param = self._db.param
        where = f"queue = {param('queue')} AND key = {param('key')}"
        rows = self._jobs(where, {"queue": queue, "key": key})
        if not rows:
            raise NotFound(f"no job with key {key!r} in queue {queue!r}")
        return rows[0]

    def find_key(self, key: str) -> list[JobRow]:
        """Jobs with this key in any queue."""
        return self._jobs(f"key = {self._db.param('key')}", {"key": key})

    def find(self, where: JobFilter, order: str = "id") -> list[JobRow]:
        """Jobs that match a filter, in one of the orders ``id``, ``-id``, ``updated``,
        ``run_at`` (any other is a ``ConfigError``)."""
        if not isinstance(order, str) or order not in ORDERS:
            raise ConfigError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
        clause, params = filter_sql(where, self._db)
        return self._jobs(clause, params, order, where.limit)

    def attempts(self, job_id: int) -> list[Attempt]:
        """A job's attempts, oldest first."""
        rows = self._db.read("attempt_list", {"job_id": _job_id(job_id)})
        return [attempt(r, self._db.to_time) for r in rows]

    def events(self, job_id: int) -> list[Event]:
        """What operators (and the ledger) did to a job, oldest first."""
        rows = self._db.read("event_list", {"job_id": _job_id(job_id)})
        return [event(r, self._db.to_time, self._db.from_json) for r in rows]

    def tombstones(self, key: str, queue: str | None = None) -> list[Tombstone]:
        """The tombstones of pruned jobs with this key (in ``queue``, or in any queue)."""
        rows = self._db.read("tombstone_find", {"key": key, "queue": queue})
        return [tombstone(r, self._db.to_time) for r in rows]

    # -- operators -------------------------------------------------------------------------------

    def _note(self, c: Any, events: list[dict[str, Any]], clock: Any) -> None:
        """Record events (``job_id``, ``kind``, ``actor``, ``note``, ``detail``) on ``c``."""
        if events:
            self._db.executemany(c, "event_record", events, now=clock)

    def record_event(
        self,
        job_id: int,
        kind: str,
        actor: str | None,
        note: str | None,
        detail: dict[str, Any] | None = None,
        now: datetime | None = None,
    ) -> None:
        """Note an event in a job's history."""
        noted = {"job_id": job_id, "kind": kind, "actor": actor, "note": note}
        with self._db.transaction() as c:
            self._note(c, [noted | {"detail": _json(detail)}], self._db.clock(now))

    def redrive(
        self,
        job_ids: Sequence[int],
        actor: str,
        reason: str,
        now: datetime | None = None,
        budget: int | None = None,
    ) -> list[int]:
        """Move dead or cancelled jobs back to pending with a fresh budget (``budget`` attempts,
        default the job's ``max_attempts``). Returns the ids moved; others are left alone."""
        job_ids = [int(i) for i in job_ids if 0 < int(i) <= MAX_JOB_ID]  # no job has another id
        if not job_ids:
            return []
        clock = self._db.clock(now)
        moved: list[int] = []
        with self._db.transaction() as c:
            for start in range(0, len(job_ids), _REDRIVE_CHUNK):
                chunk = [int(i) for i in job_ids[start : start + _REDRIVE_CHUNK]]
                ids, params = self._db.among("id", "ids", chunk, "bigint")
                params |= {"now": clock, "budget": budget}
                rows = self._db.execute(c, "job_redrive", params, ids=ids).fetchall()
                moved.extend(r[0] for r in rows)
            noted = {"kind": "redrive", "actor": actor, "note": reason, "detail": None}
            self._note(c, [noted | {"job_id": job_id} for job_id in moved], clock)
        if moved:
            self.made_pending()
        return sorted(moved)

    def _transition(
        self, name: str, job_id: int, params: dict[str, Any], noted: dict[str, Any], now: Any
    ) -> JobRow:
        clock = self._db.clock(now)
        job_id = _job_id(job_id)
        with self._db.transaction() as c:
            moved = self._db.execute(c, name, params | {"id": job_id, "now": clock}).fetchall()
            if moved:
                self._note(c, [noted | {"job_id": job_id}], clock)
        job = self.get(job_id)
        if not moved:
            raise InvalidTransition(f"cannot {noted['kind']} job {job_id}: it is {job.state.value}")
        return job

    def resolve(
        self,
        job_id: int,
        state: JobState,
        actor: str,
        note: str,
        now: datetime | None = None,
        only_dead: bool = False,
    ) -> JobRow:
        """An operator's repair: a dead or pending job becomes done (or pending, with a fresh
        budget); with ``only_dead``, a dead job only. Raises ``InvalidTransition`` for other
        states."""
        state = JobState(state)
        if state not in (JobState.DONE, JobState.PENDING):
            raise InvalidTransition(f"resolve moves a job to done or pending, not {state.value}")
        detail = _json({"state": state.value})
        noted = {"kind": "resolve", "actor": actor, "note": note, "detail": detail}
        params = {"state": state.value, "only_dead": only_dead}
        job = self._transition("job_resolve", job_id, params, noted, now)
        if state is JobState.PENDING:
            self.made_pending()
        return job

    def cancel(self, job_id: int, actor: str, reason: str, now: datetime | None = None) -> JobRow:
        """A pending job becomes cancelled. Raises ``InvalidTransition`` otherwise."""
        noted = {"kind": "cancel", "actor": actor, "note": reason, "detail": None}
        return self._transition("job_cancel", job_id, {}, noted, now)

    # -- pruning ---------------------------------------------------------------------------------

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
        """One batch of a prune, in one transaction: look at the next ``limit`` jobs by id after
        ``after_id`` and delete those in ``states`` that finished before ``before``, with their
        attempts, events and effects. With ``keep_keys_seconds`` each pruned key gets a
        tombstone that blocks enqueue until that long after its job finished. ``dry_run``
        counts instead of deleting.

        Returns what was removed and the id to continue after, or None when the walk is over:
        the window was empty, or held only jobs created at or after ``before`` (a job cannot
        finish before it was created). Walking the primary key needs no index on the jobs table;
        a walk reads the jobs created before the cut-off that are kept (dead, long-delayed)."""
        db = self._db
        clock, cutoff = db.clock(now), db.to_db(before)
        in_states, params = db.among("state", "states", [JobState(s).value for s in states])
        with db.transaction() as c:
            window = {"after": after_id}
            seen = db.execute(c, "job_prune_window", window, limit=max(1, int(limit))).fetchall()
            if not seen:
                return PruneResult(), None
            last = seen[-1][0]
            # Over when the window held only jobs created at or after the cut-off.
            going_on = None if min(r[1] for r in seen) >= cutoff else last
            params |= {"after": after_id, "last": last, "before": cutoff, "queue": queue}
            params["now"] = clock
            if dry_run:
                counts = db.execute(c, "job_prune_count", params, states=in_states).fetchall()
                by_state = {state: int(n) for state, n in counts}
                return PruneResult(jobs=sum(by_state.values()), by_state=by_state), going_on
            rows = self._removal.take(c, params, in_states)
            if not rows:
                return PruneResult(), going_on
            if keep_keys_seconds is not None:
                fields = ("job_id", "queue", "key", "task", "payload_digest", "state")
                stones = [
                    dict(zip(fields, r[:6], strict=True)) | {"finished_at": r[6]} for r in rows
                ]
                db.executemany(
                    c, "tombstone_record", stones, now=clock, keep=float(keep_keys_seconds)
                )
            done_last = [(r[0], r[7]) for r in rows if r[5] == "done" and r[7] > 0]
            attempts, events, effects = self._removal.delete(c, rows, done_last)
        by_state = {}
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
        """Delete up to ``limit`` tombstones whose horizon has passed; return how many."""
        params = {"now": self._db.clock(now)}
        return self._db.count("tombstone_prune", params, limit=max(1, int(limit)))

    def purge(self, job_ids: Sequence[int]) -> int:
        """Delete these jobs whatever their state, with their attempts, events and effects, and
        leave no tombstone. For a drill cleaning up after itself; operators use prune."""
        if not job_ids:
            return 0
        ids, params = self._db.among("id", "ids", [int(i) for i in job_ids], "bigint")
        with self._db.transaction() as c:
            rows = self._db.execute(c, "job_purge", params, ids=ids).fetchall()
            if rows:
                self._removal.delete(c, rows)
        return len(rows)


def _job_id(job_id: int) -> int:
    """An id a job may have, or ``NotFound``: an id beyond the range of ids names no job (on
    SQLite it could not even be sent)."""
    n = job_id_number(job_id)
    if not 0 < n <= MAX_JOB_ID:
        raise NotFound(f"no job with id {job_id}")
    return n


def _json(detail: dict[str, Any] | None) -> str | None:
    return None if detail is None else json.dumps(detail)
