"""The claim that starts past what its process already took (PostgreSQL): under a held xmin it
reads a few index pages where a scan from the start visits every dead row left by the jobs
claimed since the transaction began; and what it skips is still claimed."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from jobledger import Ledger
from jobledger._records import Failure, Lease, NewJob
from jobledger.backends.postgres.cursor import LONGEST, SPREAD, ClaimCursor

from .support.clock import Clock

T0 = datetime(2026, 8, 10, 6, 0, tzinfo=UTC)


def _new(queue: str, priority: int, run_at: datetime | None) -> NewJob:
    return NewJob(queue, "k", "t", "{}", priority, run_at, 3, 30.0)


def test_a_claim_starts_from_the_position_until_a_scan_from_the_start_is_due():
    clock = Clock()
    cursor = ClaimCursor(clock)
    assert cursor.after(["q"]) is None  # nothing claimed yet: from the start
    cursor.scanned_from_start(0.002, 10)
    cursor.advance([("q", 0, T0, 7), ("q", 0, T0 + timedelta(seconds=1), 3), ("q", 1, T0, 9)])
    after = cursor.after(["q", "idle"])
    # The last in claim order: the lowest priority, then the latest run time, then the id.
    assert after == {
        "after_priority_0": 0,
        "after_run_at_0": T0 + timedelta(seconds=1),
        "after_id_0": 3,
        "after_priority_1": 2**31,
        "after_run_at_1": datetime(1970, 1, 1, tzinfo=UTC),
        "after_id_1": 0,
    }
    assert cursor.after(["idle"]) is None  # no queue with a position
    clock.t += SPREAD * 0.002
    assert cursor.after(["q"]) is None  # a scan from the start is due
    cursor.scanned_from_start(60.0, 1)
    clock.t += LONGEST - 0.001
    assert cursor.after(["q"]) is not None
    clock.t += 0.002
    assert cursor.after(["q"]) is None  # never longer apart than LONGEST


def test_what_this_process_places_ahead_of_a_position_sends_the_next_claim_to_the_start():
    cursor = ClaimCursor(Clock())
    cursor.scanned_from_start(0.5, 1)
    cursor.advance([("q", 1, T0, 5)])
    for behind in (_new("q", 1, T0 + timedelta(seconds=1)), _new("q", 0, T0), _new("r", 9, T0)):
        cursor.placed([behind])
        assert cursor.after(["q"]) is not None, behind
    cursor.placed([_new("q", 2, T0 + timedelta(days=1))])  # a higher priority
    assert cursor.after(["q"]) is None
    cursor.scanned_from_start(0.5, 1)
    cursor.placed([_new("q", 1, T0 - timedelta(seconds=1))])  # an earlier run time
    assert cursor.after(["q"]) is None


def test_a_job_made_pending_again_rewinds_only_when_the_position_would_not_see_it():
    """A retry, release or rescue by this process: a claim from the position looks at the same
    priority after the position and at every lower priority; anything else waits for a scan
    from the start, so the next claim is sent there — and only then (under a held xmin that
    scan is the dear one)."""
    cursor = ClaimCursor(Clock())
    cursor.scanned_from_start(0.5, 1)
    cursor.advance([("q", 1, T0, 5)])
    later = T0 + timedelta(seconds=30)
    for seen in (
        ("q", 1, later, 2, None),  # the same priority, due after the position (a backoff)
        ("q", 1, T0, 6, None),  # the same priority and run time, a later id
        ("q", 0, T0 - timedelta(days=1), 1, None),  # a lower priority, whenever due
        ("r", 9, T0, 1, None),  # a queue without a position: claimed from its start
        ("q", 7, T0, 1, "tenant"),  # grouped: claimed another way
    ):
        cursor.returned([seen])
        assert cursor.after(["q"]) is not None, seen
    for ahead in (
        ("q", 2, later, 9, None),  # a higher priority, however late
        ("q", 1, T0, 5, None),  # the position itself (released before it was run)
        ("q", 1, T0 - timedelta(seconds=1), 9, None),  # the same priority, due before it
    ):
        cursor.scanned_from_start(0.5, 1)
        cursor.returned([("q", 0, later, 1, None), ahead])
        assert cursor.after(["q"]) is None, ahead


def test_a_job_due_at_the_callers_own_now_counts_as_placed_at_that_time():
    """An insert at an explicit ``now`` (a job without a run time is due then) is compared with
    the position at that time, not at the clock's: a job enqueued at a ``now`` before the
    position is ahead of it, whatever the wall clock says (the model test runs at 2026-01-05)."""
    cursor = ClaimCursor(Clock())
    cursor.scanned_from_start(0.5, 1)
    cursor.advance([("q", 0, T0, 5)])
    cursor.placed([_new("q", 0, None)], T0 + timedelta(seconds=1))  # due after the position
    assert cursor.after(["q"]) is not None
    cursor.placed([_new("q", 0, None)], T0 - timedelta(seconds=1))  # due before it
    assert cursor.after(["q"]) is None


def test_a_job_of_this_process_that_becomes_due_ahead_of_the_position_rewinds_then():
    """A retry due later at the position's own priority is after the position when it is made;
    once nothing of that priority is due the position drops to a lower one, and a claim from it
    never looks up again. The first claim whose ``now`` reaches the retry's run time compares
    it with the position then, and scans from the start."""
    cursor = ClaimCursor(Clock())
    cursor.scanned_from_start(0.5, 1)
    cursor.advance([("q", 1, T0, 5)])
    retry_at = T0 + timedelta(seconds=5)
    cursor.returned([("q", 1, retry_at, 5, None)], T0)
    assert cursor.after(["q"], T0) is not None  # after the position: no rewind now
    cursor.advance([("q", 0, T0, 7)])  # nothing of priority 1 was due: priority 0 next
    assert cursor.after(["q"], T0 + timedelta(seconds=1)) is not None
    assert cursor.after(["r"], retry_at) is None  # another queue without a position
    assert cursor.after(["q"], retry_at) is None  # the retry is due, ahead of the position
    cursor.scanned_from_start(0.5, 1)
    assert cursor.after(["q"], retry_at) is not None  # once


def test_a_job_due_later_is_kept_even_before_a_position_and_only_rewinds_when_ahead():
    cursor = ClaimCursor(Clock())
    cursor.placed([_new("q", 2, T0 + timedelta(seconds=5))], T0)  # no position yet
    cursor.placed([_new("q", 0, T0 + timedelta(seconds=6))], T0)
    cursor.placed([_new("q", 9, None)], T0)  # due at once: found by any claim before lower ones
    cursor.scanned_from_start(0.5, 1)
    cursor.advance([("q", 1, T0, 3)])
    assert cursor.after(["q"], T0 + timedelta(seconds=4)) is not None
    assert cursor.after(["q"], T0 + timedelta(seconds=5)) is None  # priority 2 > 1
    cursor.scanned_from_start(0.5, 1)
    assert cursor.after(["q"], T0 + timedelta(seconds=7)) is not None  # priority 0: seen
    cursor.returned([("q", 5, T0 + timedelta(seconds=9), 4, "tenant")], T0)  # grouped
    assert cursor.after(["q"], T0 + timedelta(seconds=10)) is not None


def test_the_jobs_kept_for_later_are_bounded_and_keep_the_earliest(monkeypatch):
    from jobledger.backends.postgres import cursor as module

    monkeypatch.setattr(module, "WATCHED", 8)
    cursor = ClaimCursor(Clock())
    cursor.scanned_from_start(0.5, 1)
    cursor.advance([("q", 0, T0, 3)])
    cursor.returned([("q", 1, T0 + timedelta(seconds=s), s, None) for s in range(20, 0, -1)], T0)
    kept = cursor._later["q"]  # type: ignore[attr-defined]
    assert len(kept) <= 8
    assert min(kept)[0] == T0 + timedelta(seconds=1)
    assert cursor.after(["q"], T0 + timedelta(seconds=1)) is None


def test_a_claim_that_finds_nothing_looks_from_the_start_only_while_that_is_cheap():
    cursor = ClaimCursor(Clock())
    cursor.scanned_from_start(0.002, 1)
    assert cursor.found_nothing()
    cursor.scanned_from_start(0.2, 500)  # a big batch: its own work, not a walk
    assert cursor.found_nothing()
    cursor.scanned_from_start(0.2, 2)  # dead entries walked
    cursor.claimed_after(0.001)
    assert not cursor.found_nothing()
    cursor.claimed_after(0.03)  # a loaded machine: the claims from the position are slow too
    assert cursor.found_nothing()


def _scan_buffers(conn: psycopg.Connection, sql: str, params: dict) -> int:
    """The buffers the claim's scans of jobledger_jobs_due read (the index and the rows)."""
    lines = [r[0] for r in conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)]
    conn.rollback()  # EXPLAIN ANALYZE claimed the jobs: give them back
    total, scan = 0, False
    for line in lines:
        if "->" in line or line.lstrip().startswith("CTE"):  # a node of the plan
            scan = "Index Scan using jobledger_jobs_due" in line
        elif scan and "Buffers:" in line:
            total += int(re.search(r"shared hit=(\d+)", line)[1])  # type: ignore[index]
            scan = False
    return total


