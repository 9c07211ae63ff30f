"""The floor: what the database itself does with jobledger's own SQL, sent as bare statements
from one connection in batches (no queue library, no worker, no threads).

Enqueue as ``enqueue_many`` does with batches of 1,000 new keys (PostgreSQL: a ``COPY`` into the
jobs table in a transaction, after its ids, then the tombstone check; SQLite: one
``INSERT`` of 250 rows a statement in one transaction), then drain: claim a batch
(each attempt begun), complete it (fenced by token), until nothing
is left.

Before that, the floor of the single enqueue: a bare ``INSERT`` of one job row per call in
autocommit, into the same table (its indexes and its outbox trigger), with none of the key's
checks, sent the fastest way the driver has (PostgreSQL: a prepared statement through libpq's
``PQexecPrepared``, as ``ledger.enqueue`` sends its own). On PostgreSQL, in alternating rounds
of 100 with it: jobledger's single-enqueue statement alone, and ``ledger.enqueue`` itself.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from jobledger import Ledger
from jobledger._records import NewJob
from jobledger.backends.postgres.newjob import (
    NEW_JOB_SQL,
    new_job_copy,
    new_job_values,
    text_array,
)
from jobledger.backends.postgres.prepared import PreparedStatement
from jobledger.backends.sqlfiles import queries

from .harness import percentile

#: The tables jobledger's statements name, as migrated into the ``public`` schema.
PUBLIC_TABLES = {
    "jobs": "public.jobledger_jobs",
    "attempts": "public.jobledger_attempts",
    "events": "public.jobledger_events",
    "effects": "public.jobledger_effects",
    "tombstones": "public.jobledger_tombstones",
}


def _pg_sql(schema_tables: dict[str, str]) -> dict[str, str]:
    named = {}
    for name, text in queries("postgres").items():
        for placeholder, columns in NEW_JOB_SQL.items():
            text = text.replace("{" + placeholder + "}", columns)
        for placeholder, table in schema_tables.items():
            text = text.replace("{" + placeholder + "}", table)
        # The completion tells waiters for results only while one listens (none does here).
        text = text.replace("{finish_channel}", "'jobledger_public_done'")
        text = text.replace(
            "{waiters_lock}", "hashtextextended('jobledger:public:result-waiters', 0)"
        )
        named[name] = text.replace("{now}", "COALESCE(%(now)s::timestamptz, now())")
    return named


#: One job row, nothing checked: the single enqueue's floor.
_BARE_INSERT = """
INSERT INTO {jobs} (queue, key, task, payload, state, priority, run_at, attempts, max_attempts,
    attempt_limit, lease_seconds, created_at, updated_at)
VALUES (%(queue)s, %(key)s, 'noop', %(payload)s{json}, 'pending', 0, {now}, 0, 3, 3, 60, {now},
    {now})
