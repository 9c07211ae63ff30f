"""An attempt's row is written once, when the attempt ends (migration 016): the claim leases the
job and writes nothing to the attempts table; while the job is leased its attempt is read from
the job's row (attempts, lease_token, leased_by, leased_at); the completion, the failure, the
release and the rescue each insert the ended attempt's row. An attempt whose row was opened
before 016 (or by a worker of that version, during a rolling upgrade) is closed in that row,
not written twice. On each backend."""

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
    assert _rows(url) == 4
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
    assert _rows(url) == 4


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
    assert _rows(url) == 2
    assert _ended(led, first.id) == [(1, "old-worker", earlier, t1, AttemptOutcome.DONE, None)]
    assert _ended(led, second.id) == [
        (1, "old-worker", earlier, t1, AttemptOutcome.DEAD, "KeyError")
    ]


def test_postgres_completions_insert_attempts_plainly_until_a_row_opened_before_016(pg):
    """A completion sends its attempts' rows as a plain insert (no ON CONFLICT: no speculative
    insertion per row). One that meets a row opened before 016 fails whole, changing nothing,
    and is sent again with ``attempt_open_row``, which closes that row; so do the completions
    after it, for ``OPEN_ROWS_SECONDS``."""
    schema, url = pg.new_schema_url()
    led = Ledger(url)
    led.task(lambda ctx: None, name="t", queue="q", max_attempts=2, lease_seconds=60)
    led.migrate()
    try:
        jobs = led.backend.jobs
        hot, sent = jobs._db.hot, []

        def recording(text: str, params: dict[str, Any]) -> list[Any]:
            sent.append("ON CONFLICT" in text)
            return hot(text, params)

        jobs._db.hot = recording
        led.enqueue_many("t", [{"key": f"k{n}"} for n in range(4)], now=T0)
        first, opened, other, last = jobs.claim(["q"], "w1", 4, now=T0)
        t1, earlier = T0 + timedelta(seconds=1), T0 - timedelta(seconds=30)
        assert jobs.complete([_lease(first)], now=t1) == []
        assert sent == [False]
        _execute(
            url,
            (
                "INSERT INTO jobledger_attempts (job_id, attempt, lease_token, worker, "
                "started_at) VALUES (?, ?, ?, 'old-worker', ?)",
                (opened.id, opened.attempt, opened.lease_token, earlier),
            ),
        )
        assert jobs.complete([_lease(opened), _lease(other)], now=t1) == []
        assert sent == [False, False, True]
        assert _ended(led, opened.id) == [(1, "old-worker", earlier, t1, AttemptOutcome.DONE, None)]
        assert _ended(led, other.id) == [(1, "w1", T0, t1, AttemptOutcome.DONE, None)]
        assert jobs.complete([_lease(last)], now=t1) == []
        assert sent == [False, False, True, True]
        assert _rows(url) == 4
        assert {j.state.value for j in led.jobs()} == {"done"}
    finally:
        led.close()
        pg.drop_schema(schema)
