"""What a grouped claim holds on PostgreSQL while its transaction runs: the rows of the groups it
serves, locked so that no other claim serves them meanwhile — and nothing in the server's shared
lock table per group, which a claim over many groups would otherwise fill for the whole
database (docs/groups.md, "How the claim does it")."""

from __future__ import annotations

import threading

import psycopg

from jobledger import Ledger
from jobledger.backends.postgres.database import queue_params

from ..support.processes import wait_until

GROUPS = 500


def test_a_claim_over_500_groups_locks_their_rows_and_takes_no_lock_per_group(pg):
    schema, url = pg.new_schema_url()
    try:
        ledger = Ledger(url)
        ledger.task(lambda ctx, n: None, name="t", queue="q", group=lambda p: f"g{p['n']}")
        ledger.enqueue_many("t", [{"payload": {"n": n}, "key": f"k{n}"} for n in range(GROUPS)])
        db = ledger.backend.db
        turns = db.statement("group_candidates_turns", GROUPS)
        params = queue_params(["q"]) | {"now": None, "turn_from_0": None}
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


def test_a_pause_committed_while_a_one_statement_claim_runs_holds_from_its_lock(pg):
    """A queue without group limits is claimed in one statement, whose snapshot is taken
    before it locks the groups it serves. A pause that commits between the two must still
    hold: the claim checks the pause again on the row as locked (the newest version), so the
    paused group's job stays pending. The walk of the turns is wrapped here so that it waits,
    after it has read the turns, until the test has committed the pause."""
    schema, url = pg.new_schema_url()
    gate = 7_017  # an advisory lock the test holds while the claim is inside its walk
    try:
        ledger = Ledger(url)
        ledger.task(lambda ctx, n: None, name="t", queue="q", group=lambda p: f"g{p['n']}")
        ledger.enqueue_many("t", [{"payload": {"n": n}, "key": f"k{n}"} for n in range(2)])
        walk = f"{schema}.jobledger_group_turns_next"
        args = "p_queue, p_now, p_keep, p_scan, p_from"
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute(
                f"ALTER FUNCTION {walk}(text, timestamptz, int, int, timestamptz)"
                " RENAME TO walk_real"
            )
            conn.execute(
                f"CREATE FUNCTION {walk}(p_queue text, p_now timestamptz, p_keep int,"
                " p_scan int, p_from timestamptz)"
                " RETURNS TABLE (queue text, name text, served_at timestamptz,"
                " front timestamptz, next_at timestamptz, next_id bigint, exact boolean)"
                " LANGUAGE plpgsql VOLATILE AS $$ BEGIN"
                f" RETURN QUERY SELECT * FROM {schema}.walk_real({args});"
                f" PERFORM pg_advisory_xact_lock({gate}); END $$"
            )
        with psycopg.connect(pg.url, autocommit=True) as holder:
            holder.execute("SELECT pg_advisory_lock(%s)", (gate,))
            claimed: list[object] = []
            claim = threading.Thread(
                target=lambda: claimed.extend(ledger.backend.jobs.claim(["q"], "w", 10))
            )
            claim.start()
            # The claim has read both groups' turns (its snapshot: neither paused) and waits.
            wait_until(
                lambda: (
                    holder.execute(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                        " AND objid = %s",
                        (gate,),
                    ).fetchone()
                    == (1,)
                ),
                what="the claim waiting inside its walk",
            )
            ledger.pause_group("q", "g0", seconds=3600)  # committed before the claim locks
            holder.execute("SELECT pg_advisory_unlock(%s)", (gate,))
            claim.join(timeout=60)
            assert not claim.is_alive()
        assert [job.group for job in claimed] == ["g1"]  # g0's job was not leased
        assert ledger.backend.jobs.claim(["q"], "w", 10) == []
        ledger.close()
    finally:
        pg.drop_schema(schema)
