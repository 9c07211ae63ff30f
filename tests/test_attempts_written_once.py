"""PostgreSQL writes an attempt's row once, when the attempt ends (migration 016): the claim
leases the job and writes nothing to the attempts table; while the job is leased its attempt
is read from the job's row (attempts, lease_token, leased_by, leased_at); the completion, the
failure, the release and the rescue each insert the ended attempt's row. An attempt whose row
was opened before 016 (or by a worker of that version) is closed in that row, not written
twice. The history an operator reads is the same as SQLite's, which still opens each row at
the claim (the conformance suite checks both)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from jobledger import Ledger
from jobledger._records import AttemptOutcome, Failure, Lease
from jobledger.backends.sqlfiles import migrations

pytestmark = pytest.mark.postgres_only

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@pytest.fixture
def ledger(pg):
    schema, url = pg.new_schema_url()
    led = Ledger(url)
    led.task(lambda ctx: None, name="t", queue="q", max_attempts=2, lease_seconds=60)
    led.migrate()
    try:
        yield led, schema
    finally:
        led.close()
        pg.drop_schema(schema)


def _rows(pg: Any, schema: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(pg.url, autocommit=True) as conn:
        return conn.execute(
            sql.SQL(
                "SELECT job_id, attempt, worker, started_at, finished_at, outcome, error_class "
                "FROM {}.jobledger_attempts ORDER BY job_id, attempt"
            ).format(sql.Identifier(schema))
        ).fetchall()


def _lease(job: Any) -> Lease:
    return Lease(job.id, job.lease_token, job.attempt)


def test_a_claim_writes_no_attempt_row_and_each_end_writes_one(pg, ledger):
    led, schema = ledger
    ids = [r.id for r in led.enqueue_many("t", [{"key": f"k{n}"} for n in range(4)], now=T0)]
    jobs, history = led.backend.jobs, led.backend.history
    claimed = {j.id: j for j in jobs.claim(["q"], "w1", 4, now=T0)}
    assert sorted(claimed) == ids
    assert _rows(pg, schema) == []
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
    assert _rows(pg, schema) == [
        (done.id, 1, "w1", T0, t1, "done", None),
        (failed.id, 1, "w1", T0, t1, "retry", "ValueError"),
        (released.id, 1, "w1", T0, t2, "released", None),
        (expired.id, 1, "w1", T0, T0 + timedelta(seconds=61), "lease_expired", "LeaseExpired"),
    ]
    # An ended attempt is not written again: a second completion under the same lease is
    # refused by the fence and leaves the row as it is.
    assert jobs.complete([_lease(done)], now=t3) == [done.id]
    assert _rows(pg, schema)[0] == (done.id, 1, "w1", T0, t1, "done", None)
    again = {j.id: j.attempt for j in jobs.claim(["q"], "w2", 4, now=t3)}
    assert again == {failed.id: 2, released.id: 2}  # (the rescued job is due at its rescue)
    assert [(a.attempt, a.worker, a.outcome) for a in history.attempts(failed.id)] == [
        (1, "w1", AttemptOutcome.RETRY),
        (2, "w2", None),
    ]


def test_an_attempt_opened_before_016_is_closed_in_its_own_row(pg, ledger):
    """A job leased before the migration (or by a worker of the version before it) has an open
    attempt row and no leased_at: 016 takes leased_at from that row, the history shows that
    row once, and the attempt's end closes it (its worker and start kept)."""
    led, schema = ledger
    ids = [r.id for r in led.enqueue_many("t", [{"key": f"k{n}"} for n in range(2)], now=T0)]
    jobs, history = led.backend.jobs, led.backend.history
    claimed = {j.id: j for j in jobs.claim(["q"], "w1", 2, now=T0)}
    earlier = T0 - timedelta(seconds=30)
    table = sql.Identifier(schema, "jobledger_attempts")
    with psycopg.connect(pg.url, autocommit=True) as conn:
        for job in claimed.values():  # as the claim of the version before 016 opened them
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} (job_id, attempt, lease_token, worker, started_at) "
                    "VALUES (%s, %s, %s, 'old-worker', %s)"
                ).format(table),
                (job.id, job.attempt, job.lease_token, earlier),
            )
        conn.execute(
            sql.SQL("ALTER TABLE {} DROP COLUMN leased_at").format(
                sql.Identifier(schema, "jobledger_jobs")
            )
        )
        [m016] = [m for m in migrations("postgres") if m.version == 16]
        with conn.transaction():
            conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema)))
            conn.execute(m016.sql.encode())
            started = conn.execute("SELECT leased_at FROM jobledger_jobs ORDER BY id").fetchall()
    assert started == [(earlier,), (earlier,)]
    for job_id in ids:
        assert [(a.worker, a.started_at, a.outcome) for a in history.attempts(job_id)] == [
            ("old-worker", earlier, None)
        ]

    first, second = (claimed[i] for i in ids)
    t1 = T0 + timedelta(seconds=1)
    assert jobs.complete([_lease(first)], now=t1) == []
    jobs.fail([Failure(_lease(second), False, None, "KeyError", "gone")], now=t1)
    assert _rows(pg, schema) == [
        (first.id, 1, "old-worker", earlier, t1, "done", None),
        (second.id, 1, "old-worker", earlier, t1, "dead", "KeyError"),
    ]
