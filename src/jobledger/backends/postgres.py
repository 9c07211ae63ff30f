"""The PostgreSQL backend: psycopg 3 with a connection pool, SKIP LOCKED claims, LISTEN/NOTIFY."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from json import loads
from typing import Any

import psycopg
import psycopg.errors
import psycopg_pool
from psycopg import sql as pgsql

from ..errors import BackendUnavailable, InvalidTransition, LeaseLost, NotFound, SchemaMismatch
from ..types import Attempt, AttemptOutcome, ClaimedJob, Event, JobRow, JobState
from .base import (
    FailResult,
    Failure,
    InsertResult,
    JobFilter,
    Lease,
    NewJob,
    OnConflict,
    QueueStats,
    RescueResult,
)
from .common import JOB_COLUMNS, ORDERS, filter_sql, job_row, resolve_inserts
from .sqlfiles import migrations, queries, schema_problem
from .url import DatabaseURL

__all__ = ["PostgresBackend"]

_CONNECT_TIMEOUT = 10

_UUID = re.compile(
    r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"
)

#: Batches of at least this many jobs are enqueued through COPY (see ``_insert_staged``).
_COPY_AT_LEAST = 64


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo is UTC else value.astimezone(UTC)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


class PostgresBackend:
    """jobledger on PostgreSQL. One instance per process; it is safe to share between threads."""

    dialect = "postgres"

    def __init__(self, url: DatabaseURL):
        self.url = url
        self.schema = url.schema
        self.channel = f"jobledger_{self.schema}"
        tables = {
            name: pgsql.Identifier(self.schema, f"jobledger_{name}").as_string(None)
            for name in ("jobs", "attempts", "events", "effects", "migrations")
        }
        self._tables = tables
        self._sql = {
            name: text.replace("{now}", "COALESCE(%(now)s::timestamptz, now())")
            .replace("{jobs}", tables["jobs"])
            .replace("{attempts}", tables["attempts"])
            .replace("{events}", tables["events"])
            .replace("{effects}", tables["effects"])
            for name, text in queries("postgres").items()
        }
        self._probe()
        self._pool = psycopg_pool.ConnectionPool(
            url.conninfo,
            min_size=1,
            max_size=url.pool_size,
            kwargs={"connect_timeout": _CONNECT_TIMEOUT},
            configure=self._configure,
            check=psycopg_pool.ConnectionPool.check_connection,
            timeout=_CONNECT_TIMEOUT,
            open=True,
            name="jobledger",
        )
        # Idempotent statements skip the liveness round trip (see ``_quick``). No connection
        # is opened until one is needed.
        self._quick_pool = psycopg_pool.ConnectionPool(
            url.conninfo,
            min_size=0,
            max_size=url.pool_size,
            kwargs={"connect_timeout": _CONNECT_TIMEOUT},
            configure=self._configure,
            timeout=_CONNECT_TIMEOUT,
            open=True,
            name="jobledger-quick",
        )
        self._closed = False
        self._lock = threading.Lock()
        self._statements: dict[tuple[str, int], str] = {}

    # -- connections ---------------------------------------------------------------------------

    def _unavailable(self, exc: BaseException) -> BackendUnavailable:
        return BackendUnavailable(
            f"PostgreSQL at {self.url.redacted} is unavailable: {_first_line(exc)}"
        )

    def _probe(self) -> None:
        """Connect once up front so that a wrong URL fails now, with a clear message."""
        try:
            with psycopg.connect(self.url.conninfo, connect_timeout=_CONNECT_TIMEOUT):
                pass
        except psycopg.Error as exc:
            raise self._unavailable(exc) from None

    @staticmethod
    def _configure(conn: psycopg.Connection[Any]) -> None:
        # Autocommit: a single-statement write on the hot path (claim, complete, fail,
        # heartbeat) is its own transaction, one round trip instead of BEGIN, it, COMMIT.
        # Several statements that must commit together use ``_tx`` (an explicit transaction).
        conn.autocommit = True
        conn.execute("SET TIME ZONE 'UTC'")

    @contextmanager
    def _translate(self) -> Iterator[None]:
        try:
            yield
        except psycopg.errors.UndefinedTable as exc:
            raise SchemaMismatch(
                f"PostgreSQL at {self.url.redacted} has no jobledger tables in schema "
                f"{self.schema!r} ({_first_line(exc)}); run `jobledger migrate`"
            ) from None
        except (psycopg.OperationalError, psycopg.InterfaceError, psycopg_pool.PoolTimeout) as exc:
            raise self._unavailable(exc) from None
        except psycopg_pool.PoolClosed as exc:
            raise BackendUnavailable(f"the ledger for {self.url.redacted} is closed") from exc

    @contextmanager
    def _tx(self, conn: Any = None) -> Iterator[psycopg.Connection[Any]]:
        """A transaction: our own (committed on success), or a savepoint in the caller's."""
        with self._translate():
            if conn is None:
                with self._pool.connection() as own, own.transaction():
                    yield own
                return
            if not isinstance(conn, psycopg.Connection):
                raise TypeError(
                    f"conn must be a psycopg Connection for {self.url.redacted}, got {type(conn)!r}"
                )
            if (
                not conn.autocommit
                and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            ):
                # Start the caller's transaction, so that ours is a savepoint inside it rather
                # than a transaction of its own that would commit on the caller's behalf.
                conn.execute("SELECT 1")
            with conn.transaction():
                yield conn

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        with self._tx() as conn:
            yield conn

    def _run(
        self, name: str, params: dict[str, Any], conn: Any = None, **literals: Any
    ) -> list[Any]:
        text = self._sql[name]
        for lit, value in literals.items():
            text = text.replace("{" + lit + "}", str(int(value)))
        with self._tx(conn) as c:
            cur = c.execute(text, params)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []

    def _statement(self, name: str, limit: int) -> str:
        """A named query with ``{limit}`` written in as a literal (cached per value)."""
        text = self._statements.get((name, limit))
        if text is None:
            text = self._sql[name].replace("{limit}", str(int(limit)))
            self._statements[(name, limit)] = text
        return text

    def _quick(self, text: str, params: dict[str, Any]) -> list[Any]:
        """A statement that is safe to send twice, on a connection handed out without the round
        trip that proves it alive. If the server closed the connection (a restart, a terminated
        session) the statement goes again on another (twice at most). Safe to send twice: an enqueue by key
        (the second finds the first), a lease renewal, a claim (had the first committed before
        its reply was lost, its jobs wait for their leases to expire, as after a worker crash;
        they are never run twice). Completions and failures are not sent here: a second one
        would be refused and reported as a lost lease."""
        with self._translate():
            for attempt in range(3):
                with self._quick_pool.connection() as c:
                    try:
                        cur = c.execute(text, params)  # type: ignore[arg-type]
                        return cur.fetchall() if cur.description else []
                    except (psycopg.OperationalError, psycopg.InterfaceError):
                        if attempt == 2 or not c.broken:
                            raise
                self._quick_pool.check()  # drop the other connections that broke too
        raise AssertionError("unreachable")

    def _hot(self, text: str, params: dict[str, Any]) -> list[Any]:
        """One statement as its own transaction on a pooled autocommit connection (no BEGIN and
        COMMIT round trips). psycopg prepares it server-side after a few executions."""
        with self._translate(), self._pool.connection() as c:
            cur = c.execute(text, params)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._pool.close()
                self._quick_pool.close()

    # -- schema ----------------------------------------------------------------------------------

    def migrate(self) -> list[str]:
        applied_now: list[str] = []
        schema = pgsql.Identifier(self.schema)
        try:
            with psycopg.connect(
                self.url.conninfo, autocommit=True, connect_timeout=_CONNECT_TIMEOUT
            ) as conn:
                conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (f"jobledger:{self.schema}",))
                try:
                    conn.execute(pgsql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
                    conn.execute(
                        pgsql.SQL(
                            "CREATE TABLE IF NOT EXISTS {}.jobledger_migrations ("
                            " version integer PRIMARY KEY, name text NOT NULL,"
                            " applied_at timestamptz NOT NULL DEFAULT now())"
                        ).format(schema)
                    )
                    done = {
                        row[0]
                        for row in conn.execute(
                            pgsql.SQL("SELECT version FROM {}.jobledger_migrations").format(schema)
                        )
                    }
                    for migration in migrations("postgres"):
                        if migration.version in done:
                            continue
                        with conn.transaction():
                            conn.execute(pgsql.SQL("SET LOCAL search_path TO {}").format(schema))
                            conn.execute(migration.sql.encode())
                            conn.execute(
                                pgsql.SQL(
                                    "INSERT INTO {}.jobledger_migrations (version, name) VALUES (%s, %s)"
                                ).format(schema),
                                (migration.version, migration.name),
                            )
                        applied_now.append(migration.label)
                finally:
                    conn.execute(
                        "SELECT pg_advisory_unlock(hashtext(%s))", (f"jobledger:{self.schema}",)
                    )
        except psycopg.OperationalError as exc:
            raise self._unavailable(exc) from None
        return applied_now

    def schema_version(self) -> int:
        try:
            rows = self._run_raw(
                f"SELECT coalesce(max(version), 0) FROM {self._tables['migrations']}", {}
            )
        except SchemaMismatch:
            return 0
        return int(rows[0][0])

    def _run_raw(self, text: str, params: dict[str, Any]) -> list[Any]:
        with self._tx() as c:
            cur = c.execute(text.encode(), params)
            return cur.fetchall() if cur.description else []

    def applied_migrations(self) -> set[int]:
        try:
            return {
                int(r[0])
                for r in self._run_raw(f"SELECT version FROM {self._tables['migrations']}", {})
            }
        except SchemaMismatch:
            return set()

    def check_schema(self) -> None:
        problem = schema_problem(
            "postgres",
            self.applied_migrations(),
            f"PostgreSQL at {self.url.redacted} (schema {self.schema!r})",
        )
        if problem:
            raise SchemaMismatch(problem)

    # -- wake-ups --------------------------------------------------------------------------------

    @property
    def supports_listen(self) -> bool:
        return True

    def listener(self, queues: Sequence[str]) -> _PgListener:
        return _PgListener(self, set(queues))

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
        if conn is None and len(jobs) == 1:
            # Nothing to undo if the key conflicts: the one job was not inserted.
            return self._insert_jobs(jobs, now, self._quick, on_conflict)
        if conn is None and _consistent(jobs):
            try:
                return self._insert_at_once(jobs, now, on_conflict)
            except _BatchConflict:
                pass  # nothing was written; the transaction below says which keys conflict
        with self._tx(conn) as c:

            def run(text: str, params: dict[str, Any]) -> list[Any]:
                return c.execute(text, params).fetchall()  # type: ignore[arg-type]

            staged = None
            if conn is None and len(jobs) >= _COPY_AT_LEAST:
                staged = self._insert_staged(c, jobs, now)
            return self._insert_jobs(jobs, now, run, on_conflict, staged)

    def _insert_at_once(
        self, jobs: Sequence[NewJob], now: datetime | None, on_conflict: OnConflict
    ) -> list[InsertResult]:
        params = _array_params(jobs) | {
            "channel": self.channel,
            "now": now,
            "strict": on_conflict == "raise",
        }
        try:
            rows = self._quick(self._sql["job_insert_at_once"], params)
        except BackendUnavailable:
            raise
        except psycopg.errors.InvalidTextRepresentation as exc:
            if "jobledger: key conflict" in str(exc):
                raise _BatchConflict from None
            raise
        created: dict[tuple[str, str], int] = {}
        existing: dict[tuple[str, str], tuple[int, str, Any]] = {}
        for tag, job_id, queue, key, task, payload in rows:
            if tag == "c":
                created[(queue, key)] = job_id
            elif tag == "e":
                existing[(queue, key)] = (job_id, task, payload)
        missing = {(j.queue, j.key) for j in jobs} - created.keys() - existing.keys()
        if missing:
            # "report" only: another transaction inserted these keys meanwhile.
            found = self._quick(
                self._sql["job_existing"],
                {"queue": [m[0] for m in missing], "key": [m[1] for m in missing]},
            )
            existing.update({(r[1], r[2]): (r[0], r[3], r[4]) for r in found})
            if missing - existing.keys():
                raise BackendUnavailable(
                    f"enqueue into {self.url.redacted} kept racing with pruning"
                )
        return resolve_inserts(jobs, created, existing, on_conflict)

    def _insert_staged(
        self, c: psycopg.Connection[Any], jobs: Sequence[NewJob], now: datetime | None
    ) -> list[Any]:
        """Insert a batch through COPY into a temporary table (per connection, emptied at
        commit) and one INSERT … SELECT from it; the rows it returns are what was created."""
        if not getattr(c, "_jobledger_staging", False):
            c.execute(self._sql["job_stage_create"])  # type: ignore[arg-type]
            c._jobledger_staging = True  # type: ignore[attr-defined]
        with c.cursor() as cur:
            with cur.copy(self._sql["job_stage_copy"]) as copy:  # type: ignore[arg-type]
                for j in jobs:
                    copy.write_row(
                        (
                            j.queue,
                            j.key,
                            j.task,
                            j.payload_json,
                            j.priority,
                            j.run_at,
                            j.max_attempts,
                            float(j.lease_seconds),
                            j.correlation_id,
                        )
                    )
            cur.execute(
                self._sql["job_insert_staged"],  # type: ignore[arg-type]
                {"channel": self.channel, "now": now},
            )
            return cur.fetchall()

    def _insert_jobs(
        self,
        jobs: Sequence[NewJob],
        now: datetime | None,
        run: Any,
        on_conflict: OnConflict,
        staged: list[Any] | None = None,
    ) -> list[InsertResult]:
        """Insert, then read the jobs whose keys already existed. ``staged``: the rows a
        COPY-based insert of ``jobs`` already returned (the first round)."""
        created: dict[tuple[str, str], int] = {}
        existing: dict[tuple[str, str], tuple[int, str, Any]] = {}
        todo = list(jobs)
        for _ in range(3):
            if staged is not None:
                inserted, staged = staged, None
            elif len(todo) == 1:
                inserted = run(self._sql["job_insert_one"], self._insert_one_params(todo[0], now))
            else:
                inserted = run(self._sql["job_insert"], self._insert_params(todo, now))
            for r in inserted:
                created[(r[1], r[2])] = r[0]
            missing = list(
                dict.fromkeys((j.queue, j.key) for j in todo if (j.queue, j.key) not in created)
            )
            if not missing:
                return resolve_inserts(jobs, created, existing, on_conflict)
            found = run(
                self._sql["job_existing"],
                {"queue": [m[0] for m in missing], "key": [m[1] for m in missing]},
            )
            existing.update({(r[1], r[2]): (r[0], r[3], r[4]) for r in found})
            # A conflicting row that vanished between the insert and the read (pruned) is
            # inserted again; rows this call already created are not.
            settled = created.keys() | existing.keys()
            todo = [j for j in todo if (j.queue, j.key) not in settled]
            if not todo:
                return resolve_inserts(jobs, created, existing, on_conflict)
        raise BackendUnavailable(f"enqueue into {self.url.redacted} kept racing with pruning")

    def _insert_one_params(self, j: NewJob, now: datetime | None) -> dict[str, Any]:
        return {
            "queue": j.queue,
            "key": j.key,
            "task": j.task,
            "payload": j.payload_json,
            "priority": j.priority,
            "run_at": j.run_at,
            "max_attempts": j.max_attempts,
            "lease_seconds": float(j.lease_seconds),
            "correlation_id": j.correlation_id,
            "channel": self.channel,
            "now": now,
        }

    def _insert_params(self, jobs: Sequence[NewJob], now: datetime | None) -> dict[str, Any]:
        return {
            "queue": [j.queue for j in jobs],
            "key": [j.key for j in jobs],
            "task": [j.task for j in jobs],
            "payload": [j.payload_json for j in jobs],
            "priority": [j.priority for j in jobs],
            "run_at": [j.run_at for j in jobs],
            "max_attempts": [j.max_attempts for j in jobs],
            "lease_seconds": [float(j.lease_seconds) for j in jobs],
            "correlation_id": [j.correlation_id for j in jobs],
            "channel": self.channel,
            "now": now,
        }

    def job_claim(
        self,
        queues: Sequence[str],
        worker: str,
        limit: int,
        now: datetime | None = None,
        lease_seconds: float | None = None,
    ) -> list[ClaimedJob]:
        rows = self._quick(
            self._statement("job_claim", max(1, int(limit))),
            {"queues": list(queues), "worker": worker, "now": now, "lease_seconds": lease_seconds},
        )
        claimed = [
            ClaimedJob(
                id=r[0],
                queue=r[1],
                key=r[2],
                task=r[3],
                payload=loads(r[4]),
                attempt=r[5],
                lease_token=r[6],
                lease_until=_utc(r[7]),  # type: ignore[arg-type]
                lease_seconds=float(r[8]),
                run_at=_utc(r[9]),  # type: ignore[arg-type]
                priority=r[10],
                correlation_id=r[11],
                budget_left=r[12] - r[5],
            )
            for r in rows
        ]
        claimed.sort(key=lambda j: (-j.priority, j.run_at, j.id))
        return claimed

    @staticmethod
    def _lease_params(leases: Sequence[Lease]) -> dict[str, Any]:
        """Ids and tokens as array literals: one string each, which costs a fraction of what
        binding a list element by element does. A token that is not a UUID cannot be any job's
        current token, so it is left out (its lease is reported stale)."""
        held = [lease for lease in leases if _UUID.fullmatch(lease.token)]
        return {
            "ids": "{" + ",".join([str(int(lease.job_id)) for lease in held]) + "}",
            "tokens": "{" + ",".join([lease.token for lease in held]) + "}",
        }

    def job_heartbeat(
        self,
        leases: Sequence[Lease],
        now: datetime | None = None,
        lease_seconds: float | None = None,
    ) -> dict[int, datetime]:
        if not leases:
            return {}
        params = self._lease_params(leases) | {"now": now, "lease_seconds": lease_seconds}
        return {r[0]: _utc(r[1]) for r in self._quick(self._sql["job_heartbeat"], params)}  # type: ignore[misc]

    def job_complete(
        self, leases: Sequence[Lease], now: datetime | None = None, conn: Any = None
    ) -> list[int]:
        if not leases:
            return []
        params = self._lease_params(leases) | {"now": now}
        if conn is None:
            rows = self._hot(self._sql["job_complete"], params)
        else:
            rows = self._run("job_complete", params, conn=conn)
        done = {r[0] for r in rows}
        return [lease.job_id for lease in leases if lease.job_id not in done]

    def job_fail(
        self, failures: Sequence[Failure], now: datetime | None = None
    ) -> list[FailResult]:
        if not failures:
            return []
        sent = [f for f in failures if _UUID.fullmatch(f.lease.token)]
        params = {
            "ids": [f.lease.job_id for f in sent],
            "tokens": [f.lease.token for f in sent],
            "retry": [f.retry for f in sent],
            "run_at": [f.run_at for f in sent],
            "error_class": [f.error_class for f in sent],
            "message": [f.message for f in sent],
            "traceback": [f.traceback for f in sent],
            "now": now,
        }
        moved = {r[0]: JobState(r[1]) for r in self._hot(self._sql["job_fail"], params)}
        return [FailResult(f.lease.job_id, moved.get(f.lease.job_id)) for f in failures]

    def job_release(self, leases: Sequence[Lease], now: datetime | None = None) -> list[int]:
        if not leases:
            return []
        rows = self._run("job_release", self._lease_params(leases) | {"now": now})
        released = {r[0] for r in rows}
        return [lease.job_id for lease in leases if lease.job_id not in released]

    def job_rescue(self, now: datetime | None = None, limit: int = 1000) -> list[RescueResult]:
        rows = self._run("job_rescue", {"now": now}, limit=limit)
        return [RescueResult(r[0], r[1], r[2], JobState(r[3]), r[4]) for r in rows]

    # -- reading -----------------------------------------------------------------------------------

    def _jobs_where(
        self, clause: str, params: dict[str, Any], order: str = "id", limit: int | None = None
    ) -> list[JobRow]:
        text = f"SELECT {JOB_COLUMNS} FROM {self._tables['jobs']} WHERE {clause} ORDER BY {ORDERS[order]}"
        if limit is not None:
            text += f" LIMIT {int(limit)}"
        return [job_row(r, _utc) for r in self._run_raw(text, params)]

    def job_get(self, job_id: int) -> JobRow:
        rows = self._jobs_where("id = %(id)s", {"id": int(job_id)})
        if not rows:
            raise NotFound(f"no job with id {job_id}")
        return rows[0]

    def job_get_by_key(self, queue: str, key: str) -> JobRow:
        rows = self._jobs_where("queue = %(queue)s AND key = %(key)s", {"queue": queue, "key": key})
        if not rows:
            raise NotFound(f"no job with key {key!r} in queue {queue!r}")
        return rows[0]

    def job_find_key(self, key: str) -> list[JobRow]:
        return self._jobs_where("key = %(key)s", {"key": key})

    def job_list(self, where: JobFilter, order: str = "id") -> list[JobRow]:
        clause, params = filter_sql(where, lambda n: f"%({n})s", lambda t: t, like="ILIKE")
        return self._jobs_where(clause, params, order, where.limit)

    def attempt_list(self, job_id: int) -> list[Attempt]:
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
            for r in self._run("attempt_list", {"job_id": job_id})
        ]

    def event_list(self, job_id: int) -> list[Event]:
        return [
            Event(r[0], _utc(r[1]), r[2], r[3], r[4], r[5])  # type: ignore[arg-type]
            for r in self._run("event_list", {"job_id": job_id})
        ]

    def queue_stats(
        self, now: datetime | None = None, late_after_seconds: float = 300.0
    ) -> list[QueueStats]:
        with self._tx() as c:
            clock = now or c.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
            params = {"now": clock, "late_after": float(late_after_seconds)}
            counts = c.execute(self._sql["queue_counts"]).fetchall()  # type: ignore[arg-type]
            oldest = c.execute(self._sql["queue_oldest_due"], params).fetchall()  # type: ignore[arg-type]
            expiries = c.execute(self._sql["queue_lease_expiries"], params).fetchall()  # type: ignore[arg-type]
        stats: dict[str, QueueStats] = {}
        for queue, state, n in counts:
            stats.setdefault(queue, QueueStats(queue)).counts[state] = n
        result = []
        late = {q: (first, n) for q, first, n in oldest}
        expired = dict(expiries)
        for queue in sorted(stats):
            first, n_late = late.get(queue, (None, 0))
            result.append(
                QueueStats(
                    queue=queue,
                    counts=stats[queue].counts,
                    oldest_due_pending_seconds=None
                    if first is None
                    else max(0.0, (clock - first).total_seconds()),
                    late_pending=n_late,
                    lease_expiries_last_hour=expired.get(queue, 0),
                )
            )
        return result

    # -- operators ---------------------------------------------------------------------------------

    def job_redrive(
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
        return sorted(r[0] for r in self._run("job_redrive", params))

    def _transition(self, name: str, job_id: int, params: dict[str, Any], what: str) -> JobRow:
        rows = self._run(name, params | {"id": job_id})
        if not rows:
            job = self.job_get(job_id)
            raise InvalidTransition(f"cannot {what} job {job_id}: it is {job.state.value}")
        return self.job_get(job_id)

    def job_resolve(
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

    def job_cancel(
        self, job_id: int, actor: str, reason: str, now: datetime | None = None
    ) -> JobRow:
        return self._transition(
            "job_cancel", job_id, {"actor": actor, "reason": reason, "now": now}, "cancel"
        )

    def event_record(
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
        self._run("event_record", params)

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
        params = {
            "queue": queue,
            "key": key,
            "effect": effect,
            "job_id": lease.job_id,
            "token": lease.token,
            "detail": None if detail is None else json.dumps(detail),
            "now": now,
        }
        held, recorded = self._run("effect_record", params, conn=conn)[0]
        if not held:
            raise LeaseLost(lease.job_id, lease.token, f"record effect {effect!r}")
        return bool(recorded)

    @staticmethod
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

    def effect_get(self, queue: str, key: str, effect: str) -> dict[str, Any] | None:
        rows = self._run("effect_get", {"queue": queue, "key": key, "effect": effect})
        return self._effect(rows[0]) if rows else None

    def effect_list(self, queue: str, key: str) -> list[dict[str, Any]]:
        return [self._effect(r) for r in self._run("effect_list", {"queue": queue, "key": key})]


class _PgListener:
    """LISTEN on the ledger's channel over a dedicated connection; reconnects when it breaks."""

    def __init__(self, backend: PostgresBackend, queues: set[str]):
        self._backend = backend
        self._queues = queues
        self._conn: psycopg.Connection[Any] | None = None

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(
            self._backend.url.conninfo, autocommit=True, connect_timeout=_CONNECT_TIMEOUT
        )
        conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(self._backend.channel)))
        return conn

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a notification about one of our queues.

        Returns True on a wake-up (or after reconnecting, when one may have been missed)."""
        try:
            if self._conn is None or self._conn.closed:
                self._conn = self._connect()
                return True
            for note in self._conn.notifies(timeout=timeout):
                if note.payload in self._queues:
                    return True
            return False
        except psycopg.Error:
            self.close()
            return True

    def close(self) -> None:
        if self._conn is not None:
            with suppress(psycopg.Error):
                self._conn.close()
            self._conn = None


class _BatchConflict(Exception):
    """A batch enqueued at once met a key conflict; nothing of it was written."""


def _consistent(jobs: Sequence[NewJob]) -> bool:
    """False when one key appears twice in the batch with another task or payload (a conflict
    the database cannot see within one statement)."""
    seen: dict[tuple[str, str], tuple[str, str]] = {}
    for j in jobs:
        first = seen.setdefault((j.queue, j.key), (j.task, j.payload_json))
        if first != (j.task, j.payload_json):
            return False
    return True


def _text(value: str | None) -> str:
    if value is None:
        return "NULL"
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _array(values: Iterable[str]) -> str:
    return "{" + ",".join(values) + "}"


def _array_params(jobs: Sequence[NewJob]) -> dict[str, str]:
    """The columns of a batch as PostgreSQL array literals: building one string per column
    costs far less than binding each element of a list."""
    return {
        "queue": _array([_text(j.queue) for j in jobs]),
        "key": _array([_text(j.key) for j in jobs]),
        "task": _array([_text(j.task) for j in jobs]),
        "payload": _array([_text(j.payload_json) for j in jobs]),
        "priority": _array([str(int(j.priority)) for j in jobs]),
        "run_at": _array(
            ["NULL" if j.run_at is None else _text(j.run_at.isoformat()) for j in jobs]
        ),
        "max_attempts": _array([str(int(j.max_attempts)) for j in jobs]),
        "lease_seconds": _array([repr(float(j.lease_seconds)) for j in jobs]),
        "correlation_id": _array([_text(j.correlation_id) for j in jobs]),
    }
