"""Each group's floor (PostgreSQL, migration 020): a grouped claim writes, with the group's
turn, the run time of its first pending job as its walk found it, and the next walk's probes of
the group start there. Under a held xmin they pass over the dead entries that the group's
claimed jobs left in the grouped indexes; and a job made pending below a floor is still found:
at once when this process made it so, within ``LONGEST`` seconds of the claims' time when
another process did."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from jobledger import Ledger
from jobledger._records import Lease, NewJob
from jobledger.backends.postgres.cursor import LONGEST, TurnCursor
from jobledger.backends.postgres.database import turn_params

from ..support.clock import Clock

T0 = datetime(2026, 8, 10, 6, 0, tzinfo=UTC)


#: A queue without group limits is claimed in one statement; with them, in two (grouped.py).
LIMITED = pytest.mark.parametrize("limited", [False, True], ids=["one statement", "two"])


def _ledger(url: str, limited: bool = False) -> Ledger:
    ledger = Ledger(url)
    ledger.task(lambda ctx, n: None, name="t", queue="q", group=lambda p: "g")
    if limited:
        ledger.set_group_limits("q", max_leased=100_000)
    return ledger


def _claimer(ledger: Ledger) -> Any:
    """The ledger's jobs, their turn cursor on a clock that stands still (a walk from the start
    is never due by itself: only a rewind, or a walk from the front that found nothing)."""
    jobs = ledger.backend.jobs
    jobs._grouped.turns = TurnCursor(Clock())  # type: ignore[attr-defined]
    return jobs


def _new(run_at: datetime | None) -> NewJob:
    return NewJob("q", "k", "t", "{}", 0, run_at, 3, 30.0, group="g")


def test_this_processs_job_at_or_before_its_last_claim_time_sends_the_walk_to_the_start():
    turns = TurnCursor(Clock())
    turns.scanned_from_start(0.5, 1)
    turns.advance([("q", T0)], ["q"], T0 + timedelta(seconds=5))  # claimed "q" at T0 + 5 s
    later = T0 + timedelta(seconds=6)
    turns.returned([("q", 0, later, 1, "g"), ("q", 0, T0, 2, None), ("r", 0, T0, 3, "g")])
    assert turns.walk_from(["q"]) == [T0]  # after the claim, without a group, another queue
    turns.placed([_new(None)], now=later)  # due at once, after it
    assert turns.walk_from(["q"]) == [T0]
    turns.placed([_new(T0)], now=later)  # dated before it
    assert turns.walk_from(["q"]) is None
    turns.scanned_from_start(0.5, 1)
    turns.returned([("q", 0, T0 + timedelta(seconds=5), 4, "g")])  # a release, say
    assert turns.walk_from(["q"]) is None


def _claim_one(jobs: Any, now: datetime) -> int:
    [job] = jobs.claim(["q"], "w", 1, now=now)
    jobs.complete([Lease(job.id, job.lease_token, job.attempt)], now=now)
    return int(job.id)


def _entries_read(
    ledger: Ledger, pg_url: str, schema: str, now: datetime, floors: bool, limited: bool
) -> int:
    """The entries of the grouped indexes one grouped claim of 10 at ``now`` reads, rolled
    back: from the front this process found, with the groups' floors (``floors``), or from the
    start of the turns and of each group's jobs; in one statement, or in two (``limited``). An
    entry the index scan passes over on its key (below the floor) is not counted; a dead one it
    hands over is, and costs a visit of its row."""
    db = ledger.backend.db
    [front] = ledger.backend.jobs._grouped.turns.walk_from(["q"])  # type: ignore[attr-defined]
    params = {"queue_0": "q", "now": now, "worker": "w", "lease_seconds": None}
    params |= {"claim": "0" * 32} | turn_params([front if floors else None])
    with psycopg.connect(pg_url, autocommit=True) as c:

        def read() -> int:
            # This session's counts, sent at once (they are sent when it is next idle).
            c.execute("SELECT pg_stat_force_next_flush()")
            c.execute("SELECT pg_stat_clear_snapshot()")
            [(n,)] = c.execute(
                "SELECT sum(idx_tup_read) FROM pg_stat_user_indexes WHERE schemaname = %s"
                " AND indexrelname IN ('jobledger_jobs_group_due', 'jobledger_jobs_group_next')",
                (schema,),
            ).fetchall()
            return int(n)

        before = read()
        with c.transaction(force_rollback=True):
            c.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off")
            if not floors:
                c.execute(f"UPDATE {schema}.jobledger_groups SET pending_from = NULL")
            if not limited:
                claim = db.statement("group_claim_unlimited", 10)
                assert len(c.execute(claim, params).fetchall()) == 10
            else:  # as grouped.py's _claim_locked sends them
                turns = db.statement("group_candidates_turns", 10)
                [(_, _, _, _, _, _, at, job_id, exact)] = c.execute(turns, params)
                params |= {"queues": "{q}", "names": "{g}", "share": 10}
                params |= {"floor_ats": "{" + at.isoformat() + "}", "floor_ids": f"{{{job_id}}}"}
                params |= {"exacts": "{t}" if exact else "{f}"}
                claim = db.statement("group_claim", 10)
                assert len(c.execute(claim, params).fetchall()) == 10
        return read() - before


@LIMITED
def test_under_a_held_xmin_a_groups_probes_start_past_its_claimed_jobs(pg, limited):
    schema, url = pg.new_schema_url()
    holder = psycopg.connect(pg.url)
    try:
        ledger = _ledger(url, limited)
        jobs = _claimer(ledger)
        ledger.enqueue_many("t", [{"payload": {"n": n}, "key": f"k{n}"} for n in range(2_500)])
        holder.execute("SELECT txid_current()")  # idle in transaction with an XID from here
        now = datetime.now(UTC) + timedelta(seconds=1)
        for _ in range(200):
            claimed = jobs.claim(["q"], "w", 10, now=now)
            assert len(claimed) == 10
            jobs.complete([Lease(j.id, j.lease_token, j.attempt) for j in claimed], now=now)
        # 2,000 jobs of the group claimed, each one's entries dead in the grouped indexes: a
        # claim from the start of the group visits each one's row; from the floor, the ten the
        # last claim took and the ten it takes.
        bounded = _entries_read(ledger, pg.url, schema, now, True, limited)
        full = _entries_read(ledger, pg.url, schema, now, False, limited)
        assert bounded < 50 and full > 2_000, (bounded, full)
        ledger.close()
    finally:
        holder.close()
        pg.drop_schema(schema)


@LIMITED
def test_a_job_this_process_makes_pending_below_a_floor_is_claimed_next(pg, limited):
    """A release gives a job back with its run time, below the floor the claims after it
    wrote; so does an enqueue dated in the past. Both come from this process: its next walk
    starts from the start, and the job is next in the group's order."""
    schema, url = pg.new_schema_url()
    try:
        ledger = _ledger(url, limited)
        jobs = _claimer(ledger)
        at = T0 + timedelta(seconds=100)
        ids = [
            ledger.enqueue("t", {"n": n}, key=f"k{n}", run_at=T0 + timedelta(seconds=n)).id
            for n in range(1, 8)
        ]
        [first] = jobs.claim(["q"], "w", 1, now=at)
        assert first.id == ids[0]
        assert [_claim_one(jobs, at) for _ in range(2)] == ids[1:3]  # floor past the first
        jobs.release([Lease(first.id, first.lease_token, first.attempt)], now=at)
        assert _claim_one(jobs, at) == ids[0]  # released below the floor: found at once
        assert _claim_one(jobs, at) == ids[3]
        old = ledger.enqueue("t", {"n": 0}, key="old", run_at=T0, now=at).id
        assert _claim_one(jobs, at) == old  # dated before the floor: found at once
        assert _claim_one(jobs, at) == ids[4]
        ledger.close()
    finally:
        pg.drop_schema(schema)


