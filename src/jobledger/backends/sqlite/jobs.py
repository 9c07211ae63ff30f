"""The jobs role on SQLite: inserts, publishing, claims, lease renewals and outcomes.

SQLite has one writer at a time. Every write here is one short ``BEGIN IMMEDIATE`` transaction;
the claim is an ``UPDATE … WHERE id IN (SELECT … LIMIT n) RETURNING …`` inside it, so two
processes can never lease the same job. The same single writer lock serialises publishes of
one key from any number of processes: a second request never overlaps the first one's write —
it waits for it and finds its job.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from itertools import chain
from operator import attrgetter
from typing import Any, TypeVar

from ..._faults import fault_point
from ..._records import (
    ClaimedJob,
    FailResult,
    Failure,
    InsertResult,
    JobState,
    KeyClaim,
    Lease,
    NewJob,
    OnConflict,
    PublishItem,
    PublishOutcome,
    RescueResult,
    created_results,
    payload_digest,
)
from ...errors import BackendUnavailable
from ..common import (
    ClaimTurns,
    insert_values,
    pause_reason,
    publish_compare,
    resolve_inserts,
)
from ..history import History
from ..jobs import Jobs, LeaseSeconds, Now
from ..rows import JOB_COLUMNS, claimed_job, job_row
from .database import SqliteDatabase, epoch, to_db, to_time
from .grouped import GroupedClaim

__all__ = ["SqliteJobs"]

T = TypeVar("T")

#: The values of a job in ``job_insert_rows``, and the most jobs it inserts in one statement.
#: A statement of 250 jobs binds at most 2,751 values: far fewer than SQLite's default limit
#: (32,766), and each size of statement is compiled once and kept in the connection's
#: statement cache. A plain row (no group, no trace context) writes those two as NULL.
_ROW_VALUES = 11
_FULL_ROW = "(" + ", ".join("?" * _ROW_VALUES) + ")"
_PLAIN_ROW = "(" + ", ".join("?" * (_ROW_VALUES - 2)) + ", NULL, NULL)"
_MAX_ROWS = 250
_group_of = attrgetter("group")
_trace_of = attrgetter("trace_context")


class SqliteJobs(Jobs):
    """``Jobs`` for SQLite."""

    def __init__(self, db: SqliteDatabase, history: History):
        self._db = db
        self._sql = db.sql
        self._history = history
        self._grouped = GroupedClaim(db)
        self._turns = ClaimTurns()
        self._row_statements: dict[tuple[int, bool], str] = {}
        self._texts: dict[tuple[str, int], str] = {}

    # -- inserting -------------------------------------------------------------------------------

    def _insert(
        self, jobs: Sequence[NewJob], now: Now, conn: Any, on_conflict: OnConflict
    ) -> list[InsertResult]:
        clock = epoch(now)
        created: dict[tuple[str, str], int] = {}
        existing: dict[tuple[str, str], tuple[int, str, Any]] = {}
        pruned: dict[tuple[str, str], tuple[int, str, Any]] = {}
        with self._db.transaction(conn) as c:
            if len(jobs) > 1:
                ids = self._insert_new(c, jobs, clock)
                if ids is not None:
                    return created_results(ids)
            insert, lookup = self._sql["job_insert"], self._sql["job_existing"]
            traced = self._sql["job_insert_traced"]
            for job in jobs:
                ident = (job.queue, job.key)
                if ident in created or ident in existing or ident in pruned:
                    continue
                row = c.execute(
                    insert if job.trace_context is None else traced,
                    insert_values(job, clock if job.run_at is None else epoch(job.run_at), clock),
                ).fetchone()
                if row is not None:
                    created[ident] = row[0]
                    continue
                found = c.execute(lookup, {"queue": job.queue, "key": job.key}).fetchone()
                if found is not None:
                    existing[ident] = (found[0], found[1], found[2])
                    continue
                # No job and nothing inserted: a tombstone holds the key. The check and the
                # insert ran under the one write lock, so no prune can have come in between.
                tomb = c.execute(
                    self._sql["tombstone_live"], {"queue": job.queue, "key": job.key, "now": clock}
                ).fetchone()
                if tomb is None:  # pragma: no cover - impossible under the write lock
                    raise BackendUnavailable(
                        f"enqueue of {job.key!r} found neither job nor tombstone"
                    )
                pruned[ident] = (tomb[0], tomb[1], _same_digest(tomb[2]))
            return resolve_inserts(jobs, created, existing, on_conflict, pruned)

    def _insert_new(
        self, c: sqlite3.Connection, jobs: Sequence[NewJob], clock: float
    ) -> range | None:
        """A batch whose keys are all new, many jobs a statement (``job_insert_rows``); the
        jobs' ids. None, and nothing written, when a job was not inserted (its key is known or
        held, or named twice in the batch): the caller then goes job by job."""
        c.execute("SAVEPOINT jobledger_batch")
        for chunk in _parts(jobs, _rows_per_statement(c)):
            size = len(chunk)
            values: list[Any] = [clock]
            # Binding None costs the sqlite3 module a failed adapter lookup (two attribute
            # errors) per value: a chunk without groups and trace contexts, the common one,
            # writes those two columns as NULL in its statement instead.
            plain = (
                list(map(_group_of, chunk)).count(None) == size
                and list(map(_trace_of, chunk)).count(None) == size
            )
            for j in chunk:
                values += (
                    j.queue,
                    j.key,
                    j.task,
                    j.payload_json,
                    j.priority,
                    clock if j.run_at is None else epoch(j.run_at),
                    j.max_attempts,
                    float(j.lease_seconds),
                    j.correlation_id,
                )
                if not plain:
                    values += (j.group, j.trace_context)
            if c.execute(self._rows_statement(size, plain), values).rowcount < size:
                c.execute("ROLLBACK TO jobledger_batch")
                c.execute("RELEASE jobledger_batch")
                return None
        c.execute("RELEASE jobledger_batch")
        (last,) = c.execute("SELECT last_insert_rowid()").fetchone()
        return range(last - len(jobs) + 1, last + 1)

    def _rows_statement(self, rows: int, plain: bool) -> str:
        """``job_insert_rows`` for a chunk of ``rows`` jobs, ``plain``: without a group or a
        trace context (made once per size and kind)."""
        text = self._row_statements.get((rows, plain))
        if text is None:
            row = _PLAIN_ROW if plain else _FULL_ROW
            text = self._sql["job_insert_rows"].replace("{rows}", ", ".join([row] * rows))
            self._row_statements[rows, plain] = text
        return text

    def _publish(self, items: Sequence[PublishItem], now: Now) -> list[PublishOutcome]:
        clock = epoch(now)
        outcomes: list[PublishOutcome] = []
        with self._db.transaction() as c:
            fault_point("publish.in_transaction")
            for item in items:
                job = item.job
                row = c.execute(
                    self._sql["job_insert" if job.trace_context is None else "job_insert_traced"],
                    insert_values(job, clock if job.run_at is None else epoch(job.run_at), clock),
                ).fetchone()
                if row is not None:
                    job_id, status = row[0], "created"
                    self._publish_record(c, item, job_id, clock)
                else:
                    found = c.execute(
                        self._sql["publish_existing"], {"queue": job.queue, "key": job.key}
                    ).fetchone()
                    if found is None:
                        # No job, nothing inserted: a tombstone of a pruned job holds the key.
                        outcomes.append(self._publish_pruned(c, item, clock))
                        continue
                    job_id, payload, fingerprint, task = found
                    status = publish_compare(item, task, payload, fingerprint)
                state, run_at = c.execute(self._sql["publish_job_state"], {"id": job_id}).fetchone()
                outcomes.append(PublishOutcome(status, job_id, JobState(state), to_time(run_at)))  # type: ignore[arg-type]
        return outcomes

    def _publish_pruned(
        self, c: sqlite3.Connection, item: PublishItem, clock: float
    ) -> PublishOutcome:
        """A publish of a key whose job was pruned: a replay of the same payload names the
        pruned job (in its final state); another payload is a conflict."""
        job = item.job
        job_id, task, digest = c.execute(
            self._sql["tombstone_live"], {"queue": job.queue, "key": job.key, "now": clock}
        ).fetchone()
        [tomb] = [t for t in self._history.tombstones(job.key, job.queue) if t.job_id == job_id]
        same = task == job.task and payload_digest(job.payload_json) == digest
        # The pruned job's run time is gone; its finish time stands in for it.
        run_at = tomb.finished_at or tomb.pruned_at
        return PublishOutcome("replayed" if same else "conflict", job_id, tomb.state, run_at)

    def _publish_record(
        self, c: sqlite3.Connection, item: PublishItem, job_id: int, clock: float
    ) -> None:
        c.execute(
            self._sql["publish_record"],
            {
                "queue": item.job.queue,
                "key": item.job.key,
                "job_id": job_id,
                "fingerprint": item.fingerprint,
                "api_key_id": item.api_key_id,
                "now": clock,
            },
        )

    # -- claiming --------------------------------------------------------------------------------

    def _claim(
        self, queues: Sequence[str], worker: str, limit: int, now: Now, lease_seconds: LeaseSeconds
    ) -> list[ClaimedJob]:
        params: dict[str, Any] = {"worker": worker, "lease_seconds": lease_seconds}
        names = []
        for i, queue in enumerate(queues):
            names.append(f":q{i}")
            params[f"q{i}"] = queue
        text = self._sql["job_claim"].replace("{queues}", ", ".join(names) or "NULL")

        def plain(n: int) -> list[Any]:
            return c.execute(text.replace("{limit}", str(n)), params).fetchall()

        def grouped(n: int) -> list[Any]:
            return self._grouped.claim(c, queues, worker, n, clock, lease_seconds)

        with self._db.transaction() as c:
            # The clock is read under the write lock: claims' times follow the order they ran
            # in, so no claim refills a group's bucket from a time before the last claim's.
            clock = params["now"] = epoch(now)
            if self._grouped.waiting(c, queues):
                rows = self._turns.claim(plain, grouped, limit)
            else:
                rows = plain(limit)
        # A batch shares its lease end, and often its run times: each is converted once.
        times: dict[float, datetime | None] = {}

        def at(value: float) -> datetime | None:
            return times[value] if value in times else times.setdefault(value, to_time(value))

        return [claimed_job(r, at) for r in rows]

    def _claim_keys(
        self, wanted: Sequence[tuple[str, str]], worker: str, now: Now, lease_seconds: LeaseSeconds
    ) -> list[KeyClaim]:
        clock = epoch(now)
        results = []
        with self._db.transaction() as c:
            for queue, key in wanted:
                params = {
                    "queue": queue,
                    "key": key,
                    "worker": worker,
                    "now": clock,
                    "lease_seconds": lease_seconds,
                }
                r = c.execute(self._sql["job_claim_keys"], params).fetchone()
                if r is not None:
                    results.append(KeyClaim(claimed_job(r, to_time)))
                    continue
                row = c.execute(
                    f"SELECT {JOB_COLUMNS} FROM jobledger_jobs WHERE queue = ? AND key = ?",
                    (queue, key),
                ).fetchone()
                current = None if row is None else job_row(row, to_time)
                paused = None
                if current is not None and current.group is not None:
                    found = c.execute(
                        self._sql["group_paused_until"],
                        {"queue": queue, "name": current.group, "now": clock},
                    ).fetchone()
                    paused = None if found is None else to_time(found[0])
                results.append(KeyClaim(None, current, paused))
        return results

    # -- leases and outcomes ---------------------------------------------------------------------

    def _heartbeat(
        self, leases: Sequence[Lease], now: Now, lease_seconds: LeaseSeconds
    ) -> dict[int, datetime]:
        clock = epoch(now)
        held: dict[int, datetime] = {}
        with self._db.transaction() as c:
            for lease in leases:
                row = c.execute(
                    self._sql["job_heartbeat"],
                    {
                        "id": lease.job_id,
                        "token": lease.token,
                        "now": clock,
                        "lease_seconds": lease_seconds,
                    },
                ).fetchone()
                if row is not None:
                    held[lease.job_id] = to_time(row[0])  # type: ignore[assignment]
        return held

    def _close_attempt(
        self,
        c: sqlite3.Connection,
        job_id: int,
        attempt: int,
        clock: float,
        outcome: str,
        error_class: str | None = None,
        message: str | None = None,
        traceback: str | None = None,
    ) -> None:
        """Write the row of attempt ``attempt`` of job ``job_id``, ended now (``attempt_close``:
        read from the job's row, in the transaction of the write that ended it)."""
        c.execute(
            self._sql["attempt_close"],
            {
                "id": job_id,
                "attempt": attempt,
                "now": clock,
                "outcome": outcome,
                "error_class": error_class,
                "message": message,
                "traceback": traceback,
            },
        )

    def _complete(
        self, leases: Sequence[Lease], now: Now, conn: Any, results: Mapping[int, str] | None
    ) -> set[int]:
        clock = epoch(now)
        # Statements and their values are made before the write lock is taken: one statement
        # per chunk, each fenced by the (id, token) pairs it names.
        chunks = []
        for part in _parts(leases):
            values: list[Any] = [clock]
            values.extend(chain.from_iterable(map(_lease_pair, part)))
            chunks.append((self._chunked("job_complete", len(part)), values))
        with self._db.transaction(conn) as c:
            done: set[tuple[int, str]] = set()
            for text, values in chunks:
                done.update(c.execute(text, values).fetchall())
            # Each job is completed at most once, so as many jobs as leases means that every
            # lease was current (and named another job); otherwise, which ones were.
            held = leases if len(done) == len(leases) else _held(leases, done)
            if results:
                stored = [(results[h.job_id], h.job_id) for h in held if h.job_id in results]
                c.executemany(self._sql["job_result"], stored)
        # The attempts that ended so get no row: each job's own keeps it (jobs.sql,
        # job_complete).
        return {lease.job_id for lease in held}

    def _chunked(self, name: str, n: int) -> str:
        """The text of statement ``name`` for ``n`` rows (see ``_CHUNKED``), made once per size."""
        key = (name, n)
        text = self._texts.get(key)
        if text is None:
            slot, row = _CHUNKED[name]
            text = self._texts[key] = self._sql[name].replace(slot, ", ".join([row] * n))
        return text

    def store_result(self, lease: Lease, result: str | None) -> bool:
        params = {"id": lease.job_id, "token": lease.token, "result": result}
        with self._db.transaction() as c:
            return c.execute(self._sql["job_result_store"], params).rowcount > 0

    def _fail(self, failures: Sequence[Failure], now: Now) -> list[FailResult]:
        clock = epoch(now)
        results = []
        with self._db.transaction() as c:
            for f in failures:
                row = c.execute(
                    self._sql["job_fail"],
                    {
                        "id": f.lease.job_id,
                        "token": f.lease.token,
                        "retry": f.retry,
                        "run_at": to_db(f.run_at),
                        "now": clock,
                        "message": f.message,
                        "error_class": f.error_class,
                        "traceback": f.traceback,
                    },
                ).fetchone()
                if row is None:
                    results.append(FailResult(f.lease.job_id, None))
                    continue
                state = JobState(row[0])
                if f.pause_group_until is not None and row[1] is not None:
                    c.execute(
                        self._sql["group_pause"],
                        {
                            "queue": row[2],
                            "name": row[1],
                            "until": epoch(f.pause_group_until),
                            "reason": pause_reason(f),
                        },
                    )
                outcome = (
                    "timed_out" if f.timed_out else "dead" if state is JobState.DEAD else "retry"
                )
                self._close_attempt(
                    c,
                    f.lease.job_id,
                    f.lease.attempt,
                    clock,
                    outcome,
                    f.error_class,
                    f.message,
                    f.traceback,
                )
                results.append(FailResult(f.lease.job_id, state))
        return results

    def _release(self, leases: Sequence[Lease], now: Now) -> set[int]:
        clock = epoch(now)
        released = set()
        with self._db.transaction() as c:
            for lease in leases:
                cur = c.execute(
                    self._sql["job_release"],
                    {"id": lease.job_id, "token": lease.token, "now": clock},
                )
                if cur.rowcount == 1:
                    self._close_attempt(c, lease.job_id, lease.attempt, clock, "released")
                    released.add(lease.job_id)
        return released

    def _settled(self, leases: Sequence[Lease]) -> dict[int, str]:
        settled = {}
        with self._db.reading() as c:
            for lease in leases:
                row = c.execute(
                    self._sql["attempt_settled"], {"id": lease.job_id, "token": lease.token}
                ).fetchone()
                if row is not None:
                    settled[lease.job_id] = row[0]
        return settled

    def _rescue(self, now: Now, limit: int) -> list[RescueResult]:
        clock = epoch(now)
        text = self._sql["job_rescue"].replace("{limit}", str(limit))
        with self._db.transaction() as c:
            rows = c.execute(text, {"now": clock}).fetchall()
            for r in rows:
                self._close_attempt(c, r[0], r[4], clock, "lease_expired", "LeaseExpired", r[5])
        return [RescueResult(r[0], r[1], r[2], JobState(r[3]), r[4]) for r in rows]


#: The most rows one statement of the hot path names (a claim or completion of more goes in
#: several statements of the same transaction).
CHUNK = 500

#: The statements written for a number of rows: what stands for the rows, and one row.
_CHUNKED = {
    "job_complete": ("{leases}", "(?, ?)"),
}

#: A lease as job_complete names it.
_lease_pair = attrgetter("job_id", "token")


def _held(leases: Sequence[Lease], done: set[tuple[int, str]]) -> list[Lease]:
    """The leases whose (job, token) pair was completed, each job once."""
    held = []
    for lease in leases:
        pair = (lease.job_id, lease.token)
        if pair in done:
            held.append(lease)
            done.discard(pair)
    return held


def _parts(items: Sequence[T], most: int = CHUNK) -> Iterator[Sequence[T]]:
    """``items`` in the sizes the batch's statements are written for (``_chunks`` of ``most``:
    ``CHUNK`` on the hot path, what ``_rows_per_statement`` allows for an insert). Each size
    is compiled once and kept in the connection's statement cache; a statement for every
    other count would be parsed afresh, and the completer's batches come in all sizes
    (parsing a statement of a few hundred rows costs more than running it)."""
    start = 0
    for size in _chunks(len(items), most):
        yield items[start : start + size]
        start += size


def _same_digest(digest: str) -> Any:
    return lambda job: payload_digest(job.payload_json) == digest


def _rows_per_statement(c: sqlite3.Connection) -> int:
    """How many jobs one ``job_insert_rows`` may carry on this connection: at most
    ``_MAX_ROWS``, and fewer when the connection allows fewer bound values (its
    ``SQLITE_LIMIT_VARIABLE_NUMBER``; the insert's time is one more)."""
    limit = c.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    return max(1, min(_MAX_ROWS, (limit - 1) // _ROW_VALUES))


def _chunks(jobs: int, most: int) -> list[int]:
    """The sizes of the statements for ``jobs`` rows (jobs inserted, attempts opened, leases
    completed): as many of ``most`` as fit, then the rest in powers of two. A batch of any size
    uses a few statement texts (at most one per power of two below ``most``), which the
    statement cache keeps compiled."""
    sizes = [most] * (jobs // most)
    rest = jobs % most
    while rest:
        size = 1 << (rest.bit_length() - 1)
        sizes.append(size)
        rest -= size
    return sizes