def test_under_a_held_xmin_the_claim_reads_a_few_pages_and_skips_nothing(pg):
    schema, url = pg.new_schema_url()
    holder = psycopg.connect(pg.url)
    try:
        ledger = Ledger(url)
        ledger.task(lambda ctx, n: None, name="t", queue="q")
        jobs = ledger.backend.jobs
        clock = Clock()  # stands still: a scan from the start is never due by itself
        jobs._cursor = ClaimCursor(clock)  # type: ignore[attr-defined]
        holder.execute("SELECT txid_current()")  # idle in transaction with an XID from here
        ledger.enqueue_many("t", [{"payload": {"n": n}, "key": f"k{n}"} for n in range(3_000)])
        for _ in range(25):
            claimed = jobs.claim(["q"], "w", 100)
            jobs.complete([Lease(j.id, j.lease_token, j.attempt) for j in claimed])
        after = jobs._cursor.after(["q"])  # type: ignore[attr-defined]
        assert after is not None
        db = ledger.backend.db
        params = {
            "queue_0": "q",
            "worker": "w",
            "now": None,
            "lease_seconds": None,
            "claim": "0" * 32,
        }
        with psycopg.connect(url.split("?")[0]) as conn:
            conn.execute(f"SET search_path = {schema}")
            full = _scan_buffers(conn, db.statement("job_claim", 10), params)
            bounded = _scan_buffers(conn, db.statement("job_claim_after", 10), params | after)
        # 2,500 dead entries at the front of the index: a scan from the start visits each
        # one's row; the claim from the position starts past them.
        assert bounded * 5 < full, (bounded, full)

        # Another process places jobs ahead of the position; a claim over 100 done jobs.
        other = Ledger(url)
        other.task(lambda ctx, n: None, name="t", queue="q")
        ahead = other.enqueue("t", {"n": -1}, key="ahead", priority=5).id
        early = other.enqueue("t", {"n": -2}, key="early", run_at=T0).id
        other.close()
        seen: set[int] = set()
        waited = False
        while True:
            batch = jobs.claim(["q"], "w", 100)
            if not batch and waited:
                break
            if not batch:
                # At the latest when the next scan from the start is due.
                clock.t += LONGEST
                waited = True
            seen.update(j.id for j in batch)
            jobs.complete([Lease(j.id, j.lease_token, j.attempt) for j in batch])
        assert {ahead, early} <= seen and len(seen) == 502
        ledger.close()
    finally:
        holder.close()
        pg.drop_schema(schema)


