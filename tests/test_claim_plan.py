"""The claim query walks its index, with a custom and with a generic plan (PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import psycopg

from jobledger import Ledger

from .support.postgres import ledger_with_jobs, plan_nodes


def explain(conn: psycopg.Connection, text: str, params: dict) -> str:
    return "\n".join(r[0] for r in conn.execute("EXPLAIN " + text, params))


def test_claim_uses_the_due_index_even_with_a_generic_plan(pg):
    with ledger_with_jobs(pg, 20_000) as (ledger, schema):
        backend = ledger.backend
        with psycopg.connect(pg.url) as conn:
            conn.execute(f"ANALYZE {schema}.jobledger_jobs")
            for mode, limit in (
                ("force_custom_plan", 100),
                ("force_generic_plan", 100),
                ("force_custom_plan", 1000),
                ("force_generic_plan", 1000),
            ):
                claim = backend.db.statement("job_claim", limit)
                # Large batches: also when the planner would rather not loop over an index
                # (as it decides at some table sizes), the claimed rows are found by key.
                conn.execute(f"SET enable_nestloop = {'off' if limit > 100 else 'on'}")
                conn.execute(f"SET plan_cache_mode = {mode}")
                plan = "\n".join(
                    r[0]
                    for r in conn.execute(
                        "EXPLAIN " + claim,
                        {
                            "queue_0": "q",
                            "worker": "w",
                            "now": None,
                            "lease_seconds": None,
                            "claim": "0" * 32,
                        },
                    )
                )
                assert "jobledger_jobs_due" in plan, plan
                assert "Seq Scan on jobledger_jobs" not in plan, plan
                # The claimed rows are updated by primary key, not found again by reading
                # every pending job's index entry.
                assert "Index Scan on jobledger_jobs_pkey" in plan or (
                    "Index Scan using jobledger_jobs_pkey" in plan
                ), plan
                assert "Bitmap Index Scan on jobledger_jobs_due" not in plan, plan
                conn.rollback()


def test_a_claim_from_a_position_starts_its_index_scan_there(pg):
    """``job_claim_after`` (postgres/cursor.py): the position is an index condition of the scan
    of jobledger_jobs_due, not a filter over every entry before it, with a custom and with a
    generic plan; the claimed rows are updated by primary key."""
    with ledger_with_jobs(pg, 20_000) as (ledger, schema):
        claim = ledger.backend.db.statement("job_claim_after", 500, queues=2)
        params = {
            "queue_0": "q",
            "queue_1": "r",
            "worker": "w",
            "now": None,
            "lease_seconds": None,
            "claim": "0" * 32,
            "after_priority_0": 0,
            "after_priority_1": 2**31,
            "after_run_at_0": datetime(2026, 8, 10, tzinfo=UTC),
            "after_run_at_1": datetime(1970, 1, 1, tzinfo=UTC),
            "after_id_0": 10_000,
            "after_id_1": 0,
        }
        with psycopg.connect(pg.url) as conn:
            conn.execute(f"ANALYZE {schema}.jobledger_jobs")
            for mode in ("force_custom_plan", "force_generic_plan"):
                conn.execute(f"SET plan_cache_mode = {mode}")
                plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + claim, params))
                assert "ROW(run_at, id) > ROW(" in plan, plan
                conds = [line for line in plan.splitlines() if "Index Cond" in line]
                assert any("ROW(run_at, id) >" in c for c in conds), plan
                assert "Seq Scan on jobledger_jobs" not in plan, plan
                assert "jobledger_jobs_pkey" in plan, plan
                conn.rollback()


def test_a_grouped_claim_probes_only_the_groups_it_keeps(pg):
    """1,000 groups, each with due jobs: a claim of 200 walks the groups' rows in turn order and
    stops once 200 are kept — it probes 200 groups' next jobs, not every row its walk may read
    (4 × 200 + 64), probed and then sorted (custom and generic plans)."""
    with ledger_with_jobs(pg, 3000, group=lambda p: f"g{p['n'] % 1000}") as (ledger, schema):
        turns = ledger.backend.db.statement("group_candidates_turns", 200)
        with psycopg.connect(pg.url) as conn:
            conn.execute(f"ANALYZE {schema}.jobledger_jobs, {schema}.jobledger_groups")
            for mode in ("force_custom_plan", "force_generic_plan"):
                conn.execute(f"SET plan_cache_mode = {mode}")
                rows = conn.execute(
                    "EXPLAIN (ANALYZE, FORMAT JSON) " + turns,
                    {"queue_0": "q", "now": None, "turn_from_0": None},
                ).fetchall()
                conn.rollback()  # the claim's first statement locks the groups it keeps
                probes = [
                    node["Actual Loops"]
                    for node in plan_nodes(rows[0][0][0]["Plan"])
                    if node.get("Index Name") == "jobledger_jobs_group_next"
                ]
                assert probes == [200], (mode, probes)
                # Having kept its whole batch, it does not read the groups' rows again to
                # count them ("more" matters only to a claim that kept fewer).
                groups_read = [
                    node.get("Index Name", "heap")
                    for node in plan_nodes(rows[0][0][0]["Plan"])
                    if node.get("Relation Name") == "jobledger_groups" and node["Actual Loops"]
                ]
                # The queue's front (one probe), the walk (its two ranges: groups never served,
                # and the rest), the locks.
                assert len(groups_read) == 4, (mode, groups_read)


def test_a_grouped_claim_reads_a_groups_jobs_in_claim_order_through_its_index(pg, tmp_path):
    """One group with 20,000 due jobs: the claim takes the first few through the index in
    claim order, never every due job of the group sorted (custom and generic plans; SQLite)."""
    with ledger_with_jobs(pg, 20_000, group="g") as (ledger, schema):
        claim = ledger.backend.db.statement("group_claim", 10)
        candidates = ledger.backend.db.statement("group_candidates", 10)
        turns = ledger.backend.db.statement("group_candidates_turns", 10)
        params = {
            "queues": ["q"],
            "names": ["g"],
            "floor_ats": "{NULL}",
            "floor_ids": "{NULL}",
            "exacts": "{NULL}",
            "share": 10,
            "worker": "w",
            "now": None,
            "lease_seconds": None,
            "claim": "0" * 32,
        }
        with psycopg.connect(pg.url) as conn:
            # Before the statistics know the group has grown (no ANALYZE yet), and after.
            for analyze in (False, True):
                if analyze:
                    conn.execute(f"ANALYZE {schema}.jobledger_jobs")
                for mode in ("force_custom_plan", "force_generic_plan"):
                    conn.execute(f"SET plan_cache_mode = {mode}")
                    first = {"queue_0": "q", "now": None, "turn_from_0": None}
                    plan = explain(conn, claim, params)
                    assert "jobledger_jobs_group_due" in plan, plan
                    assert "Seq Scan on jobledger_jobs" not in plan, plan
                    # Both statements of the claim are prepared: the groups are found by
                    # the skip scan of their index in the generic plan too.
                    plan = explain(conn, candidates, first)
                    assert "jobledger_jobs_group_next" in plan, plan
                    assert "Seq Scan on jobledger_jobs" not in plan, plan
                    # The usual first statement walks the groups' rows in turn order and
                    # probes each group's next due job by its index.
                    plan = explain(conn, turns, first)
                    assert "jobledger_groups_turn" in plan, plan
                    assert "jobledger_jobs_group_next" in plan, plan
                    assert "Seq Scan on jobledger_jobs" not in plan, plan

    lite = Ledger(f"sqlite:///{tmp_path}/l.db")
    lite.task(lambda ctx, n: None, name="t", queue="q", group="g")
    lite.enqueue_many("t", [{"payload": {"n": n}, "key": f"k{n}"} for n in range(2_000)])
    backend = lite.backend
    plan = backend.db.connection().execute(
        "EXPLAIN QUERY PLAN " + backend.db.sql["group_due_jobs"],
        {"queue": "q", "name": "g", "now": 1e10, "n": 10},
    )
    steps = [row[3] for row in plan]
    assert any("jobledger_jobs_group_due" in s for s in steps), steps
    assert not any("TEMP B-TREE" in s for s in steps), steps
    # Finding the groups: one probe per group, and each group's next run time by equality.
    plan = backend.db.connection().execute(
        "EXPLAIN QUERY PLAN " + backend.db.sql["group_candidates"], {"queue": "q", "now": 1e10}
    )
    steps = [row[3] for row in plan]
    assert not any(s.startswith("SCAN jobledger_jobs") for s in steps), steps
    assert any("group_next (queue=? AND group_name=?)" in s for s in steps), steps
    plan = backend.db.connection().execute(
        "EXPLAIN QUERY PLAN " + backend.db.sql["group_candidates_turns"],
        {"queue": "q", "now": 1e10, "scan": 104},
    )
    steps = [row[3] for row in plan]
    assert not any(s.startswith("SCAN jobledger_jobs") for s in steps), steps
    assert any("jobledger_groups_turn (queue=?)" in s for s in steps), steps
    assert not any("TEMP B-TREE" in s for s in steps), steps
    lite.close()


def test_the_claims_are_prepared_statements(pg):
    """The claim without groups, the grouped claim in one statement (a queue without group
    limits) and both statements of the grouped claim with limits are prepared once per
    connection (not planned again on every run), as their plan tests above assume."""
    schema, url = pg.new_schema_url()
    try:
        ledger = Ledger(url)
        ledger.task(lambda ctx, n: None, name="t", queue="q")
        ledger.task(lambda ctx, n: None, name="g", queue="q", group="g")
        ledger.task(lambda ctx, n: None, name="h", queue="limited", group="h")
        ledger.set_group_limits("limited", max_leased=100)
        ledger.enqueue_many("t", [{"payload": {"n": n}, "key": f"t{n}"} for n in range(20)])
        ledger.enqueue_many("g", [{"payload": {"n": n}, "key": f"g{n}"} for n in range(20)])
        ledger.enqueue_many("h", [{"payload": {"n": n}, "key": f"h{n}"} for n in range(20)])
        db = ledger.backend.db
        for _ in range(3):
            assert ledger.backend.jobs.claim(["q"], "w", 2)
            assert ledger.backend.jobs.claim(["limited"], "w", 2)
        query = "SELECT statement FROM pg_prepared_statements"
        plain = [r[0] for r in db.quickly(lambda c: c.execute(query).fetchall())]
        with db.transaction() as c:
            grouped = [r[0] for r in c.execute(query).fetchall()]
        assert any("group_name IS NULL AND queue = q.name" in s for s in plain), plain
        assert any("WITH limited AS MATERIALIZED" in s for s in plain), plain
        assert any("WITH viable AS MATERIALIZED" in s for s in grouped), grouped
        assert any("WITH current AS" in s for s in grouped), grouped
        ledger.close()
    finally:
        pg.drop_schema(schema)


def test_the_prepared_claim_keeps_its_generic_plan_instead_of_planning_every_run(pg):
    """A claim's queues are rows of scalar parameters (``{queue_rows}``), so the generic plan
    of the prepared claim knows how many queues it scans and PostgreSQL keeps it after five
    custom plans; over an array it chose a custom plan on every run (0.3-0.5 ms of planning
    per claim). For one queue and for two, from the start and from a position."""
    schema, url = pg.new_schema_url()
    try:
        ledger = Ledger(url)
        ledger.task(lambda ctx, n: None, name="t", queue="q")
        ledger.task(lambda ctx, n: None, name="u", queue="r")
        for task in ("t", "u"):
            ledger.enqueue_many(task, [{"payload": {"n": n}, "key": f"k{n}"} for n in range(40)])
        jobs, db = ledger.backend.jobs, ledger.backend.db
        for queues in (["q"], ["q", "r"]):
            for _ in range(18):
                assert jobs.claim(queues, "w", 1)
                jobs.rewind()  # every other claim from the start
                assert jobs.claim(queues, "w", 1)
        # One thread claimed in turn: the quick pool's one connection prepared them all.
        plans = db.quickly(
            lambda c: c.execute(
                "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE statement LIKE 'WITH picked AS%'"
            ).fetchall()
        )
        # (psycopg prepares a statement again when a parameter's type changes with its value,
        # an int2 id becoming int4: a few runs of such a twin are left out.)
        runs = [(s, generic, custom) for s, generic, custom in plans if generic + custom >= 10]
        for statement, generic, custom in runs:
            assert custom <= 5, (generic, custom, statement)
        shapes = {(s.split(" AS q(")[0].count("($"), "$2::bigint" in s) for s, _, _ in runs}
        assert len(shapes) == 2 * 2, plans  # 1 and 2 queues, from the start and from a position
        ledger.close()
    finally:
        pg.drop_schema(schema)


class ClaimsBySize:
    """A ledger with due jobs in queue "q", claimed from one thread (so on the quick pool's one
    connection) by size."""

    def __init__(self, url: str, jobs: int):
        self.ledger = Ledger(url)
        self.ledger.task(lambda ctx, n: None, name="t", queue="q")
        self.ledger.enqueue_many("t", [{"payload": {"n": n}, "key": f"k{n}"} for n in range(jobs)])
        self.db = self.ledger.backend.db

    def claim(self, *sizes: int) -> None:
        """Claims of these sizes, each from the start (``job_claim``, never ``job_claim_after``)."""
        jobs = self.ledger.backend.jobs
        for size in sizes:
            assert len(jobs.claim(["q"], "w", size)) == size
            jobs.rewind()

    def prepared(self) -> set[int]:
        """The sizes whose claim is prepared on the connection."""
        names = "SELECT name FROM pg_prepared_statements WHERE name LIKE 'jobledger_job_claim_%'"
        rows = self.db.quickly(lambda c: c.execute(names).fetchall())
        return {int(name.split("_")[-2]) for (name,) in rows}

    def discard_all(self) -> None:
        self.db.quickly(lambda c: c.execute("DISCARD ALL"))


@contextmanager
def claims_by_size(pg, jobs: int) -> Iterator[ClaimsBySize]:
    schema, url = pg.new_schema_url()
    try:
        claims = ClaimsBySize(url, jobs)
        yield claims
        claims.ledger.close()
    finally:
        pg.drop_schema(schema)


def test_claims_of_many_sizes_keep_at_most_max_prepared_statements_on_a_connection(pg, monkeypatch):
    """Each claim size is a prepared statement of its own (its ``{limit}`` written in), each
    holding its plan in the server session's memory: a worker whose claim sizes vary would
    otherwise keep one for every size it ever asked for, on every connection. Past
    ``MAX_PREPARED`` on one connection the least recently used statement is deallocated, and
    prepared again when its size comes back; the statements still in use stay prepared."""
    from jobledger.backends.postgres import prepared

    monkeypatch.setattr(prepared, "MAX_PREPARED", 6)
    with claims_by_size(pg, 400) as claims:
        claims.claim(*range(1, 21))
        assert claims.prepared() == set(range(15, 21))
        claims.claim(3)  # deallocated above: prepared again, in place of 15 (used least recently)
        claims.claim(16)  # used again: now 17 is the least recently used
        claims.claim(1)
        assert claims.prepared() == {1, 3, 16, 18, 19, 20}


def test_a_session_that_lost_its_prepared_statements_prepares_them_again(pg, monkeypatch):
    """``DISCARD ALL`` on the connection drops every statement prepared there: the next claim
    of a size prepared before prepares it again, and so does a claim of a new size that first
    makes room (its ``DEALLOCATE`` of a statement already gone is not an error)."""
    from jobledger.backends.postgres import prepared

    monkeypatch.setattr(prepared, "MAX_PREPARED", 3)
    with claims_by_size(pg, 100) as claims:
        claims.claim(1, 2, 3)
        claims.discard_all()
        claims.claim(4)  # makes room first: the least recently used is gone already
        claims.claim(1, 2)
        assert claims.prepared() == {1, 2, 4}
        claims.discard_all()
        claims.claim(2)  # its statement is gone: the server says so, and it is prepared again
        claims.claim(4)
        assert claims.prepared() == {2, 4}


def test_statements_are_deallocated_in_a_transaction_without_failing_it(pg, monkeypatch):
    """A grouped claim's statements run in its transaction: the limit holds there too, and a
    ``DEALLOCATE`` of a statement the session has lost (after ``DISCARD ALL``) fails under a
    savepoint, not the transaction, which goes on and commits."""
    from jobledger.backends.postgres import prepared

    monkeypatch.setattr(prepared, "MAX_PREPARED", 3)
    statements = [
        prepared.PreparedStatement(f"jobledger_test_{n}", f"SELECT %(x)s::int + {n}")
        for n in range(6)
    ]
    names = "SELECT name FROM pg_prepared_statements WHERE name LIKE 'jobledger_test_%' ORDER BY 1"
    with psycopg.connect(pg.url, autocommit=True) as conn:
        for statement in statements[:3]:
            statement.rows(conn, {"x": 1})
        conn.execute("DISCARD ALL")
        with conn.transaction():
            assert statements[3].rows(conn, {"x": 1}) == [(b"4",)]  # makes room: gone already
            for n, statement in enumerate(statements):
                assert statement.rows(conn, {"x": 1}) == [(str(n + 1).encode(),)]
            kept = [r[0] for r in conn.execute(names).fetchall()]
            conn.execute("CREATE TEMP TABLE still_in_the_transaction ()")
        assert kept == [f"jobledger_test_{n}" for n in (3, 4, 5)]
        assert conn.execute("SELECT to_regclass('still_in_the_transaction')").fetchone() != (None,)


def test_a_prepared_claim_is_planned_again_as_its_table_grows(pg, monkeypatch):
    """A claim prepared while the jobs table was nearly empty gets a generic plan that reads the
    table whole for the rows it has just locked; PostgreSQL keeps that plan until the table's
    statistics change, which nothing does where autovacuum is off. So each connection
    prepares it again after ``REPLAN_EVERY`` runs, and then looks the rows up by key."""
    from jobledger.backends.postgres import prepared

    monkeypatch.setattr(prepared, "REPLAN_EVERY", 20)
    schema, url = pg.new_schema_url()
    try:
        ledger = Ledger(url)
        ledger.task(lambda ctx, n: None, name="t", queue="q")
        ledger.migrate()
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute(f"ALTER TABLE {schema}.jobledger_jobs SET (autovacuum_enabled = false)")
        ledger.enqueue_many("t", [{"payload": {"n": n}, "key": f"a{n}"} for n in range(2)])
        jobs, db = ledger.backend.jobs, ledger.backend.db
        claim = db.prepared("job_claim", 1, 1)
        values = {"queue_0": "q", "worker": "w", "now": None, "lease_seconds": None}
        values["claim"] = "0" * 32
        literals = ", ".join(
            "NULL" if v is None else "'" + v.decode() + "'"
            for v in (prepared._param(values[name]) for name in claim.params)
        )
        explain = f"EXPLAIN EXECUTE {claim.name.decode()}({literals})"

        def plan() -> str:
            return "\n".join(r[0] for r in db.quickly(lambda c: c.execute(explain).fetchall()))

        def claims(n: int) -> None:
            for _ in range(n):
                jobs.rewind()  # from the start: job_claim
                jobs.claim(["q"], "w", 1)

        claims(8)  # five custom plans, then the generic one, made at two rows
        assert "Seq Scan on jobledger_jobs" in plan()  # cheapest then, and kept
        ledger.enqueue_many("t", [{"payload": {"n": n}, "key": f"k{n}"} for n in range(20_000)])
        assert "Seq Scan on jobledger_jobs" in plan()  # nothing analyzed the table
        claims(20)  # prepared again, and planned for the table as it is now
        assert "Seq Scan on jobledger_jobs" not in plan()
        ledger.close()
    finally:
        pg.drop_schema(schema)


def test_the_grouped_claims_statements_are_prepared_again_as_the_claim_is(pg, monkeypatch):
    """The grouped claim's statements go through the claim's prepared call, so each
    connection prepares them again after ``REPLAN_EVERY`` runs, as it does the claim: a
    generic plan made while the tables were nearly empty does not stay for good where nothing
    analyzes them (psycopg's own prepared statements are never made again)."""
    from jobledger.backends.postgres import prepared

    monkeypatch.setattr(prepared, "REPLAN_EVERY", 4)
    schema, url = pg.new_schema_url()
    try:
        ledger = Ledger(url)
        for queue in ("q", "limited"):
            ledger.task(
                lambda ctx, n: None, name=queue, queue=queue, group=lambda p: f"g{p['n'] % 3}"
            )
            ledger.enqueue_many(queue, [{"payload": {"n": n}, "key": f"g{n}"} for n in range(40)])
        ledger.set_group_limits("limited", max_leased=100)
        jobs, db = ledger.backend.jobs, ledger.backend.db
        for _ in range(10):
            for queue in ("q", "limited"):
                got = jobs.claim([queue], "w", 1)
                assert got and got[0].group is not None
        query = (
            "SELECT name, generic_plans + custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE '%%jobledger_groups%%'"
        )
        # The two-statement claim runs on the main pool, the one-statement claim on the quick.
        with db.transaction() as c:
            runs = dict(c.execute(query).fetchall())
        runs |= dict(db.quickly(lambda c: c.execute(query).fetchall()))
        assert {
            "jobledger_group_candidates_turns_1_1",
            "jobledger_group_claim_1_1",
            "jobledger_group_claim_unlimited_1_1",
        } <= set(runs), runs
        # Ten claims of each way, each statement prepared again after four runs: four or fewer
        # since.
        assert all(0 < n <= 4 for n in runs.values()), runs
        ledger.close()
    finally:
        pg.drop_schema(schema)


@contextmanager
def unanalyzed_groups(pg, groups: int, served: bool = False) -> Iterator[tuple[Ledger, str]]:
    """A ledger whose queue "q" has ``groups`` groups of one due job each, and nothing has
    analyzed its tables (autovacuum off on them): the groups table filled from empty, by
    trigger, as the enqueues fill it. ``served``: each group was served once, a second apart
    (its turn set), as in a queue that has been running."""
    with ledger_with_jobs(pg, 0, group=lambda p: f"g{p['n']}") as (ledger, schema):
        ledger.migrate()
        with psycopg.connect(pg.url, autocommit=True) as conn:
            for table in ("jobs", "groups"):
                conn.execute(
                    f"ALTER TABLE {schema}.jobledger_{table} SET (autovacuum_enabled = false)"
                )
        jobs = [{"payload": {"n": n}, "key": f"k{n}"} for n in range(groups)]
        ledger.enqueue_many("t", jobs)
        if served:
            with psycopg.connect(pg.url, autocommit=True) as conn:
                conn.execute(
                    f"UPDATE {schema}.jobledger_groups"
                    " SET served_at = now() - substr(name, 2)::int * interval '1 second'"
                )
        yield ledger, schema


def test_a_grouped_claim_walks_the_turns_in_order_before_the_groups_are_analyzed(pg, monkeypatch):
    """5,000 groups, one due job each, and nothing has analyzed the groups table (it fills from
    empty, by trigger): the planner takes a queue for a few dozen groups and reads all 5,000
    rows to sort them (16 ms a claim of 10 at 50,000 groups). Planned under ``WALK_IN_ORDER``,
    as the transaction of every grouped claim in two statements is (a queue with group
    limits), the walk reads the turn index in order and stops at its limit."""
    from jobledger.backends.postgres import grouped

    with unanalyzed_groups(pg, 5000, served=True) as (ledger, schema):
        db = ledger.backend.db
        turns = "EXPLAIN (ANALYZE, FORMAT JSON) " + db.statement("group_candidates_turns", 10)

        def groups_rows_read(setup) -> int:  # type: ignore[no-untyped-def]
            with db.transaction() as c:
                setup(c)
                [[[plan]]] = c.execute(
                    turns, {"queue_0": "q", "now": None, "turn_from_0": None}
                ).fetchall()
                raise psycopg.Rollback()  # the statement locks the groups it keeps
            return sum(
                node["Actual Rows"] * node["Actual Loops"]
                for node in plan_nodes(plan["Plan"])
                if node.get("Relation Name") == "jobledger_groups"
            )

        assert groups_rows_read(lambda c: None) >= 5000  # the plan the settings keep it from
        assert groups_rows_read(grouped.walk_in_order) <= 4 * 10 + 64 + 10  # walk, then locks

        calls: list[object] = []
        real = grouped.walk_in_order
        monkeypatch.setattr(grouped, "walk_in_order", lambda c: calls.append(c) or real(c))
        ledger.set_group_limits("q", max_leased=100)  # the claim that counts under the locks
        assert len(ledger.backend.jobs.claim(["q"], "w", 10)) == 10
        assert len(calls) == 1  # the claim plans its statements so


def test_the_one_statement_grouped_claim_walks_the_turns_in_order_before_the_groups_are_analyzed(
    pg,
):
    """The same 5,000 groups, unanalyzed, claimed in one statement (a queue without group
    limits), which cannot set ``WALK_IN_ORDER`` for itself: its walk runs in functions planned
    under those settings (migration 017), and the statement reaches the groups' rows by their
    key, so a claim of 10 reads about as many groups' rows as it serves. Without the settings
    (reset on the walk's function in a transaction rolled back) the same claim reads them all."""
    with unanalyzed_groups(pg, 5000, served=True) as (ledger, schema):
        db = ledger.backend.db
        claim = db.statement("group_claim_unlimited", 10)
        params = {"queue_0": "q", "now": None, "worker": "w", "lease_seconds": None}
        params |= {"claim": "0" * 32, "turn_from_0": None}

        def groups_rows_read(settings: bool) -> int:
            # The rows the server counts as read (by any scan, in the functions too), before
            # and after the claim: the view also holds counts not yet reported of earlier
            # transactions of the session.
            read = (
                "SELECT seq_tup_read + idx_tup_fetch FROM pg_stat_xact_user_tables"
                " WHERE schemaname = %s AND relname = 'jobledger_groups'"
            )
            with db.transaction() as c:
                if not settings:
                    walk = f"{schema}.jobledger_group_turns_next"
                    c.execute(f"ALTER FUNCTION {walk} RESET ALL")
                    c.execute(f"ALTER FUNCTION {walk} SET search_path = {schema}")
                [(before,)] = c.execute(read, (schema,)).fetchall()
                rows = c.execute(claim, params).fetchall()
                assert len(rows) == 10 and not any(r[-5] for r in rows)  # none "limited"
                [(after,)] = c.execute(read, (schema,)).fetchall()
                raise psycopg.Rollback()  # leave the jobs and the groups as they were
            return int(after - before)

        assert groups_rows_read(settings=False) >= 5000  # the plan the settings keep it from
        assert groups_rows_read(settings=True) <= 4 * 10  # walk, locks, turns written
