"""The PostgreSQL backend: psycopg 3 with a connection pool, SKIP LOCKED claims, LISTEN/NOTIFY."""

from __future__ import annotations

import itertools
import json
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime
from typing import Any, TypeVar

import psycopg
import psycopg.errors
import psycopg_pool
from psycopg import sql as pgsql

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
)
from ..errors import BackendUnavailable, InvalidTransition, LeaseLost, NotFound, SchemaMismatch
from .common import (
    JOB_COLUMNS,
    ORDERS,
    claim_in_turns,
    claimed_job,
    filter_sql,
    job_row,
    pause_reason,
    resolve_inserts,
)
from .common import utc as _utc
from .postgres_api import PostgresApiMixin
from .postgres_groups import PostgresGroups
from .postgres_newjob import NEW_JOB_SQL, new_job_arrays, new_job_values
from .postgres_observability import PostgresObservability
from .postgres_outbox import PostgresOutbox
from .postgres_prepared import PreparedStatement
from .postgres_push import PostgresPushMixin
from .postgres_scheduling import PostgresScheduling
from .sqlfiles import migrations, queries, schema_problem
from .url import DatabaseURL

__all__ = ["PostgresBackend"]

_T = TypeVar("_T")

_CONNECT_TIMEOUT = 10

_UUID = re.compile(
    r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"
)


_MISSING_DATABASE = re.compile(r'FATAL:\s+database "([^"]+)" does not exist')


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _fill(text: str, tables: dict[str, str]) -> str:
    """A named query with its placeholders filled: ``{new_…}`` are the columns of a new job
    (``NEW_JOB_COLUMNS``), ``{now}`` is the caller's explicit time or the database clock,
    ``{jobs}`` and the other table names are schema-qualified."""
    for name, value in NEW_JOB_SQL.items():
        text = text.replace("{" + name + "}", value)
    text = text.replace("{now}", "COALESCE(%(now)s::timestamptz, now())")
    for name, qualified in tables.items():
        text = text.replace("{" + name + "}", qualified)
    return text


