"""Writes that carry arrays of leases (complete, heartbeat, fail) cost time linear in the batch
on PostgreSQL: they are planned for the arrays they carry, never with a generic plan.

A generic plan cannot know an array's length. For ``job_complete`` PostgreSQL's generic plan
rescans the (id, token) pairs for every leased row: 500 leases compare 250,000 pairs, about
four times the cost of the rest of the drain. psycopg prepares a statement after five runs, and
PostgreSQL may switch a prepared statement to its generic plan after five more."""

from __future__ import annotations

import psycopg

from jobledger._records import Failure, Lease

from .support.postgres import ledger_with_jobs, plan_nodes

BATCH = 500


def _leases(jobs) -> list[Lease]:  # type: ignore[no-untyped-def]
    return [Lease(j.id, j.lease_token, j.attempt) for j in jobs]


def _lease_writes(backend, leases: list[Lease]) -> dict[str, dict]:  # type: ignore[no-untyped-def,type-arg]
    """Each write fenced by a lease, with its parameters for ``leases``."""
    fence = backend.jobs._lease_params(leases) | {"now": None}
    failed = fence | {
        "retry": [True] * len(leases),
        "run_at": [None] * len(leases),
        "error_class": ["E"] * len(leases),
        "message": ["m"] * len(leases),
        "traceback": ["tb"] * len(leases),
        "timed_out": [False] * len(leases),
    }
    one = {"job_id": leases[0].job_id, "token": leases[0].token, "now": None}
    effect = one | {"queue": "q", "key": "k0", "effect": "e", "detail": None}
    results = [f'{{"n": {n}}}' for n in range(len(leases))]
    statements = {
        "job_complete": fence | {"tell": True},
        "job_complete_results": fence | {"tell": True, "results": results},
        "job_heartbeat": fence | {"lease_seconds": None},
        "job_fail": failed,
        "job_release": fence,
        "effect_holder": one,
        "effect_record": effect,
    }
    return statements


def _analyzed(conn, backend, statements):  # type: ignore[no-untyped-def]
    """Each statement's name and its plan as run (``EXPLAIN (ANALYZE, FORMAT JSON)``), each
    rolled back: EXPLAIN ANALYZE writes, and the leases stay as they were."""
    for name, params in statements.items():
        explain = "EXPLAIN (ANALYZE, FORMAT JSON) " + backend.db.sql[name]
        [[[plan]]] = conn.execute(explain, params).fetchall()
        conn.rollback()
        yield name, plan


def test_lease_writes_are_never_prepared_on_the_backends_connections(pg):
    with ledger_with_jobs(pg, 12 * 3 * 20) as (ledger, schema):
        backend = ledger.backend
        # Twelve rounds of each write: well past psycopg's threshold and PostgreSQL's five
        # custom plans before it considers the generic one.
        for _ in range(12):
            jobs = backend.jobs.claim(["q"], "w", 20)
            backend.jobs.heartbeat(_leases(jobs))
            backend.jobs.complete(_leases(jobs))
            failing = backend.jobs.claim(["q"], "w", 20)
            backend.jobs.fail(
                [Failure(lease, False, None, "E", "m", "tb") for lease in _leases(failing)]
            )
            released = backend.jobs.claim(["q"], "w", 20)
            backend.jobs.release(_leases(released))
        prepared: list[str] = []
        for pool in (backend.db._pool, backend.db._quick_pool):
            with pool.connection() as conn:
                prepared += [
                    r[0] for r in conn.execute("SELECT statement FROM pg_prepared_statements")
                ]
        # The claims (job_claim, job_claim_after: "WITH picked AS …") are prepared on purpose:
        # their generic plans are checked in test_claim_plan.py. Every other statement that
        # carries arrays of leases is a lease write.
        claims = [s for s in prepared if s.lstrip().startswith("WITH picked AS")]
        assert claims, "the claim is prepared (this test would not see a prepared statement)"
        lease_writes = [
            s for s in prepared if "unnest(" in s and "lease_token" in s and s not in claims
        ]
        assert lease_writes == [], lease_writes


