"""What a grouped claim holds on PostgreSQL while its transaction runs: the rows of the groups it
serves, locked so that no other claim serves them meanwhile — and nothing in the server's shared
lock table per group, which a claim over many groups would otherwise fill for the whole
database (docs/groups.md, "How the claim does it")."""

from __future__ import annotations

import psycopg

from jobledger import Ledger
from jobledger.backends.postgres.database import queue_params

GROUPS = 500


def test_a_claim_over_500_groups_locks_their_rows_and_takes_no_lock_per_group(pg):
    schema, url = pg.new_schema_url()
    try:
        ledger = Ledger(url)
        ledger.task(lambda ctx, n: None, name="t", queue="q", group=lambda p: f"g{p['n']}")
        ledger.enqueue_many("t", [{"payload": {"n": n}, "key": f"k{n}"} for n in range(GROUPS)])
        db = ledger.backend.db
        turns = db.statement("group_candidates_turns", GROUPS)
        params = queue_params(["q"]) | {"now": None}
        with psycopg.connect(pg.url) as first, psycopg.connect(pg.url) as second:
            for conn in (first, second):
                conn.execute(f"SET search_path = {schema}")
            held = first.execute(turns, params).fetchall()
            assert sum(1 for r in held if r[1] is not None) == GROUPS
            locks = first.execute(
                "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid()"
                " AND locktype NOT IN ('relation', 'virtualxid', 'transactionid')"
            ).fetchone()
            assert locks == (0,), "a lock per group in the shared lock table"
            # Another claim meanwhile finds every one of those groups held, and skips it.
            other = second.execute(turns, params).fetchall()
            assert [r[1] for r in other] == [None], other[:3]
            second.rollback()
            first.rollback()
            # Once the first claim's transaction has ended, they can be served again.
            again = second.execute(turns, params).fetchall()
            assert sum(1 for r in again if r[1] is not None) == GROUPS
            second.rollback()
        ledger.close()
    finally:
        pg.drop_schema(schema)