class PostgresBackend(
    PostgresScheduling,
    PostgresApiMixin,
    PostgresOutbox,
    PostgresObservability,
    PostgresPushMixin,
    PostgresGroups,
):
    """jobledger on PostgreSQL. One instance per process; it is safe to share between threads."""

    dialect = "postgres"

    def __init__(self, url: DatabaseURL):
        self.url = url
        self.schema = url.schema
        self.channel = f"jobledger_{self.schema}"
        tables = {
            name: pgsql.Identifier(self.schema, f"jobledger_{name}").as_string(None)
            for name in ("jobs", "attempts", "events", "effects", "migrations", "tombstones")
            + ("leaders", "schedules", "ticks")
            + ("queues", "api_keys", "rate_limits", "publish_requests")
            + ("routes", "outbox")
            + ("minute_stats", "sessions")
            + ("subscriptions",)
            + ("groups", "group_limits")
        }
        self._tables = tables
        self._sql = {name: _fill(text, tables) for name, text in queries("postgres").items()}
        self._insert_one_statement = PreparedStatement(
            "jobledger_job_insert_one", self._sql["job_insert_one"]
        )
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
        self._turns = itertools.count()
        self._groups_seen = {}
        self._groups_seen_lock = threading.Lock()

    # -- connections ---------------------------------------------------------------------------

    def _unavailable(self, exc: BaseException) -> BackendUnavailable:
        missing = _MISSING_DATABASE.search(str(exc))
        if missing:
            return BackendUnavailable(
                f"PostgreSQL at {self.url.redacted}: database {missing[1]!r} does not exist; "
                f"create it (createdb {missing[1]}), then run `jobledger migrate`"
            )
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
        # No statement is prepared behind our back. After five runs psycopg would prepare it,
        # and PostgreSQL may then switch to a generic plan, which cannot know how long an array
        # parameter is: for a completion of 500 leases it rescans the 500 (id, token) pairs
        # for every row (a quadratic join, 4-5x the cost of the whole drain). Statements whose
        # generic plan is known to be good ask for ``prepare=True`` (the claim; tests check its
        # plan); the single enqueue has its own prepared statement.
        conn.prepare_threshold = None
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
            # Never prepared, on a caller's connection too (see ``_configure``).
            cur = c.execute(text, params, prepare=False)
            return cur.fetchall() if cur.description else []

    def _statement(self, name: str, limit: int) -> str:
        """A named query with ``{limit}`` written in as a literal (cached per value)."""
        text = self._statements.get((name, limit))
        if text is None:
            text = self._sql[name].replace("{limit}", str(int(limit)))
            self._statements[(name, limit)] = text
        return text

    def _quick(self, text: str, params: dict[str, Any], prepare: bool | None = None) -> list[Any]:
        """A statement that is safe to send twice, on a connection handed out without the round
        trip that proves it alive. If the server closed the connection (a restart, a terminated
        session) the statement goes again on another (twice at most). Safe to send twice: an enqueue by key
        (the second finds the first), a lease renewal, a claim (had the first committed before
        its reply was lost, its jobs wait for their leases to expire, as after a worker crash;
        they are never run twice). Completions and failures are not sent here: a second one
        would be refused and reported as a lost lease."""

        def run(c: psycopg.Connection[Any]) -> list[Any]:
            cur = c.execute(text, params, prepare=prepare)
            return cur.fetchall() if cur.description else []

        return self._quickly(run)

    def _quickly(self, run: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        """``run`` on a connection of the quick pool, as ``_quick`` runs its statement."""
        with self._translate():
            for attempt in range(3):
                with self._quick_pool.connection() as c:
                    try:
                        return run(c)
                    except (psycopg.OperationalError, psycopg.InterfaceError):
                        if attempt == 2 or not c.broken:
                            raise
                self._quick_pool.check()  # drop the other connections that broke too
        raise AssertionError("unreachable")

    def _hot(self, text: str, params: dict[str, Any]) -> list[Any]:
        """One statement as its own transaction on a pooled autocommit connection (no BEGIN and
        COMMIT round trips), planned for its parameters each time (see ``_configure``)."""
        with self._translate(), self._pool.connection() as c:
            cur = c.execute(text, params)
            return cur.fetchall() if cur.description else []

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._pool.close()
                self._quick_pool.close()

    # -- schema ----------------------------------------------------------------------------------

    def migrate(self, conn: Any = None) -> list[str]:
        """Apply the missing migrations, on a connection of our own under an advisory lock.
        What is applied is read first, so that a migrated schema takes no lock and no DDL (and
        no CREATE privilege). ``conn`` (an application's open transaction) needs nothing here:
        it sees the tables once they are committed, even in REPEATABLE READ."""
        known = {m.version for m in migrations("postgres")}
        if known <= self.applied_migrations():
            return []
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
            job_id = self._insert_one(jobs[0], now)
            if job_id is not None:
                return [InsertResult(job_id, True)]
        elif conn is None and _consistent(jobs):
            created = self._insert_fresh(jobs, now)
            if created is not None:
                return resolve_inserts(jobs, created, {}, on_conflict)
        return self._insert_checked(jobs, now, conn, on_conflict)

    def _insert_one(self, job: NewJob, now: datetime | None) -> int | None:
        """One new job in one statement: its id, or None when its key is known (then nothing
        was written, and ``_insert_checked`` does the whole work)."""
        params = new_job_values(job)
        params["channel"] = self.channel
        params["now"] = now
        rows = self._quickly(lambda c: self._insert_one_statement.rows(c, params))
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    def _insert_fresh(
        self, jobs: Sequence[NewJob], now: datetime | None
    ) -> dict[tuple[str, str], int] | None:
        """The common enqueue in one statement, one round trip: every key new (no job and no
        live tombstone has it). Returns the ids created, or None when a key is known — then
        nothing was written, and ``_insert_checked`` does the whole work."""
        params = new_job_arrays(jobs) | {"channel": self.channel, "now": now}
        try:
            rows = self._quick(self._sql["job_insert_fresh"], params)
        except psycopg.errors.InvalidTextRepresentation as exc:
            if "jobledger: not all keys were new" in str(exc):
                return None  # another transaction inserted one of them meanwhile
            raise
        created = {(r[2], r[3]): r[1] for r in rows if r[0] == "c"}
        return None if any(r[0] == "v" and r[1] < 0 for r in rows) else created

    def _insert_checked(
        self,
        jobs: Sequence[NewJob],
        now: datetime | None,
        conn: Any,
        on_conflict: OnConflict,
    ) -> list[InsertResult]:
        """Any enqueue, in a transaction: insert, then look at tombstones and existing keys."""
        params = new_job_arrays(jobs) | {"channel": self.channel, "now": now}
        idents = list(dict.fromkeys((j.queue, j.key) for j in jobs))
        for _ in range(3):
            with self._tx(conn) as c:
                rows = c.execute(self._sql["job_insert"], params, prepare=False).fetchall()
                created = {(r[1], r[2]): r[0] for r in rows}
                pruned = self._tombstoned(c, idents, now)
                undo = [created.pop(i) for i in list(created) if i in pruned]
                if undo:
                    # The insert waited on the key while a prune deleted its job, and went ahead
                    # when the prune committed; the prune's tombstone, visible now, wins.
                    c.execute(self._sql["job_insert_undo"], {"ids": undo}, prepare=False)
                missing = [i for i in idents if i not in created and i not in pruned]
                existing: dict[tuple[str, str], tuple[int, str, Any]] = {}
                if missing:
                    found = c.execute(
                        self._sql["job_existing"],
                        {"queue": [m[0] for m in missing], "key": [m[1] for m in missing]},
                        prepare=False,
                    ).fetchall()
                    existing = {(r[1], r[2]): (r[0], r[3], r[4]) for r in found}
                if all(m in existing for m in missing):
                    same = self._same_payload(c, jobs, pruned)
                    return resolve_inserts(jobs, created, existing, on_conflict, same)
            # A conflicting row vanished between the insert and the read (pruned without a
            # tombstone): try again.
        raise BackendUnavailable(f"enqueue into {self.url.redacted} kept racing with pruning")

    def _tombstoned(
        self, c: psycopg.Connection[Any], idents: list[tuple[str, str]], now: datetime | None
    ) -> dict[tuple[str, str], tuple[int, str, str]]:
        rows = c.execute(
            self._sql["tombstone_live"],
            {"queue": [i[0] for i in idents], "key": [i[1] for i in idents], "now": now},
            prepare=False,
        ).fetchall()
        return {(r[0], r[1]): (r[2], r[3], r[4]) for r in rows}

    def _same_payload(
        self,
        c: psycopg.Connection[Any],
        jobs: Sequence[NewJob],
        pruned: dict[tuple[str, str], tuple[int, str, str]],
    ) -> dict[tuple[str, str], tuple[int, str, Any]]:
        """For keys held by tombstones: (job id, task, a test that a payload is the pruned one).

        Payloads are compared by the digest of their ``jsonb`` text, as the prune computed it."""
        if not pruned:
            return {}
        payloads = list({j.payload_json for j in jobs if (j.queue, j.key) in pruned})
        digests = dict(
            c.execute(self._sql["payload_digest"], {"payloads": payloads}, prepare=False).fetchall()
        )
        return {
            ident: (job_id, task, lambda job, d=digest: digests.get(job.payload_json) == d)
            for ident, (job_id, task, digest) in pruned.items()
        }

    def job_claim(
        self,
        queues: Sequence[str],
        worker: str,
        limit: int,
        now: datetime | None = None,
        lease_seconds: float | None = None,
    ) -> list[ClaimedJob]:
        limit = max(1, int(limit))
        params = {
            "queues": list(queues),
            "worker": worker,
            "now": now,
            "lease_seconds": lease_seconds,
        }

        def plain(n: int) -> list[Any]:
            return self._quick(self._statement("job_claim", n), params, prepare=True)

        def grouped(n: int) -> list[Any]:
            return self._claim_grouped(queues, worker, n, now, lease_seconds)

        if self._groups_waiting(queues):
            rows = claim_in_turns(plain, grouped, limit, next(self._turns) % 2 == 1)
        else:
            rows = plain(limit)
        claimed = [claimed_job(r, _utc) for r in rows]
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
        pauses = {f.lease.job_id: f for f in sent if f.pause_group_until is not None}
        if not pauses:
            rows = self._hot(self._sql["job_fail"], params)
        else:
            # The failure and its group's pause commit together: no claim in between takes
            # the group's other jobs.
            with self._tx() as c:
                rows = c.execute(self._sql["job_fail"], params).fetchall()
                for job_id, _, group, queue in rows:
                    failure = pauses.get(job_id)
                    if failure is not None and group is not None:
                        c.execute(
                            self._sql["group_pause"],
                            {
                                "queue": queue,
                                "name": group,
                                "until": failure.pause_group_until,
                                "reason": pause_reason(failure),
                            },
                        )
        moved = {r[0]: JobState(r[1]) for r in rows}
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
            counts = c.execute(self._sql["queue_counts"]).fetchall()
            oldest = c.execute(self._sql["queue_oldest_due"], params).fetchall()
            expiries = c.execute(self._sql["queue_lease_expiries"], params).fetchall()
        stats: dict[str, QueueStats] = {}
        for queue, state, n, attempts in counts:
            entry = stats.setdefault(queue, QueueStats(queue))
            entry.counts[state] = n
            entry.attempts[state] = int(attempts or 0)
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
                    attempts=stats[queue].attempts,
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

    # -- pruning -----------------------------------------------------------------------------------

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
        window = self._sql["job_prune_window"].replace("{limit}", str(max(1, int(limit))))
        with self._tx() as c:
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
                counts = dict(c.execute(self._sql["job_prune_count"], params).fetchall())
                return PruneResult(jobs=sum(counts.values()), by_state=counts), going_on
            rows = c.execute(self._sql["job_prune"], params).fetchall()
            if not rows:
                return PruneResult(), going_on
            if keep_keys_seconds is not None:
                c.execute(
                    self._sql["tombstone_record"],
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
                self._sql["job_history_delete"],
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

    def tombstone_prune(self, now: datetime | None = None, limit: int = 1000) -> int:
        return len(self._run("tombstone_prune", {"now": now}, limit=limit))

    def tombstone_find(self, key: str, queue: str | None = None) -> list[Tombstone]:
        return [
            Tombstone(r[0], r[1], r[2], r[3], JobState(r[4]), _utc(r[5]), _utc(r[6]), _utc(r[7]))  # type: ignore[arg-type]
            for r in self._run("tombstone_find", {"key": key, "queue": queue})
        ]

    def schema_drop(self) -> None:
        with self._tx() as c:
            if self.schema != "public":
                c.execute(
                    pgsql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                        pgsql.Identifier(self.schema)
                    )
                )
                return
            names = c.execute(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = 'public' AND table_name LIKE 'jobledger\\_%%'"
            ).fetchall()
            for (name,) in names:
                c.execute(
                    pgsql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(
                        pgsql.Identifier("public", name)
                    )
                )

    def job_purge(self, job_ids: Sequence[int]) -> int:
        if not job_ids:
            return 0
        with self._tx() as c:
            rows = c.execute(self._sql["job_purge"], {"ids": list(job_ids)}).fetchall()
            if rows:
                c.execute(
                    self._sql["job_history_delete"],
                    {
                        "ids": [r[0] for r in rows],
                        "queues": [r[1] for r in rows],
                        "keys": [r[2] for r in rows],
                    },
                )
        return len(rows)


class _PgListener:
    """LISTEN on the ledger's channel over a dedicated connection; reconnects when it breaks.

    While the database is down (or, during a failover, only a standby answers), reconnecting is
    retried with exponential backoff — from 0.1 s up to 5 s, jittered — rather than as fast as
    the connection attempts fail.
    """

    _MAX_BACKOFF = 5.0

    def __init__(self, backend: PostgresBackend, queues: set[str]):
        self._backend = backend
        self._queues = queues
        self._conn: psycopg.Connection[Any] | None = None
        self._failures = 0
        self._retry_at = 0.0

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(
            self._backend.url.conninfo, autocommit=True, connect_timeout=_CONNECT_TIMEOUT
        )
        conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(self._backend.channel)))
        return conn

    def _failed(self) -> None:
        self.close()
        self._failures += 1
        delay = min(self._MAX_BACKOFF, 0.1 * 2 ** (self._failures - 1))
        self._retry_at = time.monotonic() + delay * (0.5 + random.random() / 2)

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a notification about one of our queues.

        Returns True on a wake-up, or after a connection broke or was made again (a
        notification may have been missed in between)."""
        if self._conn is None or self._conn.closed:
            pause = self._retry_at - time.monotonic()
            if pause > 0:
                time.sleep(min(pause, timeout))
                return False
            try:
                self._conn = self._connect()
            except psycopg.Error:
                self._failed()
                return False
            self._failures = 0
            return True
        try:
            for note in self._conn.notifies(timeout=timeout):
                if note.payload in self._queues:
                    return True
            return False
        except psycopg.Error:
            self._failed()
            return True

    def close(self) -> None:
        if self._conn is not None:
            with suppress(psycopg.Error):
                self._conn.close()
            self._conn = None


def _consistent(jobs: Sequence[NewJob]) -> bool:
    """False when one key appears twice in the batch with another task or payload (a conflict
    the database cannot see within one statement)."""
    seen: dict[tuple[str, str], tuple[str, str]] = {}
    for j in jobs:
        first = seen.setdefault((j.queue, j.key), (j.task, j.payload_json))
        if first != (j.task, j.payload_json):
            return False
    return True
