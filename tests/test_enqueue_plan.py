"""The enqueue's key checks look keys up in the unique indexes, with a custom and with a generic
plan, and never read the whole jobs table (PostgreSQL)."""

from __future__ import annotations

import psycopg

from jobledger import Ledger
from jobledger._records import NewJob
from jobledger.backends.postgres.newjob import new_job_arrays, new_job_values

from .support.postgres import ledger_with_jobs


def _job(n: int) -> NewJob:
    return NewJob(
        queue="q",
        key=f"new{n}",
        task="t",
        payload_json='{"n": 1}',
        priority=0,
        run_at=None,
        max_attempts=3,
        lease_seconds=60.0,
        correlation_id="c",
    )


def test_enqueue_checks_keys_by_index_even_with_a_generic_plan(pg):
    with ledger_with_jobs(pg, 20_000) as (ledger, schema):
        backend = ledger.backend
        extra = {"channel": backend.db.channel, "now": None}
        statements = {
            "job_insert_one": new_job_values(_job(0)) | extra,
            "job_insert_fresh": new_job_arrays([_job(n) for n in range(1000)]) | extra,
        }
        with psycopg.connect(pg.url) as conn:
            conn.execute(f"ANALYZE {schema}.jobledger_jobs")
            for mode in ("force_custom_plan", "force_generic_plan"):
                conn.execute(f"SET plan_cache_mode = {mode}")
                for name, params in statements.items():
                    sql = backend.db.sql[name]
                    plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, params))
                    # A hashed subplan over the jobs table reads every row for every batch.
                    assert "Seq Scan on jobledger_jobs" not in plan, (name, mode, plan)
                    assert "hashed SubPlan" not in plan, (name, mode, plan)
                    assert "jobledger_jobs_queue_key" in plan, (name, mode, plan)
                conn.rollback()


def test_a_copy_takes_its_ids_without_looking_the_sequence_up_for_each(pg):
    """``job_copy_start`` names the jobs' sequence once per statement: a plan that calls
    ``pg_get_serial_sequence`` inside ``nextval`` looks it up in the catalog for every id (3-4 ms
    a batch of 1,000 instead of 0.5)."""
    schema, url = pg.new_schema_url()
    try:
        ledger = Ledger(url)
        ledger.migrate()
        backend = ledger.backend
        with psycopg.connect(pg.url) as conn:
            sql = backend.db.sql["job_copy_start"]
            rows = conn.execute("EXPLAIN VERBOSE " + sql, {"now": None, "n": 1000})
            plan = "\n".join(r[0] for r in rows)
            calls = [line for line in plan.splitlines() if "nextval(" in line]
            assert calls, plan
            assert not any("pg_get_serial_sequence" in line for line in calls), plan
        ledger.close()
    finally:
        pg.drop_schema(schema)
