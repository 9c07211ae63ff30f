"""The SQLite backend: one file, WAL mode, short ``BEGIN IMMEDIATE`` write transactions.

SQLite has one writer at a time. Every write here is one short transaction; the claim is an
``UPDATE … WHERE id IN (SELECT … LIMIT n) RETURNING …`` inside ``BEGIN IMMEDIATE``, so two
processes can never lease the same job. Each thread gets its own connection.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime
from typing import Any

from .._records import (
    Attempt,
    AttemptOutcome,
    ClaimedJob,
    Event,
    FailResult,
    Failure,
    InsertResult,
    JobFilter,
    JobRow,
    JobState,
    Lease,
    NewJob,
    OnConflict,
    PruneResult,
    QueueStats,
    RescueResult,
    Tombstone,
    payload_digest,
)
from ..errors import BackendUnavailable, InvalidTransition, LeaseLost, NotFound, SchemaMismatch
from .common import (
    JOB_COLUMNS,
    ORDERS,
    claim_in_turns,
    claimed_job,
    filter_sql,
    insert_values,
    job_row,
    pause_reason,
    resolve_inserts,
)
from .common import from_epoch as _dt
from .sqlfiles import migrations, queries, schema_problem
from .sqlite_api import SqliteApiMixin
from .sqlite_groups import SqliteGroups
from .sqlite_observability import SqliteObservability
from .sqlite_outbox import SqliteOutbox
from .sqlite_push import SqlitePushMixin
from .sqlite_scheduling import SqliteScheduling
from .url import DatabaseURL

__all__ = ["SqliteBackend"]


def _ts(value: datetime | None) -> float:
    """A datetime as epoch seconds; None is the process clock now."""
    if value is None:
        return time.time()
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: pass an aware datetime (UTC)")
    return value.timestamp()


def _ts_or_none(value: datetime | None) -> float | None:
    return None if value is None else _ts(value)


class SqliteBackend(
    SqliteScheduling,
    SqliteApiMixin,
    SqliteOutbox,
    SqliteObservability,
    SqlitePushMixin,
    SqliteGroups,
):
    """jobledger in one SQLite file. Safe to share between threads (a connection per thread)."""

    dialect = "sqlite"

    def __init__(self, url: DatabaseURL, create: bool = True):
        self.url = url
        self.path = url.sqlite_path
        self._sql = queries("sqlite")
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._writer = threading.Lock()
        self._turns = itertools.count()
        self._closed = False
        self._create = create
        if not create and not self.path.exists():
            raise BackendUnavailable(
                f"SQLite database {url.redacted} does not exist (no file {str(self.path)!r}); "
                "`jobledger migrate` creates it"
            )
        if not create and self.path.is_file() and self.path.stat().st_size == 0:
            raise SchemaMismatch(
                f"SQLite database {url.redacted} is an empty file: it has no jobledger schema; "
                "run `jobledger migrate`"
            )
        if not self.path.parent.exists():
            raise BackendUnavailable(
                f"cannot open SQLite database {url.redacted}: directory "
                f"{str(self.path.parent)!r} does not exist"
            )
        self._conn()  # fail now, with a clear message, if the file cannot be opened

    # -- connections ---------------------------------------------------------------------------

    def _unavailable(self, exc: BaseException) -> BackendUnavailable:
        text = str(exc)
        if "locked" in text or "busy" in text:
            return BackendUnavailable(
                f"SQLite database {self.url.redacted} is locked by another connection "
                f"(waited {self.url.busy_timeout_ms} ms): {text}"
            )
        return BackendUnavailable(f"SQLite database {self.url.redacted} cannot be used: {text}")

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        if self._closed:
            raise BackendUnavailable(f"the ledger for {self.url.redacted} is closed")
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.url.busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA busy_timeout = {self.url.busy_timeout_ms}")
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if mode != "wal" and (self._create or self._has_schema(conn)):
                # (Without ``create``, a database that is not a ledger is left as it was.)
                try:
                    conn.execute("PRAGMA journal_mode = WAL")
                except sqlite3.OperationalError as exc:
                    # Another connection's open transaction (an application's, say) keeps
                    # the journal mode from changing now; a later connection switches it.
                    if "locked" not in str(exc) and "busy" not in str(exc):
                        raise
            conn.execute(f"PRAGMA synchronous = {self.url.synchronous}")
        except sqlite3.Error as exc:
            raise self._unavailable(exc) from None
        self._local.conn = conn
        with self._lock:
            self._all.append(conn)
        return conn

    @staticmethod
    def _has_schema(conn: sqlite3.Connection) -> bool:
        query = "SELECT 1 FROM sqlite_master WHERE name = 'jobledger_migrations'"
        return conn.execute(query).fetchone() is not None

    @contextmanager
    def _translate(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                raise SchemaMismatch(
                    f"SQLite database {self.url.redacted} has no jobledger tables "
                    f"({exc}); run `jobledger migrate`"
                ) from None
            raise self._unavailable(exc) from None
        except sqlite3.DatabaseError as exc:
            raise self._unavailable(exc) from None

    @contextmanager
    def _write(self, conn: Any = None) -> Iterator[sqlite3.Connection]:
        """A write transaction: ``BEGIN IMMEDIATE`` on our connection, or a savepoint in the
        caller's (so that a refused write leaves the caller's other work alone)."""
        with self._translate():
            if conn is None:
                own = self._conn()
                if own.in_transaction:
                    # Inside our own transaction() block: join it.
                    yield own
                    return
                # Threads of this process take turns here rather than in SQLite's busy handler,
                # which sleeps (1, 2, 5, 10 … ms) between tries instead of waking on release.
                if not self._writer.acquire(timeout=self.url.busy_timeout_ms / 1000):
                    raise BackendUnavailable(
                        f"SQLite database {self.url.redacted} is locked by another thread of "
                        f"this process (waited {self.url.busy_timeout_ms} ms)"
                    )
                try:
                    own.execute("BEGIN IMMEDIATE")
                    committed = False
                    try:
                        yield own
                        own.execute("COMMIT")
                        committed = True
                    finally:
                        if not committed and own.in_transaction:
                            own.execute("ROLLBACK")
                finally:
                    self._writer.release()
                return
            if not isinstance(conn, sqlite3.Connection):
                raise TypeError(f"conn must be a sqlite3 Connection, got {type(conn)!r}")
            if not conn.in_transaction and conn.isolation_level is not None:
                # The caller's connection opens transactions implicitly; open it now so the
                # job joins it (a bare SAVEPOINT would commit on release).
                conn.execute("BEGIN")
            conn.execute("SAVEPOINT jobledger")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK TO jobledger")
                conn.execute("RELEASE jobledger")
                raise
            conn.execute("RELEASE jobledger")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._write() as conn:
            yield conn

    def _read(self, text: str, params: Any = ()) -> list[Any]:
        with self._translate():
            return self._conn().execute(text, params).fetchall()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for conn in self._all:
                with suppress(sqlite3.Error):
                    conn.close()
            self._all.clear()
        self._local = threading.local()

    # -- schema ----------------------------------------------------------------------------------

    def migrate(self, conn: Any = None) -> list[str]:
        """Apply the missing migrations. What is applied is read first without the write lock,
        so that a migrated database is never locked for it: an application's first enqueue in
        its own write transaction (``conn``) works. A missing migration needs the write lock;
        when ``conn`` has a transaction open, that transaction holds the lock (or a snapshot
        that could not see the new tables), so waiting would deadlock: refuse at once."""
        applied = self.applied_migrations()
        missing = [m for m in migrations("sqlite") if m.version not in applied]
        if not missing:
            return []
        if isinstance(conn, sqlite3.Connection) and conn.in_transaction:
            lacks = (
                f"lacks the jobledger migrations {', '.join(m.label for m in missing)}"
                if applied
                else "has no jobledger schema"
            )
            raise SchemaMismatch(
                f"SQLite database {self.url.redacted} {lacks}, which cannot be created while "
                "the transaction open on the connection given (conn=) holds the database's "
                "lock: call ledger.migrate() before it (at start-up), or run `jobledger migrate`"
            )
        applied_now = []
        with self._write() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS jobledger_migrations ("
                " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
            )
            done = {row[0] for row in conn.execute("SELECT version FROM jobledger_migrations")}
            for migration in migrations("sqlite"):
                if migration.version in done:
                    continue
                for statement in _statements(migration.sql):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO jobledger_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (migration.version, migration.name, time.time()),
                )
                applied_now.append(migration.label)
        return applied_now

    def schema_version(self) -> int:
        try:
            return int(
                self._read("SELECT coalesce(max(version), 0) FROM jobledger_migrations")[0][0]
            )
        except SchemaMismatch:
            return 0

    def applied_migrations(self) -> set[int]:
        try:
            return {int(r[0]) for r in self._read("SELECT version FROM jobledger_migrations")}
        except SchemaMismatch:
            return set()

    def check_schema(self) -> None:
        problem = schema_problem(
            "sqlite", self.applied_migrations(), f"SQLite database {self.url.redacted}"
        )
        if problem:
            raise SchemaMismatch(problem)

    # -- wake-ups --------------------------------------------------------------------------------

    @property
    def supports_listen(self) -> bool:
        return False

    def listener(self, queues: Sequence[str]) -> None:
        return None

    # -- the worker's path -------------------------------------------------------------------------

    def job_insert(
        self,
        jobs: Sequence[NewJob],
        now: datetime | None = None,
        conn: Any = None,
        on_conflict: OnConflict = "raise",
    ) -> list[InsertResult]:
        if not jobs:
            return []
        clock = _ts(now)
        created: dict[tuple[str, str], int] = {}
        existing: dict[tuple[str, str], tuple[int, str, Any]] = {}
        pruned: dict[tuple[str, str], tuple[int, str, Any]] = {}
        with self._write(conn) as c:
            insert, lookup = self._sql["job_insert"], self._sql["job_existing"]
            for job in jobs:
                ident = (job.queue, job.key)
                if ident in created or ident in existing or ident in pruned:
                    continue
                row = c.execute(
                    insert,
                    insert_values(job, clock if job.run_at is None else _ts(job.run_at), clock),
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

    def job_claim(
        self,
        queues: Sequence[str],
        worker: str,
        limit: int,
        now: datetime | None = None,
        lease_seconds: float | None = None,
    ) -> list[ClaimedJob]:
        limit = max(1, int(limit))
        params: dict[str, Any] = {"worker": worker, "lease_seconds": lease_seconds}
        names = []
        for i, queue in enumerate(queues):
            names.append(f":q{i}")
            params[f"q{i}"] = queue
        text = self._sql["job_claim"].replace("{queues}", ", ".join(names) or "NULL")

        def plain(n: int) -> list[Any]:
            return c.execute(text.replace("{limit}", str(n)), params).fetchall()

        def grouped(n: int) -> list[Any]:
            return self._claim_grouped(c, queues, worker, n, clock, lease_seconds)

        with self._write() as c:
            # The clock is read under the write lock: claims' times follow the order they ran
            # in, so no claim refills a group's bucket from a time before the last claim's.
            clock = params["now"] = _ts(now)
            if self._groups_waiting(c, queues):
                rows = claim_in_turns(plain, grouped, limit, next(self._turns) % 2 == 1)
            else:
                rows = plain(limit)
            if rows:
                c.executemany(
                    self._sql["attempt_open"], [(r[0], r[5], r[6], worker, clock) for r in rows]
                )
        # A batch shares its lease end, and often its run times: each is converted once.
        times: dict[float, datetime | None] = {}

        def at(value: float) -> datetime | None:
            return times[value] if value in times else times.setdefault(value, _dt(value))

        claimed = [claimed_job(r, at) for r in rows]
        claimed.sort(key=lambda j: (-j.priority, j.run_at, j.id))
        return claimed

    def job_heartbeat(
        self,
        leases: Sequence[Lease],
        now: datetime | None = None,
        lease_seconds: float | None = None,
    ) -> dict[int, datetime]:
        if not leases:
            return {}
        clock = _ts(now)
        held: dict[int, datetime] = {}
        with self._write() as c:
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
                    held[lease.job_id] = _dt(row[0])  # type: ignore[assignment]
        return held

    def _close_attempt(
        self,
        c: sqlite3.Connection,
        lease: Lease,
        clock: float,
        outcome: str,
        error_class: str | None = None,
        message: str | None = None,
        traceback: str | None = None,
    ) -> None:
        c.execute(
            self._sql["attempt_close"],
            {
                "id": lease.job_id,
                "attempt": lease.attempt,
                "now": clock,
                "outcome": outcome,
                "error_class": error_class,
                "message": message,
                "traceback": traceback,
            },
        )

    def job_complete(
        self, leases: Sequence[Lease], now: datetime | None = None, conn: Any = None
    ) -> list[int]:
        if not leases:
            return []
        clock = _ts(now)
        with self._write(conn) as c:
            # The tokens are checked here, under the write lock: nothing can change them before
            # the updates below, which then go by id (and ``state = 'leased'``) in one statement
            # per chunk, and close the attempts with positional parameters.
            held = self._held(c, leases)
            for start in range(0, len(held), 500):
                ids = [lease.job_id for lease in held[start : start + 500]]
                text = self._sql["job_complete"].replace("{ids}", ",".join("?" * len(ids)))
                c.execute(text, [clock, clock, *ids])
            c.executemany(
                self._sql["attempt_done"], [(clock, lease.job_id, lease.attempt) for lease in held]
            )
        done = {lease.job_id for lease in held}
        return [lease.job_id for lease in leases if lease.job_id not in done]

    def _held(self, c: sqlite3.Connection, leases: Sequence[Lease]) -> list[Lease]:
        """The leases that are current, read in the caller's write transaction (which holds
        the database's write lock, so they stay current until it commits). Each job once."""
        tokens: dict[int, str] = {}
        ids = list(dict.fromkeys(lease.job_id for lease in leases))
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            text = self._sql["job_lease_tokens"].replace("{ids}", ",".join("?" * len(chunk)))
            tokens.update(c.execute(text, chunk).fetchall())
        held = []
        for lease in leases:
            if tokens.get(lease.job_id) == lease.token:
                held.append(lease)
                del tokens[lease.job_id]
        return held

    def job_fail(
        self, failures: Sequence[Failure], now: datetime | None = None
    ) -> list[FailResult]:
        if not failures:
            return []
        clock = _ts(now)
        results = []
        with self._write() as c:
            for f in failures:
                row = c.execute(
                    self._sql["job_fail"],
                    {
                        "id": f.lease.job_id,
                        "token": f.lease.token,
                        "retry": f.retry,
                        "run_at": _ts_or_none(f.run_at),
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
                            "until": _ts(f.pause_group_until),
                            "reason": pause_reason(f),
                        },
                    )
                outcome = "dead" if state is JobState.DEAD else "retry"
                self._close_attempt(
                    c, f.lease, clock, outcome, f.error_class, f.message, f.traceback
                )
                results.append(FailResult(f.lease.job_id, state))
        return results

    def job_release(self, leases: Sequence[Lease], now: datetime | None = None) -> list[int]:
        if not leases:
            return []
        clock = _ts(now)
        stale = []
        with self._write() as c:
            for lease in leases:
                cur = c.execute(
                    self._sql["job_release"],
                    {"id": lease.job_id, "token": lease.token, "now": clock},
                )
                if cur.rowcount == 1:
                    self._close_attempt(c, lease, clock, "released")
                else:
                    stale.append(lease.job_id)
        return stale

    def job_rescue(self, now: datetime | None = None, limit: int = 1000) -> list[RescueResult]:
        clock = _ts(now)
        text = self._sql["job_rescue"].replace("{limit}", str(max(1, int(limit))))
        with self._write() as c:
            rows = c.execute(text, {"now": clock}).fetchall()
            for r in rows:
                c.execute(
                    self._sql["attempt_close"],
                    {
                        "id": r[0],
                        "attempt": r[4],
                        "now": clock,
                        "outcome": "lease_expired",
                        "error_class": "LeaseExpired",
                        "message": r[5],
                        "traceback": None,
                    },
                )
        return [RescueResult(r[0], r[1], r[2], JobState(r[3]), r[4]) for r in rows]

    # -- reading -----------------------------------------------------------------------------------

    def _jobs_where(
        self, clause: str, params: Any, order: str = "id", limit: int | None = None
    ) -> list[JobRow]:
        text = f"SELECT {JOB_COLUMNS} FROM jobledger_jobs WHERE {clause} ORDER BY {ORDERS[order]}"
        if limit is not None:
            text += f" LIMIT {int(limit)}"
        return [job_row(r, _dt) for r in self._read(text, params)]

    def job_get(self, job_id: int) -> JobRow:
        rows = self._jobs_where("id = ?", (int(job_id),))
        if not rows:
            raise NotFound(f"no job with id {job_id}")
        return rows[0]

    def job_get_by_key(self, queue: str, key: str) -> JobRow:
        rows = self._jobs_where("queue = ? AND key = ?", (queue, key))
        if not rows:
            raise NotFound(f"no job with key {key!r} in queue {queue!r}")
        return rows[0]

    def job_find_key(self, key: str) -> list[JobRow]:
        return self._jobs_where("key = ?", (key,))

    def job_list(self, where: JobFilter, order: str = "id") -> list[JobRow]:
        clause, params = filter_sql(where, lambda n: f":{n}", _ts)
        return self._jobs_where(clause, params, order, where.limit)

    def attempt_list(self, job_id: int) -> list[Attempt]:
        return [
            Attempt(
                job_id=r[0],
                attempt=r[1],
                lease_token=r[2],
                worker=r[3],
                started_at=_dt(r[4]),  # type: ignore[arg-type]
                finished_at=_dt(r[5]),
                outcome=None if r[6] is None else AttemptOutcome(r[6]),
                error_class=r[7],
                error_message=r[8],
                traceback=r[9],
            )
            for r in self._read(self._sql["attempt_list"], {"job_id": job_id})
        ]

    def event_list(self, job_id: int) -> list[Event]:
        return [
            Event(r[0], _dt(r[1]), r[2], r[3], r[4], None if r[5] is None else json.loads(r[5]))  # type: ignore[arg-type]
            for r in self._read(self._sql["event_list"], {"job_id": job_id})
        ]

    def queue_stats(
        self, now: datetime | None = None, late_after_seconds: float = 300.0
    ) -> list[QueueStats]:
        clock = _ts(now)
        params = {"now": clock, "late_after": float(late_after_seconds)}
        counts = self._read(self._sql["queue_counts"])
        attempts: dict[str, dict[str, int]] = {}
        for queue, state, _, n in counts:
            attempts.setdefault(queue, {})[state] = int(n or 0)
        oldest = {
            r[0]: (r[1], r[2] or 0) for r in self._read(self._sql["queue_oldest_due"], params)
        }
        expired = {r[0]: r[1] for r in self._read(self._sql["queue_lease_expiries"], params)}
        by_queue: dict[str, dict[str, int]] = {}
        for queue, state, n, _ in counts:
            by_queue.setdefault(queue, {})[state] = n
        result = []
        for queue in sorted(by_queue):
            first, n_late = oldest.get(queue, (None, 0))
            result.append(
                QueueStats(
                    queue=queue,
                    counts=by_queue[queue],
                    oldest_due_pending_seconds=None if first is None else max(0.0, clock - first),
                    late_pending=int(n_late),
                    lease_expiries_last_hour=expired.get(queue, 0),
                    attempts=attempts.get(queue, {}),
                )
            )
        return result

    # -- operators ---------------------------------------------------------------------------------

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

    def job_redrive(
        self,
        job_ids: Sequence[int],
        actor: str,
        reason: str,
        now: datetime | None = None,
        budget: int | None = None,
    ) -> list[int]:
        clock = _ts(now)
        moved = []
        with self._write() as c:
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
        with self._write() as c:
            cur = c.execute(self._sql[name], params | {"id": job_id, "now": clock})
            if cur.rowcount == 1:
                self._event(c, job_id, kind, actor, note, detail, clock)
                moved = True
            else:
                moved = False
        job = self.job_get(job_id)
        if not moved:
            raise InvalidTransition(f"cannot {kind} job {job_id}: it is {job.state.value}")
        return job

    def job_resolve(
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
            _ts(now),
        )

    def job_cancel(
        self, job_id: int, actor: str, reason: str, now: datetime | None = None
    ) -> JobRow:
        return self._transition("job_cancel", job_id, {}, "cancel", actor, reason, None, _ts(now))

    def event_record(
        self,
        job_id: int,
        kind: str,
        actor: str | None,
        note: str | None,
        detail: dict[str, Any] | None = None,
        now: datetime | None = None,
    ) -> None:
        with self._write() as c:
            self._event(c, job_id, kind, actor, note, detail, _ts(now))

    # -- effects -----------------------------------------------------------------------------------

    def effect_record(
        self,
        queue: str,
        key: str,
        effect: str,
        lease: Lease,
        detail: dict[str, Any] | None = None,
        now: datetime | None = None,
        conn: Any = None,
    ) -> bool:
        with self._write(conn) as c:
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
                    "now": _ts(now),
                    "detail": None if detail is None else json.dumps(detail),
                },
            )
            return cur.rowcount == 1

    @staticmethod
    def _effect(row: Sequence[Any]) -> dict[str, Any]:
        return {
            "queue": row[0],
            "key": row[1],
            "effect": row[2],
            "job_id": row[3],
            "attempt": row[4],
            "recorded_at": _dt(row[5]),
            "detail": None if row[6] is None else json.loads(row[6]),
        }

    def effect_get(self, queue: str, key: str, effect: str) -> dict[str, Any] | None:
        rows = self._read(self._sql["effect_get"], {"queue": queue, "key": key, "effect": effect})
        return self._effect(rows[0]) if rows else None

    def effect_list(self, queue: str, key: str) -> list[dict[str, Any]]:
        return [
            self._effect(r)
            for r in self._read(self._sql["effect_list"], {"queue": queue, "key": key})
        ]

    # -- pruning -----------------------------------------------------------------------------------

    def _delete_history(self, c: sqlite3.Connection, rows: Sequence[Any]) -> tuple[int, int, int]:
        """Delete the jobs of ``rows`` (id, queue, key, …) with their attempts, events, effects."""
        ids = [(r[0],) for r in rows]
        c.executemany(self._sql["job_delete"], ids)
        attempts = c.executemany(self._sql["attempt_delete"], ids).rowcount
        events = c.executemany(self._sql["event_delete"], ids).rowcount
        effects = c.executemany(self._sql["effect_delete"], [(r[1], r[2]) for r in rows]).rowcount
        c.executemany(self._sql["publish_request_delete"], ids)
        return attempts, events, effects

    def job_prune(
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
        clock, cutoff = _ts(now), _ts(before)
        names = ", ".join(f"'{JobState(s).value}'" for s in states) or "NULL"
        window = self._sql["job_prune_window"].replace("{limit}", str(max(1, int(limit))))
        pick = self._sql["job_prune_pick"].replace("{states}", names)
        with self._write() as c:
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

    def tombstone_prune(self, now: datetime | None = None, limit: int = 1000) -> int:
        text = self._sql["tombstone_prune"].replace("{limit}", str(max(1, int(limit))))
        with self._write() as c:
            return c.execute(text, {"now": _ts(now)}).rowcount

    def tombstone_find(self, key: str, queue: str | None = None) -> list[Tombstone]:
        return [
            Tombstone(r[0], r[1], r[2], r[3], JobState(r[4]), _dt(r[5]), _dt(r[6]), _dt(r[7]))  # type: ignore[arg-type]
            for r in self._read(self._sql["tombstone_find"], {"key": key, "queue": queue})
        ]

    def schema_drop(self) -> None:
        with self._write() as c:
            names = [
                r[0]
                for r in c.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'jobledger_%'"
                )
            ]
            for name in names:
                c.execute(f'DROP TABLE "{name}"')

    def job_purge(self, job_ids: Sequence[int]) -> int:
        if not job_ids:
            return 0
        marks = ", ".join("?" for _ in job_ids)
        with self._write() as c:
            rows = c.execute(
                f"SELECT id, queue, key FROM jobledger_jobs WHERE id IN ({marks})",
                [int(i) for i in job_ids],
            ).fetchall()
            self._delete_history(c, rows)
        return len(rows)


def _same_digest(digest: str) -> Any:
    return lambda job: payload_digest(job.payload_json) == digest


def _statements(script: str) -> Iterator[str]:
    """Split a migration script into statements (sqlite3 runs one at a time in a transaction)."""
    buffer: list[str] = []
    for line in script.splitlines():
        if not buffer and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buffer.append(line)
        text = "\n".join(buffer)
        if sqlite3.complete_statement(text):
            yield text
            buffer = []
    if "".join(buffer).strip():
        raise ValueError(f"incomplete statement at the end of a migration: {' '.join(buffer)[:80]}")
