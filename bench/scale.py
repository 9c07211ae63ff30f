"""Claim latency as the table grows: 10k, 100k and 1M pending jobs, and 10k pending beside 1M
done jobs waiting for pruning. The claim walks the partial index of due pending jobs, so its
cost must not grow with the table; on PostgreSQL the plan is also checked under
``plan_cache_mode = force_generic_plan`` (what a prepared statement may end up with)."""

from __future__ import annotations

import sqlite3
import statistics
import time
from typing import Any

import psycopg

from jobledger import Ledger
from jobledger._records import Lease

from .harness import percentile

_PG_FILL = """
INSERT INTO jobledger_jobs (queue, key, task, payload, state, priority, run_at, attempts,
    max_attempts, attempt_limit, lease_seconds, created_at, updated_at, finished_at)
SELECT 'bench', %(prefix)s || g, 'noop', '{"n": 0}', %(state)s, 0,
       now() - interval '1 day' + g * interval '1 millisecond', %(attempts)s, 3, 3, 60,
       now(), now(), CASE WHEN %(state)s = 'done' THEN now() END
FROM generate_series(1, %(n)s) AS g
"""

_SQLITE_FILL = """
WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < :n)
INSERT INTO jobledger_jobs (queue, key, task, payload, state, priority, run_at, attempts,
    max_attempts, attempt_limit, lease_seconds, created_at, updated_at, finished_at)
SELECT 'bench', :prefix || i, 'noop', '{"n":0}', :state, 0, :t - 86400 + i / 1000.0,
       :attempts, 3, 3, 60, :t, :t, CASE WHEN :state = 'done' THEN :t END
FROM g
"""


def fill(dsn: str, pending: int, done: int) -> None:
    Ledger(dsn).migrate()
    if dsn.startswith("sqlite"):
        conn = sqlite3.connect(dsn[len("sqlite:///") :], isolation_level=None)
        conn.execute("BEGIN")
        for prefix, state, n, attempts in (("p", "pending", pending, 0), ("d", "done", done, 1)):
            if n:
                conn.execute(
                    _SQLITE_FILL,
                    {
                        "n": n,
                        "prefix": prefix,
                        "state": state,
                        "t": time.time(),
                        "attempts": attempts,
                    },
                )
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
        conn.close()
        return
    with psycopg.connect(dsn, autocommit=True) as conn:
        for prefix, state, n, attempts in (("p", "pending", pending, 0), ("d", "done", done, 1)):
            if n:
                conn.execute(
                    _PG_FILL, {"n": n, "prefix": prefix, "state": state, "attempts": attempts}
                )
        conn.execute("VACUUM ANALYZE jobledger_jobs")


def claim_latency(dsn: str, claims: int, batch: int) -> dict[str, Any]:
    """Claim ``batch`` jobs ``claims`` times (completing each batch), timing the claims."""
    ledger = Ledger(dsn)
    backend = ledger.backend
    backend.jobs.complete(
        [Lease(j.id, j.lease_token, j.attempt) for j in backend.jobs.claim(["bench"], "w", batch)]
    )  # a warm connection: the first claim on a new one pays for planning
    times = []
    for _ in range(claims):
        started = time.perf_counter()
        jobs = backend.jobs.claim(["bench"], "w", batch)
        times.append((time.perf_counter() - started) * 1000)
        backend.jobs.complete([Lease(j.id, j.lease_token, j.attempt) for j in jobs])
    result: dict[str, Any] = {
        "claim_p50_ms": percentile(times, 50),
        "claim_p95_ms": percentile(times, 95),
        "claim_mean_ms": statistics.fmean(times),
    }
    if not dsn.startswith("sqlite"):
        result["generic_plan_uses_index"] = _generic_plan_uses_index(dsn, backend, batch)
    ledger.close()
    return result


def _generic_plan_uses_index(dsn: str, backend: Any, batch: int) -> bool:
    claim = backend.db.statement("job_claim", batch)
    with psycopg.connect(dsn) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                "EXPLAIN " + claim,
                {
                    "queue_0": "bench",
                    "worker": "w",
                    "now": None,
                    "lease_seconds": None,
                    "claim": "0" * 32,
                },
            )
        )
        conn.rollback()
    return "jobledger_jobs_due" in plan and "Seq Scan on jobledger_jobs" not in plan
