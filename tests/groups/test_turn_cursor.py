"""The grouped claim's walk of the turns from where its process last found the front
(PostgreSQL, ``TurnCursor``): under a held xmin it reads a few pages where a walk from the start
visits the dead entry that every serve since the transaction began left in the turn index; and
it reads every row a walk from the start would, so the groups are served in the same order."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from jobledger import Ledger
from jobledger._records import Lease
from jobledger.backends.postgres.cursor import LONGEST, SPREAD, TurnCursor

from ..support.clock import Clock

T0 = datetime(2026, 8, 10, 6, 0, tzinfo=UTC)


def test_a_walk_starts_from_the_front_until_a_walk_from_the_start_is_due():
    clock = Clock()
    turns = TurnCursor(clock)
    assert turns.walk_from(["q"]) is None  # nothing walked yet: from the start
    turns.scanned_from_start(0.002, 10)
    turns.advance([("q", T0)], ["q"], None)
    assert turns.walk_from(["q", "idle"]) == [T0, None]
    assert turns.walk_from(["idle"]) is None  # no queue with a position
    clock.t += SPREAD * 0.002
    assert turns.walk_from(["q"]) is None  # a walk from the start is due
    turns.scanned_from_start(60.0, 1)
    clock.t += LONGEST - 0.001
    assert turns.walk_from(["q"]) == [T0]
    clock.t += 0.002
    assert turns.walk_from(["q"]) is None  # never longer apart than LONGEST


def test_a_claim_at_an_earlier_now_moves_the_position_back_to_the_turns_it_wrote():
    turns = TurnCursor(Clock())
    turns.scanned_from_start(0.5, 1)
    turns.advance([("q", T0), ("r", T0)], ["q", "r"], None)
    turns.advance([], ["q"], T0 - timedelta(seconds=5))  # wrote its groups' turns at T0 - 5 s
    assert turns.walk_from(["q", "r"]) == [T0 - timedelta(seconds=5), T0]
    turns.advance([("q", T0 + timedelta(seconds=1))], ["q"], T0 + timedelta(seconds=9))
    assert turns.walk_from(["q"]) == [T0 + timedelta(seconds=1)]


def _claimer(ledger: Ledger, clock: Clock) -> Any:
    """The ledger's jobs, their turn cursor on ``clock`` (standing still: a walk from the
    start is never due by itself)."""
    jobs = ledger.backend.jobs
    jobs._grouped.turns = TurnCursor(clock)  # type: ignore[attr-defined]
    return jobs


def _walk_buffers(conn: psycopg.Connection, schema: str, turn_from: datetime | None) -> int:
    """The buffers one walk of queue "q"'s turns reads (the function, and its probes)."""
    sql = (
        f"EXPLAIN (ANALYZE, BUFFERS) SELECT * FROM {schema}.jobledger_group_turns_from"
        "('q', now(), 10, 104, %s)"
    )
    lines = [r[0] for r in conn.execute(sql, (turn_from,))]
    conn.rollback()
    return int(re.search(r"shared hit=(\d+)", next(x for x in lines if "Buffers" in x))[1])  # type: ignore[index]


def test_under_a_held_xmin_the_walk_reads_a_few_pages_and_skips_nothing(pg):
    schema, url = pg.new_schema_url()
    holder = psycopg.connect(pg.url)
    try:
        ledger = Ledger(url)
        ledger.task(lambda ctx, n: None, name="t", queue="q", group=lambda p: f"g{p['n'] % 300}")
        clock = Clock()
        jobs = _claimer(ledger, clock)
        ledger.enqueue_many("t", [{"payload": {"n": n}, "key": f"k{n}"} for n in range(3_000)])
        holder.execute("SELECT txid_current()")  # idle in transaction with an XID from here
        for _ in range(60):
            claimed = jobs.claim(["q"], "w", 25)
            assert len(claimed) == 25
            jobs.complete([Lease(j.id, j.lease_token, j.attempt) for j in claimed])
        [front] = jobs._grouped.turns.walk_from(["q"])
        with psycopg.connect(pg.url) as conn:
            full = _walk_buffers(conn, schema, None)
            bounded = _walk_buffers(conn, schema, front)
        # 1,500 serves of 300 groups, each one's old entry dead in the turn index: a walk from
        # the start visits each one's row; the walk from the front starts past them.
        assert bounded * 5 < full, (bounded, full)

        # Another process adds jobs to a group and a new group: claimed as they come, with no
        # walk from the start due (the clock stands still).
        other = Ledger(url)
        other.task(lambda ctx, n: None, name="t", queue="q", group=lambda p: f"g{p['n'] % 301}")
        added = [other.enqueue("t", {"n": n}, key=f"x{n}").id for n in (0, 300)]
        other.close()
        seen: set[int] = set()
        while batch := jobs.claim(["q"], "w", 100):
            seen.update(j.id for j in batch)
            jobs.complete([Lease(j.id, j.lease_token, j.attempt) for j in batch])
        assert set(added) <= seen and len(seen) == 3_000 + 2 - 60 * 25
        ledger.close()
    finally:
        holder.close()
        pg.drop_schema(schema)


