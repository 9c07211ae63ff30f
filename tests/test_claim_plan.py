"""The claim query walks its index, with a custom and with a generic plan (PostgreSQL)."""

from __future__ import annotations

import psycopg

from jobledger import Ledger


def test_claim_uses_the_due_index_even_with_a_generic_plan(pg):
    schema, url = pg.new_schema_url()
    try:
        ledger = Ledger(url)
        ledger.task(lambda ctx, n: None, name="t", queue="q")
        ledger.enqueue_many("t", [{"payload": {"n": n}, "key": f"k{n}"} for n in range(20_000)])
        backend = ledger.backend
        claim = backend._sql["job_claim"].replace("{limit}", "100")
        with psycopg.connect(pg.url) as conn:
            conn.execute(f"ANALYZE {schema}.jobledger_jobs")
            for mode in ("force_custom_plan", "force_generic_plan"):
                conn.execute(f"SET plan_cache_mode = {mode}")
                plan = "\n".join(
                    r[0]
                    for r in conn.execute(
                        "EXPLAIN " + claim,
                        {"queues": ["q"], "worker": "w", "now": None, "lease_seconds": None},
                    )
                )
                assert "jobledger_jobs_due" in plan, plan
                assert "Seq Scan on jobledger_jobs" not in plan, plan
                conn.rollback()
        ledger.close()
    finally:
        pg.drop_schema(schema)
