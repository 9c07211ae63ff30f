"""An attempt's row is written once, when the attempt ends (migration 016), and never for the
attempt that completes its job: the claim leases the job and writes nothing to the attempts
table; while the job is leased its attempt is read from the job's row (attempts, lease_token,
leased_by, leased_at); the failure, the release and the rescue each insert the ended attempt's
row; the completion inserts none, for a job done is never leased again and its row keeps that
attempt, read from there with its end. An attempt whose row was opened before 016 (or by a
worker of that version, during a rolling upgrade) is closed in that row, not written twice, or
read as done once its job is. On each backend."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest
from psycopg import sql

from jobledger import Ledger
from jobledger._records import AttemptOutcome, Failure, Lease
from jobledger.backends.sqlfiles import migrations
from jobledger.backends.sqlite.database import split_statements

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@pytest.fixture
def ledger(db_url):
    led = Ledger(db_url)
    led.task(lambda ctx: None, name="t", queue="q", max_attempts=2, lease_seconds=60)
    led.migrate()
    try:
        yield led, db_url
    finally:
        led.close()


def _execute(url: str, *statements: tuple[str, tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Run statements on the ledger's tables outside the ledger (its schema on PostgreSQL, in
    one transaction); the rows of the last."""
    if url.startswith("sqlite"):
        with closing(sqlite3.connect(url[len("sqlite:///") :], isolation_level=None)) as conn:
            conn.execute("BEGIN IMMEDIATE")
            for text, params in statements:
                rows = conn.execute(text, params).fetchall()
            conn.execute("COMMIT")
            return rows
    [schema] = parse_qs(urlsplit(url).query)["schema"]
    base = url.split("?")[0]
    with psycopg.connect(base, autocommit=True) as conn, conn.transaction():
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema)))
        for text, params in statements:
            cur = conn.execute(text.replace("?", "%s").encode(), params or None)
            rows = cur.fetchall() if cur.description else []
        return rows


def _rows(url: str) -> int:
    [(count,)] = _execute(url, ("SELECT count(*) FROM jobledger_attempts", ()))
    return int(count)


def _lease(job: Any) -> Lease:
    return Lease(job.id, job.lease_token, job.attempt)


def _ended(led: Ledger, job_id: int) -> list[tuple[Any, ...]]:
    return [
        (a.attempt, a.worker, a.started_at, a.finished_at, a.outcome, a.error_class)
        for a in led.backend.history.attempts(job_id)
    ]


def test_a_claim_writes_no_attempt_row_and_each_end_writes_one(ledger):
    led, url = ledger
    ids = [r.id for r in led.enqueue_many("t", [{"key": f"k{n}"} for n in range(4)], now=T0)]
    jobs, history = led.backend.jobs, led.backend.history
    claimed = {j.id: j for j in jobs.claim(["q"], "w1", 4, now=T0)}
    assert sorted(claimed) == ids
    assert _rows(url) == 0
    for job_id in ids:
        [running] = history.attempts(job_id)
        assert (running.attempt, running.worker, running.started_at) == (1, "w1", T0)
        assert running.lease_token == claimed[job_id].lease_token
        assert running.finished_at is None and running.outcome is None

    done, failed, released, expired = (claimed[i] for i in ids)
    t1, t2, t3 = T0 + timedelta(seconds=1), T0 + timedelta(seconds=2), T0 + timedelta(seconds=3)
    assert jobs.complete([_lease(done)], now=t1) == []
    jobs.fail([Failure(_lease(failed), True, None, "ValueError", "boom")], now=t1)
    assert jobs.release([_lease(released)], now=t2) == []
    [rescued] = jobs.rescue(now=T0 + timedelta(seconds=61))
    assert rescued.job_id == expired.id
    assert _rows(url) == 3  # no row for the attempt that completed its job: the job's row has it
    assert _ended(led, done.id) == [(1, "w1", T0, t1, AttemptOutcome.DONE, None)]
    assert _ended(led, failed.id) == [(1, "w1", T0, t1, AttemptOutcome.RETRY, "ValueError")]
    assert _ended(led, released.id) == [(1, "w1", T0, t2, AttemptOutcome.RELEASED, None)]
    assert _ended(led, expired.id) == [
        (1, "w1", T0, T0 + timedelta(seconds=61), AttemptOutcome.LEASE_EXPIRED, "LeaseExpired")
    ]
    # An ended attempt is not written again: a second completion under the same lease is
    # refused by the fence and leaves the row as it is.
    assert jobs.complete([_lease(done)], now=t3) == [done.id]
    assert _ended(led, done.id) == [(1, "w1", T0, t1, AttemptOutcome.DONE, None)]
    again = {j.id: j.attempt for j in jobs.claim(["q"], "w2", 4, now=t3)}
    assert again == {failed.id: 2, released.id: 2}  # (the rescued job is due at its rescue)
    assert [(a.attempt, a.worker, a.outcome) for a in history.attempts(failed.id)] == [
        (1, "w1", AttemptOutcome.RETRY),
        (2, "w2", None),
    ]
    assert _rows(url) == 3


