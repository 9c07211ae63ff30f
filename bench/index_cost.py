"""What each index and trigger of the jobs table costs a claim and a completion on PostgreSQL.

    python -m bench.index_cost                  # 60,000 jobs, 3 rounds, every variant
    python -m bench.index_cost --jobs 2000 --rounds 1 --variants migrated,unique_key

Every claim and every completion rewrites its job's row, and the rewrite is never HOT (``state``
is in the predicate of every partial index of the jobs table): each one puts a new entry in
every index whose condition the new row meets. This bench measures what that costs, index by
index, so that a redesign can be judged by the figure it would remove.

Each variant is a fresh database, migrated, then changed by the variant's statements (one index
or trigger taken away); it is filled by ``COPY`` with ``--jobs`` no-op jobs whose keys look like
business keys (``<customer>:<week>``, in an order unrelated to the ids, as real keys are),
vacuumed and analyzed; then one connection claims ``--batch`` jobs at a time with jobledger's
own claim and completes them with its own completion, as the floor does (bench/floor.py), until
none is left. Per job it reports the server process's CPU (user + system, from ``/proc``: the
server must run on this host, else the CPU columns are empty) for the claims and for the
completions, the WAL written and the wall time. The variants run in turn, round after round, so
that each sees the machine within seconds of the others; the table shows medians.

A diagnostic, not a configuration: without the unique key jobledger could not keep one job per
key, and without the other indexes its claim and rescue would read the whole table. One variant
is a sketch of a redesign rather than a removal: ``keys_table`` keeps the keys unique in a table
of their own, written once per job by a statement trigger on the jobs table's inserts, so that
a claim or a completion no longer writes an entry of the key (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import psycopg

from jobledger import Ledger
from jobledger._records import NewJob

from .floor import PUBLIC_TABLES, _pg_sql, claim_params, complete_claimed, copy_batch
from .harness import _cpu_seconds, fresh_database

#: Each variant: what it is, and the statements that make it from the migrated schema.
VARIANTS: dict[str, tuple[str, list[str]]] = {
    "migrated": ("the jobs table as migrated", []),
    "unique_key": (
        "without the unique key (queue, key)",
        ["ALTER TABLE jobledger_jobs DROP CONSTRAINT jobledger_jobs_queue_key"],
    ),
    "plain_key": (
        "the key (queue, key) as a plain index, not unique",
        [
            "ALTER TABLE jobledger_jobs DROP CONSTRAINT jobledger_jobs_queue_key",
            "CREATE INDEX jobledger_jobs_queue_key ON jobledger_jobs (queue, key)",
        ],
    ),
    "key_no_dedup": (
        "the unique key without deduplication (deduplicate_items = off)",
        ["ALTER INDEX jobledger_jobs_queue_key SET (deduplicate_items = off)"],
    ),
    "leased": (
        "without the indexes of leased jobs",
        ["DROP INDEX jobledger_jobs_leased", "DROP INDEX jobledger_jobs_group_leased"],
    ),
    "triggers": (
        "without the two triggers on a change of state",
        [
            "DROP TRIGGER jobledger_group_returns ON jobledger_jobs",
            "DROP TRIGGER jobledger_outbox_pending ON jobledger_jobs",
        ],
    ),
    "keys_table": (
        "the unique key in a table of its own, written by a trigger",
        [
            "ALTER TABLE jobledger_jobs DROP CONSTRAINT jobledger_jobs_queue_key",
            "CREATE TABLE jobledger_keys (queue text, key text, job_id bigint NOT NULL,"
            " PRIMARY KEY (queue, key))",
            "CREATE FUNCTION jobledger_keys_taken() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN INSERT INTO jobledger_keys SELECT queue, key, id FROM inserted;"
            " RETURN NULL; END $$",
            "CREATE TRIGGER jobledger_keys_taken AFTER INSERT ON jobledger_jobs"
            " REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT"
            " EXECUTE FUNCTION jobledger_keys_taken()",
        ],
    ),
}


def _wal_lsn(conn: psycopg.Connection[Any]) -> str:
    """The server's WAL position now."""
    ((lsn,),) = conn.execute("SELECT pg_current_wal_lsn()::text").fetchall()
    return str(lsn)


def _wal_since(conn: psycopg.Connection[Any], lsn: str) -> float:
    """Bytes of WAL the server wrote since ``lsn``."""
    ((written,),) = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (lsn,))
    return float(written)


def _key(i: int) -> str:
    """A business-like key: a customer and a week, not in the order of the ids."""
    return f"{(i * 7919) % 1_000_003}:2026-W{i % 52 + 1:02d}"