def test_a_burst_ends_only_when_a_claim_from_the_start_finds_nothing(pg, monkeypatch):
    """A burst worker drains what is due and returns: a job another process put ahead of this
    process's position is run, even when a scan from the start is neither due nor cheap (as
    under a held xmin, or on a busy machine)."""
    from jobledger.backends.postgres import cursor

    monkeypatch.setattr(cursor, "SPREAD", 1e9)
    monkeypatch.setattr(cursor, "LONGEST", 1e9)
    monkeypatch.setattr(cursor, "CHEAP", 0.0)
    monkeypatch.setattr(cursor, "WORSE", 0.0)
    schema, url = pg.new_schema_url()
    ran: list[str] = []
    worker, other = Ledger(url), Ledger(url)
    try:
        worker.migrate()
        for led in (worker, other):
            led.task(lambda ctx, n=0: ran.append(ctx.key), name="t", queue="q")
        worker.enqueue_many("t", [{"payload": {"n": i}, "key": f"a{i}"} for i in range(5)])
        worker.run_worker(["q"], burst=True, handle_signals=False)
        assert sorted(ran) == [f"a{i}" for i in range(5)]
        # Placed ahead of the worker's position by another process: a higher priority.
        other.enqueue("t", {"n": 9}, key="ahead", priority=5)
        stats = worker.run_worker(["q"], burst=True, handle_signals=False)
        assert ran[-1] == "ahead" and stats.completed == 1
    finally:
        worker.close()
        other.close()
        pg.drop_schema(schema)