def test_an_attempt_opened_before_016_is_closed_in_its_own_row(ledger):
    """A job leased before the migration (or by a worker of the version before it) has an open
    attempt row and no leased_at: 016 takes leased_at from that row, the history shows that
    row once, and the attempt's end closes it (its worker and start kept)."""
    led, url = ledger
    ids = [r.id for r in led.enqueue_many("t", [{"key": f"k{n}"} for n in range(2)], now=T0)]
    jobs = led.backend.jobs
    claimed = {j.id: j for j in jobs.claim(["q"], "w1", 2, now=T0)}
    earlier = T0 - timedelta(seconds=30)
    sqlite = url.startswith("sqlite")
    at = earlier.timestamp() if sqlite else earlier
    # As the claim of the version before 016 opened them, and the schema before 016.
    opened = [
        (
            "INSERT INTO jobledger_attempts (job_id, attempt, lease_token, worker, started_at) "
            "VALUES (?, ?, ?, 'old-worker', ?)",
            (job.id, job.attempt, job.lease_token, at),
        )
        for job in claimed.values()
    ]
    [m016] = [m for m in migrations("sqlite" if sqlite else "postgres") if m.version == 16]
    migration = [(s, ()) for s in (split_statements(m016.sql) if sqlite else [m016.sql])]
    started = _execute(
        url,
        *opened,
        ("ALTER TABLE jobledger_jobs DROP COLUMN leased_at", ()),
        *migration,
        ("SELECT leased_at FROM jobledger_jobs ORDER BY id", ()),
    )
    assert started == [(at,), (at,)]
    for job_id in ids:
        assert [
            (a.worker, a.started_at, a.outcome) for a in led.backend.history.attempts(job_id)
        ] == [("old-worker", earlier, None)]

    first, second = (claimed[i] for i in ids)
    t1 = T0 + timedelta(seconds=1)
    assert jobs.complete([_lease(first)], now=t1) == []
    jobs.fail([Failure(_lease(second), False, None, "KeyError", "gone")], now=t1)
    assert _rows(url) == 2  # the completed job's open row is left as it was, and read as done
    assert _ended(led, first.id) == [(1, "old-worker", earlier, t1, AttemptOutcome.DONE, None)]
    assert _ended(led, second.id) == [
        (1, "old-worker", earlier, t1, AttemptOutcome.DEAD, "KeyError")
    ]


def test_a_job_done_reads_its_last_attempt_from_its_row_after_earlier_ones(ledger):
    """A job that failed once and then completed: its first attempt is a row, its second (the
    one that completed it) is read from the job's row, in order, with its token; and a write
    refused under the completing lease is told that its attempt came to "done" (a completion
    whose answer was lost, sent again)."""
    led, url = ledger
    [job_id] = [r.id for r in led.enqueue_many("t", [{"key": "k"}], now=T0)]
    jobs = led.backend.jobs
    [first] = jobs.claim(["q"], "w1", 1, now=T0)
    t1, t2, t3 = T0 + timedelta(seconds=1), T0 + timedelta(seconds=2), T0 + timedelta(seconds=3)
    jobs.fail([Failure(_lease(first), True, t1, "ValueError", "boom")], now=t1)
    [second] = jobs.claim(["q"], "w2", 1, now=t2)
    assert jobs.complete([_lease(second)], now=t3) == []
    assert _rows(url) == 1
    assert _ended(led, job_id) == [
        (1, "w1", T0, t1, AttemptOutcome.RETRY, "ValueError"),
        (2, "w2", t2, t3, AttemptOutcome.DONE, None),
    ]
    tokens = [a.lease_token for a in led.backend.history.attempts(job_id)]
    assert tokens == [first.lease_token, second.lease_token]
    assert jobs.settled([_lease(second)]) == {job_id: "done"}
    assert jobs.settled([_lease(first)]) == {job_id: "retry"}


def test_a_prune_counts_the_attempt_a_job_done_kept_in_its_row_once(ledger):
    """A prune reports the attempts it removed: a job done by a completion of this version
    counts the attempt its row kept; one whose completing attempt has a row (written by an
    earlier version) counts that row, not both."""
    led, url = ledger
    ids = [r.id for r in led.enqueue_many("t", [{"key": f"k{n}"} for n in range(2)], now=T0)]
    jobs = led.backend.jobs
    claimed = {j.id: j for j in jobs.claim(["q"], "w1", 2, now=T0)}
    t1 = T0 + timedelta(seconds=1)
    assert jobs.complete([_lease(j) for j in claimed.values()], now=t1) == []
    older = claimed[ids[1]]
    at = t1.timestamp() if url.startswith("sqlite") else t1
    _execute(
        url,
        (
            "INSERT INTO jobledger_attempts (job_id, attempt, lease_token, worker, started_at, "
            "finished_at, outcome) VALUES (?, ?, ?, 'w1', ?, ?, 'done')",
            (older.id, older.attempt, older.lease_token, at, at),
        ),
    )
    assert _rows(url) == 1
    for job_id in ids:
        assert [(a.attempt, a.outcome) for a in led.backend.history.attempts(job_id)] == [
            (1, AttemptOutcome.DONE)
        ]
    result = led.prune(timedelta(days=1), now=T0 + timedelta(days=2))
    assert (result.jobs, result.attempts) == (2, 2)
    assert _rows(url) == 0