RETURNING id
"""


def idle_floor_postgres(dsn: str, jobs: int, interval: float = 0.05) -> dict[str, float]:
    """The floor of the idle enqueue→start: one job every ``interval`` seconds, each a bare
    ``INSERT`` whose statement also sends the ``NOTIFY`` (delivered at its commit), and a
    listener that claims one job with jobledger's own claim statement on another connection
    the moment the notification arrives — no pool, no thread hand-over, no handler. Returns
    the p50 and p95 of call-start → claim-returned, in milliseconds: the two commits and the
    wake-ups that any PostgreSQL queue that runs a job only after its claim commits pays."""
    Ledger(dsn).migrate()
    channel = "jobledger_idle_floor"
    insert = PreparedStatement(
        "bench_idle_insert",
        "WITH n AS ("
        + _BARE_INSERT.format(jobs="public.jobledger_jobs", json="::jsonb", now="now()")
        + ") SELECT pg_notify(%(channel)s, %(sent)s) FROM n",
    )
    sql = _pg_sql({"jobs": "public.jobledger_jobs", "attempts": "public.jobledger_attempts"})
    claim = sql["job_claim"].replace("{limit}", "1")
    claim = claim.replace("{queue_rows}", "(VALUES (%(queue_0)s::text))")
    params = {"queue_0": "idle", "worker": "floor", "now": None, "lease_seconds": None}
    params["claim"] = "0" * 32
    latencies: list[float] = []
    with (
        psycopg.connect(dsn, autocommit=True) as producer,
        psycopg.connect(dsn, autocommit=True) as listener,
        psycopg.connect(dsn, autocommit=True) as claimer,
    ):
        listener.execute(f"LISTEN {channel}")
        claimer.execute(claim, params, prepare=True)  # prepared and planned before the clock
        claimer.execute(claim, params, prepare=True)

        def listen() -> None:
            for note in listener.notifies(stop_after=jobs, timeout=max(10.0, jobs)):
                rows = claimer.execute(claim, params, prepare=True).fetchall()
                if rows:
                    latencies.append(time.time() - float(note.payload))

        thread = threading.Thread(target=listen)
        thread.start()
        for i in range(jobs):
            time.sleep(interval)
            sent = repr(time.time())
            insert.rows(
                producer, {"queue": "idle", "key": f"i{i}", "payload": "{}", "channel": channel,
                           "sent": sent},
            )  # fmt: skip
        thread.join()
    ms = [x * 1000 for x in latencies]
    return {"idle_p50_ms": percentile(ms, 50), "idle_p95_ms": percentile(ms, 95)}


def floor_postgres(dsn: str, jobs: int, batch: int, single: int = 2_000) -> dict[str, float]:
    Ledger(dsn).migrate()
    bare = PreparedStatement(
        "bench_bare_insert",
        _BARE_INSERT.format(jobs="public.jobledger_jobs", json="::jsonb", now="now()"),
    )
    sql = _pg_sql(PUBLIC_TABLES)
    single_per_s, statement_per_s, call_per_s = _single_postgres(dsn, sql, bare, single)
    # One queue, as PostgresDatabase.statement writes the claim for one.
    claim = sql["job_claim"].replace("{limit}", str(batch))
    complete = sql["job_complete"]
    claim = claim.replace("{queue_rows}", "(VALUES (%(queue_0)s::text))")
    payload = json.dumps({"n": 0})
    # As the backend sends them: never prepared but the claim (a generic plan of a statement
    # that carries arrays is quadratic in their length; see PostgresBackend._configure).
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        started = time.perf_counter()
        for start in range(0, jobs, 1000):
            copy_batch(
                conn,
                sql,
                [
                    NewJob("bench", f"k{i}", "noop", payload, 0, None, 3, 60.0, None)
                    for i in range(start, min(jobs, start + 1000))
                ],
            )
        inserted = time.perf_counter() - started
        params = claim_params("floor")
        done = 0
        started = time.perf_counter()
        while True:
            rows = conn.execute(claim, params, prepare=True).fetchall()
            if not rows:
                break
            complete_claimed(conn, complete, rows)
            done += len(rows)
        drained = time.perf_counter() - started
    return {
        "enqueue_single_per_s": single_per_s,
        "enqueue_statement_per_s": statement_per_s,
        "enqueue_call_per_s": call_per_s,
        "enqueue_bulk_per_s": jobs / inserted,
        "drain_per_s": done / drained,
    }


def copy_batch(conn: psycopg.Connection[Any], sql: dict[str, str], batch: list[NewJob]) -> None:
    """One batch of new jobs of queue ``bench`` written as ``enqueue_many`` writes a large one
    on the database's clock (``PostgresJobs._copy_fresh``): the ids and the insert's time, the
    ``COPY`` (the created and updated times left to their defaults), the check of the
    tombstones and the ``NOTIFY``, in one transaction."""
    with conn.transaction():
        ((clock, ids),) = conn.execute(
            sql["job_copy_start"], {"now": None, "n": len(batch)}
        ).fetchall()
        with conn.cursor().copy(sql["job_copy_on_server_clock"]) as copy:
            copy.write(new_job_copy(batch, ids[1:-1].split(","), clock, with_times=False))
        keys = {"queue": text_array(["bench"] * len(batch))}
        keys["key"] = text_array([j.key for j in batch])
        conn.execute(
            sql["job_copy_end"],
            keys | {"queues": ["bench"], "channel": "bench", "now": None},
        ).fetchall()


def claim_params(worker: str) -> dict[str, Any]:
    """The parameters of ``job_claim`` for queue ``bench`` (the database's clock, the jobs'
    own lease)."""
    return {
        "queue_0": "bench",
        "worker": worker,
        "now": None,
        "lease_seconds": None,
        "claim": "0" * 32,
    }


def complete_claimed(
    conn: psycopg.Connection[Any], complete: str, rows: list[tuple[Any, ...]]
) -> None:
    """Complete the jobs of a claim's ``rows`` (id first, token seventh) with ``complete``
    (``job_complete``), fenced by their tokens, as a worker's completer does."""
    conn.execute(
        complete,
        {
            "ids": "{" + ",".join([str(r[0]) for r in rows]) + "}",
            "tokens": "{" + ",".join([r[6] for r in rows]) + "}",
            "now": None,
            "tell": True,
        },
    )