@LIMITED
def test_a_job_another_process_makes_pending_below_a_floor_waits_at_most_longest(pg, limited):
    """Another process's job dated before a group's floor is not seen by walks from the front
    while the floor may be trusted (checked from the start within ``LONGEST`` seconds of the
    walk's time); the first walk past that probes the group from the start and finds it. A walk
    at a time before the floor's check trusts nothing."""
    schema, url = pg.new_schema_url()
    try:
        ledger = _ledger(url, limited)
        jobs = _claimer(ledger)
        ids = [
            ledger.enqueue("t", {"n": n}, key=f"k{n}", run_at=T0 + timedelta(seconds=n)).id
            for n in range(1, 9)
        ]
        at = T0 + timedelta(seconds=100)
        assert [_claim_one(jobs, at) for _ in range(3)] == ids[:3]  # checked at T0 + 100 s
        other = _ledger(url)
        old = other.enqueue("t", {"n": 0}, key="old", run_at=T0, priority=5).id
        other.close()
        # Walks from the front, the floor trusted: the group's other jobs, in their order.
        assert _claim_one(jobs, at + timedelta(seconds=LONGEST - 1)) == ids[3]
        # Before the floor's check: a walk trusts nothing, and the new job is first (priority).
        assert _claim_one(jobs, at - timedelta(seconds=1)) == old
        # The floor is now T0 (that job's run time), checked at T0 + 99 s.
        other = _ledger(url)
        again = other.enqueue("t", {"n": 0}, key="again", run_at=T0 - timedelta(seconds=1))
        other.close()
        assert _claim_one(jobs, at) == ids[4]  # trusted at T0 + 100 s
        assert _claim_one(jobs, at + timedelta(seconds=LONGEST)) == again.id
        ledger.close()
    finally:
        pg.drop_schema(schema)
