"""The enqueue's key checks look keys up in the unique indexes, with a custom and with a generic
plan, and never read the whole jobs table (PostgreSQL)."""

from __future__ import annotations

import psycopg

from jobledger import Ledger
from jobledger._records import NewJob
from jobledger.backends.postgres.newjob import new_job_arrays, new_job_values


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
    schema, url = pg.new_schema_url()
    try:
        ledger = Ledger(url)
        ledger.task(lambda ctx, n: None, name="t", queue="q")
        ledger.enqueue_many("t", [{"payload": {"n": n}, "key": f"k{n}"} for n in range(20_000)])
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
        ledger.close()
    finally:
        pg.drop_schema(schema)