def _single_postgres(
    dsn: str, sql: dict[str, str], bare: PreparedStatement, single: int, rounds: int = 20
) -> tuple[float, float, float]:
    """Calls a second, one job each, from one process: the bare ``INSERT``, jobledger's own
    single-enqueue statement (``job_insert_one``: the key and tombstone checks, the ``NOTIFY``)
    sent through the same prepared call on the same connection, and ``ledger.enqueue`` itself,
    in alternating rounds — what the single enqueue's statement and its whole call cost against
    the bare ``INSERT`` in the same minutes (a disk whose commits swing from one minute to the
    next moves all three together)."""
    one = PreparedStatement("bench_insert_one", sql["job_insert_one"])
    job = NewJob("one", "", "noop", '{"n": 0}', 0, None, 3, 60.0, "c" * 32)
    params = new_job_values(job) | {"channel": "bench", "now": None}
    ledger = Ledger(dsn)
    ledger.task(_noop, name="noop", queue="call")
    ledger.enqueue("noop", {"n": 0}, key="warm")  # the pool opened, the statement prepared
    per_round = max(1, single // rounds)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            # Each series, one call: (the round, the call's number in it) → a new key.
            series: dict[str, Callable[[int, int], object]] = {
                "bare": lambda r, i: bare.rows(
                    conn, {"queue": "bare", "key": f"s{r}-{i}", "payload": '{"n": 0}'}
                ),
                "statement": lambda r, i: one.rows(conn, params | {"key": f"o{r}-{i}"}),
                "call": lambda r, i: ledger.enqueue("noop", {"n": 0}, key=f"e{r}-{i}"),
            }
            spent = dict.fromkeys(series, 0.0)
            for r in range(rounds):
                for name, call in series.items():
                    started = time.perf_counter()
                    for i in range(per_round):
                        call(r, i)
                    spent[name] += time.perf_counter() - started
    finally:
        ledger.close()
    calls = per_round * rounds
    return calls / spent["bare"], calls / spent["statement"], calls / spent["call"]


def _noop(ctx: Any, n: int) -> None:
    """The task ``ledger.enqueue`` names in the single-enqueue floor (never run)."""


def _rows_insert(sql: dict[str, str], rows: int) -> str:
    """``job_insert_rows`` for ``rows`` jobs without a group or a trace context, as
    ``enqueue_many`` sends it: 9 values each (after the insert's time), then NULL, NULL."""
    row = "(" + ", ".join("?" * 9) + ", NULL, NULL)"
    return sql["job_insert_rows"].replace("{rows}", ", ".join([row] * rows))


def floor_sqlite(dsn: str, jobs: int, batch: int, single: int = 2_000) -> dict[str, float]:
    Ledger(dsn).migrate()
    sql = queries("sqlite")
    conn = sqlite3.connect(dsn[len("sqlite:///") :], isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    payload = json.dumps({"n": 0})
    bare = _BARE_INSERT.format(jobs="jobledger_jobs", json="", now="%(now)s")
    bare = bare.replace("%(", ":").replace(")s", "")
    started = time.perf_counter()
    for i in range(single):
        conn.execute(
            bare, {"queue": "bare", "key": f"s{i}", "payload": payload, "now": time.time()}
        )
    single_per_s = single / (time.perf_counter() - started)
    started = time.perf_counter()
    for start in range(0, jobs, 1000):
        now = time.time()
        conn.execute("BEGIN IMMEDIATE")
        keys = [f"k{i}" for i in range(start, min(jobs, start + 1000))]
        for first in range(0, len(keys), 250):
            chunk = keys[first : first + 250]
            values: list[Any] = [now]
            for key in chunk:
                values += ("bench", key, "noop", payload, 0, now, 3, 60.0, f"corr-{key}")
            conn.execute(_rows_insert(sql, len(chunk)), values)
        conn.execute("COMMIT")
    inserted = time.perf_counter() - started
    claim = sql["job_claim"].replace("{queues}", ":q0").replace("{limit}", str(batch))
    done = 0
    started = time.perf_counter()
    while True:
        now = time.time()
        conn.execute("BEGIN IMMEDIATE")
        rows = conn.execute(
            claim, {"q0": "bench", "now": now, "worker": "floor", "lease_seconds": None}
        ).fetchall()
        conn.execute("COMMIT")
        if not rows:
            break
        now = time.time()
        conn.execute("BEGIN IMMEDIATE")
        # As the backend completes: the jobs marked done fenced by their (id, token) pairs in
        # the statement, which returns those it completed.
        for first in range(0, len(rows), 500):
            part = rows[first : first + 500]
            pairs: list[Any] = [now]
            for r in part:
                pairs += (r[0], r[6])
            text = sql["job_complete"].replace("{leases}", ", ".join(["(?, ?)"] * len(part)))
            conn.execute(text, pairs).fetchall()
        conn.execute("COMMIT")
        done += len(rows)
    drained = time.perf_counter() - started
    conn.close()
    return {
        "enqueue_single_per_s": single_per_s,
        "enqueue_bulk_per_s": jobs / inserted,
        "drain_per_s": done / drained,
    }