def measure(dsn: str, statements: list[str], jobs: int, batch: int) -> dict[str, Any]:
    """Fill and drain one database changed by ``statements``; figures per job."""
    Ledger(dsn).migrate()
    sql = _pg_sql(PUBLIC_TABLES)
    claim = sql["job_claim"].replace("{limit}", str(batch))
    claim = claim.replace("{queue_rows}", "(VALUES (%(queue_0)s::text))")
    complete = sql["job_complete"]
    payload = json.dumps({"n": 0})
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as conn:
        for statement in statements:
            conn.execute(statement)
        conn.execute("SET TIME ZONE 'UTC'")
        pid = conn.info.backend_pid
        # The server process's CPU is read from /proc: only where it runs on this host.
        measured = Path(f"/proc/{pid}/stat").exists()
        wal_start = _wal_lsn(conn)
        fill_cpu = _cpu_seconds(pid)
        for start in range(0, jobs, 1000):
            copy_batch(
                conn,
                sql,
                [
                    NewJob("bench", _key(i), "noop", payload, 0, None, 3, 60.0, None)
                    for i in range(start, min(jobs, start + 1000))
                ],
            )
        fill_cpu = _cpu_seconds(pid) - fill_cpu
        fill_wal = _wal_since(conn, wal_start)
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")  # every variant starts its drain without dirty pages
        params = claim_params("index_cost")
        wal_start = _wal_lsn(conn)
        cpu = {"claim": 0.0, "complete": 0.0}
        done = 0
        started = time.perf_counter()
        while True:
            before = _cpu_seconds(pid)
            rows = conn.execute(claim, params, prepare=True).fetchall()
            after = _cpu_seconds(pid)
            cpu["claim"] += after - before
            if not rows:
                break
            complete_claimed(conn, complete, rows)
            cpu["complete"] += _cpu_seconds(pid) - after
            done += len(rows)
        wall = time.perf_counter() - started
        wal = _wal_since(conn, wal_start)
    per_job = 1e6 / max(1, done)
    return {
        "jobs": done,
        "enqueue_cpu_us": fill_cpu * 1e6 / max(1, jobs) if measured else None,
        "enqueue_wal_bytes": fill_wal / max(1, jobs),
        "claim_cpu_us": cpu["claim"] * per_job if measured else None,
        "complete_cpu_us": cpu["complete"] * per_job if measured else None,
        "cpu_us": (cpu["claim"] + cpu["complete"]) * per_job if measured else None,
        "wal_bytes": wal / max(1, done),
        "wall_us": wall * per_job,
    }


def _median(rounds: list[dict[str, Any]], name: str) -> float | None:
    values = [r[name] for r in rounds if r[name] is not None]
    return statistics.median(values) if values else None


def _cell(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.index_cost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=60_000, help="jobs drained per variant")
    parser.add_argument("--batch", type=int, default=1000, help="jobs per claim")
    parser.add_argument("--rounds", type=int, default=3, help="times each variant runs")
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma-separated, from: {', '.join(VARIANTS)}",
    )
    parser.add_argument("--out", help="write every round's figures here (JSON)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    rounds: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for r in range(args.rounds):
        for name in names:
            with fresh_database("postgres") as dsn:
                figures = measure(dsn, VARIANTS[name][1], args.jobs, args.batch)
            rounds[name].append(figures)
            print(f"[round {r + 1}] {name}: {json.dumps(figures)}", flush=True)
    load = os.getloadavg()[0]
    print(
        f"\n{args.jobs:,} jobs enqueued by COPY in batches of 1,000, then claimed {args.batch:,} "
        f"at a time and completed, from one connection; server CPU and WAL per job, medians of "
        f"{args.rounds} rounds (load average {load:.2f} at the end)\n"
    )
    header = (
        "variant",
        "enqueue CPU µs/job",
        "WAL B/job",
        "claim + completion CPU µs/job",
        "WAL B/job",
        "wall µs/job",
    )
    print(
        f"{header[0]:<60} {header[1]:>18} {header[2]:>10} {header[3]:>30} {header[4]:>10}"
        f" {header[5]:>12}"
    )
    for name in names:
        rows = rounds[name]
        split = (
            f"{_cell(_median(rows, 'cpu_us'))} ({_cell(_median(rows, 'claim_cpu_us'))} + "
            f"{_cell(_median(rows, 'complete_cpu_us'))})"
        )
        print(
            f"{VARIANTS[name][0]:<60} {_cell(_median(rows, 'enqueue_cpu_us')):>18} "
            f"{_cell(_median(rows, 'enqueue_wal_bytes'), 0):>10} {split:>30} "
            f"{_cell(_median(rows, 'wal_bytes'), 0):>10} {_cell(_median(rows, 'wall_us')):>12}"
        )
    if args.out:
        Path(args.out).write_text(json.dumps({"rounds": rounds, "load": load}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