@pytest.fixture
def still(pg, monkeypatch) -> Iterator[Ledger]:
    """A ledger on a schema of its own whose claim position never looks from the start by
    itself: its clock stands still, and a claim that finds nothing does not look back."""
    from jobledger.backends.postgres import cursor

    monkeypatch.setattr(cursor, "CHEAP", 0.0)
    monkeypatch.setattr(cursor, "WORSE", 0.0)
    schema, url = pg.new_schema_url()
    ledger = Ledger(url)
    try:
        ledger.task(lambda ctx, n: None, name="t", queue="q")
        ledger.backend.jobs._cursor = ClaimCursor(Clock())  # type: ignore[attr-defined]
        yield ledger
    finally:
        ledger.close()
        pg.drop_schema(schema)


def test_an_async_enqueue_ahead_of_the_position_is_claimed_at_once(still):
    """``AsyncLedger.enqueue`` in the process of a worker that claims from its position tells
    the position, as the sync enqueue does: the job is claimed by the next claim, not when a
    scan from the start is next due."""
    import asyncio

    from jobledger import AsyncLedger

    ledger = still
    jobs = ledger.backend.jobs
    ledger.enqueue_many("t", [{"payload": {"n": n}, "key": f"k{n}"} for n in range(5)])
    assert len(jobs.claim(["q"], "w", 10)) == 5
    assert jobs._cursor.after(["q"]) is not None  # type: ignore[attr-defined]

    async def enqueue_ahead() -> int:
        async with AsyncLedger.of(ledger) as aledger:
            return (await aledger.enqueue("t", {"n": -1}, key="ahead", priority=5)).id

    ahead = asyncio.run(enqueue_ahead())
    assert [j.id for j in jobs.claim(["q"], "w", 10)] == [ahead]


def _high_claimed(ledger: Ledger, lows: int) -> tuple[Any, Any]:
    """One job of priority 1 and ``lows`` of priority 0 enqueued at T0; the high one claimed
    (the position: priority 1). Returns the jobs role and the claimed job."""
    jobs = ledger.backend.jobs
    high = ledger.enqueue("t", {"n": 0}, key="high", priority=1, now=T0).id
    for n in range(lows):
        ledger.enqueue("t", {"n": n}, key=f"low{n}", now=T0)
    [first] = jobs.claim(["q"], "w", 1, now=T0)
    assert first.id == high
    return jobs, first


def _retry(jobs: Any, job: Any, at: datetime) -> None:
    lease = Lease(job.id, job.lease_token, job.attempt)
    jobs.fail([Failure(lease, True, at, "E", "again")], now=T0)


def test_a_retry_of_a_higher_priority_than_the_position_is_claimed_next(still):
    """A retry due after the position's run time, but of a higher priority than the position,
    is claimed by the next claim: a claim from the position never looks at higher priorities,
    so a retry (or a rescue) through this process sends the next claim to the start."""
    jobs, high = _high_claimed(still, lows=3)
    assert [j.id for j in jobs.claim(["q"], "w", 1, now=T0)] != [high.id]  # position: priority 0
    _retry(jobs, high, T0 + timedelta(seconds=5))
    later = T0 + timedelta(seconds=10)
    assert [j.id for j in jobs.claim(["q"], "w", 1, now=later)] == [high.id]


def test_a_retry_that_becomes_due_after_the_position_dropped_a_priority_is_claimed_next(still):
    """The counter-example the model test found: the high job fails with a retry due after the
    position (same priority, later), the claims in between drop the position to the low
    priority, and the claim at the retry's run time must take it, not another low job."""
    jobs, high = _high_claimed(still, lows=4)
    _retry(jobs, high, T0 + timedelta(seconds=5))
    for s in (1, 2):
        [low] = jobs.claim(["q"], "w", 1, now=T0 + timedelta(seconds=s))
        assert low.id != high.id
    later = T0 + timedelta(seconds=10)
    assert [j.id for j in jobs.claim(["q"], "w", 1, now=later)] == [high.id]