def _serve_order(jobs: Any, claims: int, start: int) -> list[str | None]:
    """The groups of ``claims`` claims of one job, a second apart from ``T0 + start`` s."""
    order = []
    for n in range(claims):
        [job] = jobs.claim(["q"], "w", 1, now=T0 + timedelta(seconds=start + n))
        jobs.complete([Lease(job.id, job.lease_token, job.attempt)])
        order.append(job.group)
    return order


def test_a_group_that_wakes_up_is_served_first_as_least_recently_served(pg):
    """Group c runs out of jobs while a and b are served on, and the walks start from the front
    they last found; a job for c, from this process or another, makes c the first group of
    the next claim, as the least recently served with a due job."""
    schema, url = pg.new_schema_url()
    try:
        ledger = Ledger(url)
        ledger.task(lambda ctx, n, g: None, name="t", queue="q", group=lambda p: p["g"])
        jobs = _claimer(ledger, Clock())
        items = [{"payload": {"n": n, "g": g}, "key": f"{g}{n}"} for g in "ab" for n in range(9)]
        ledger.enqueue_many("t", [*items, {"payload": {"n": 0, "g": "c"}, "key": "c0"}], now=T0)
        assert _serve_order(jobs, 7, 1) == ["a", "b", "c", "a", "b", "a", "b"]
        assert jobs._grouped.turns.walk_from(["q"]) is not None  # walking from the front
        ledger.enqueue("t", {"n": 1, "g": "c"}, key="c1", now=T0 + timedelta(seconds=9))
        assert _serve_order(jobs, 3, 10) == ["c", "a", "b"]
        assert _serve_order(jobs, 4, 13) == ["a", "b", "a", "b"]

        other = Ledger(url)
        other.task(lambda ctx, n, g: None, name="t", queue="q", group=lambda p: p["g"])
        other.enqueue("t", {"n": 2, "g": "c"}, key="c2", now=T0 + timedelta(seconds=19))
        other.close()
        assert _serve_order(jobs, 3, 20) == ["c", "a", "b"]
        ledger.close()
    finally:
        pg.drop_schema(schema)


def test_claims_at_an_earlier_now_are_still_served_in_turn_order(db_url):
    """A claim's ``now`` is the turn it writes: a claim at an earlier time writes turns before
    the front the walks start from (PostgreSQL), and the next walk must still see them, as
    SQLite's, which always walks from the start, does."""
    ledger = Ledger(db_url)
    ledger.task(lambda ctx, n, g: None, name="t", queue="q", group=lambda p: p["g"])
    jobs = _claimer(ledger, Clock()) if db_url.startswith("postgres") else ledger.backend.jobs
    items = [{"payload": {"n": n, "g": g}, "key": f"{g}{n}"} for g in "ab" for n in range(9)]
    ledger.enqueue_many("t", items, now=T0)
    assert _serve_order(jobs, 3, 10) == ["a", "b", "a"]  # turns a: T0+12, b: T0+11
    assert _serve_order(jobs, 1, 5) == ["b"]  # b's turn is now T0+5, before the front
    assert _serve_order(jobs, 1, 6) == ["b"]  # least recently served: b (T0+5), not a
    ledger.close()