def test_a_completion_of_many_leases_compares_each_lease_once(pg):
    with ledger_with_jobs(pg, 5000) as (ledger, schema):
        backend = ledger.backend
        for _ in range(3):
            backend.jobs.complete(_leases(backend.jobs.claim(["q"], "w", BATCH)))
        writes = _lease_writes(backend, _leases(backend.jobs.claim(["q"], "w", BATCH)))
        # The completion of a batch with results carries one more array, bound as a list.
        completions = {name: writes[name] for name in ("job_complete", "job_complete_results")}
        with psycopg.connect(pg.url) as conn:
            conn.execute("SET TIME ZONE 'UTC'")
            for name, plan in _analyzed(conn, backend, completions):
                removed = [
                    node["Rows Removed by Join Filter"]
                    for node in plan_nodes(plan["Plan"])
                    if "Rows Removed by Join Filter" in node
                ]
                assert not any(removed), (name, plan)


def test_writes_fenced_by_a_lease_look_their_jobs_up_by_primary_key_whatever_the_statistics(pg):
    """Statistics taken while no job was leased make the index of leased jobs look empty, and
    the leased jobs few. A write fenced by a lease ("id = … AND state = 'leased'") must still
    fetch its jobs by primary key, each lease's once: read through ``jobledger_jobs_leased``,
    each write walked every leased job, its cost growing with the number of jobs leased
    anywhere (014); and a batch read first by "id = ANY(ids)" with the pairs rescanned for each
    of its rows compared 250,000 pairs for 500 leases. The rescuer, which asks about expiry,
    still reads that index."""
    # Enough jobs that reading the table whole is not the cheap way to any batch.
    with ledger_with_jobs(pg, 40_000) as (ledger, schema):
        backend = ledger.backend
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute(f"ANALYZE {schema}.jobledger_jobs")  # while nothing is leased
        for _ in range(6):
            jobs = backend.jobs.claim(["q"], "w", BATCH)
        statements = _lease_writes(backend, _leases(jobs))
        with psycopg.connect(pg.url) as conn:
            conn.execute("SET TIME ZONE 'UTC'")
            for name, plan in _analyzed(conn, backend, statements):
                nodes = plan_nodes(plan["Plan"])
                indexes = {node.get("Index Name") for node in nodes}
                assert "jobledger_jobs_leased" not in indexes, (name, plan)
                assert "jobledger_jobs_pkey" in indexes, (name, plan)
                rescans = [
                    (node["Node Type"], node.get("Alias"), node["Actual Loops"])
                    for node in nodes
                    if node["Node Type"] in ("Function Scan", "CTE Scan")
                    and node["Actual Loops"] > 1
                ]
                assert rescans == [], (name, rescans)
            # What asks about leases as such still reads the index: the rescuer, and the
            # give-back of a claim whose answer was lost.
            expiry = {
                backend.db.sql["job_rescue"].replace("{limit}", "100"): {"now": None},
                backend.db.sql["job_claim_unanswered"]: {
                    "worker": "w",
                    "claim": "0" * 32,
                    "returned": [],
                    "now": None,
                },
            }
            for sql, params in expiry.items():
                plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, params))
                assert "jobledger_jobs_leased" in plan, plan


def test_writes_fenced_by_a_lease_never_read_the_jobs_table_whole_before_it_is_analyzed(pg):
    """A fresh table of 20,000 jobs that nothing has analyzed (autovacuum off, or not yet come
    round): a write of 500 leases fetches them by primary key. Shown 500 ids, the planner
    priced 500 probes above one read of a table it took for small, and read all of it on every
    completion (2.2 ms of about 8 at 20,000 jobs, growing with the table)."""
    with ledger_with_jobs(pg, 20_000) as (ledger, schema):
        backend = ledger.backend
        for _ in range(3):
            backend.jobs.complete(_leases(backend.jobs.claim(["q"], "w", BATCH)))
        statements = _lease_writes(backend, _leases(backend.jobs.claim(["q"], "w", BATCH)))
        with psycopg.connect(pg.url) as conn:
            conn.execute("SET TIME ZONE 'UTC'")
            for name, plan in _analyzed(conn, backend, statements):
                whole = [
                    node["Node Type"]
                    for node in plan_nodes(plan["Plan"])
                    if node.get("Relation Name") == "jobledger_jobs"
                    and node["Node Type"] == "Seq Scan"
                ]
                assert whole == [], (name, plan)
