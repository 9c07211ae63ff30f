"""The backend's observability methods, on both backends: queue depths from the partial indexes,
finished counts, per-minute rollups, dashboard sessions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg

from jobledger import Ledger
from jobledger._records import ClaimedJob, Failure, Lease, MinuteStats, digest
from jobledger._services.keys import create_api_key
from jobledger.observability.rollup import MinuteStatsRecorder

T0 = datetime(2026, 8, 10, 6, 0, tzinfo=UTC)


def _ledger_with_jobs(ledger: Ledger) -> None:
    ledger.task(lambda ctx, n: None, name="t", queue="a")
    ledger.task(lambda ctx, n: None, name="u", queue="b")
    for n in range(5):
        ledger.enqueue("t", {"n": n}, key=f"due-{n}", run_at=T0 - timedelta(seconds=60 * (n + 1)))
    ledger.enqueue("t", {"n": 99}, key="later", run_at=T0 + timedelta(hours=1))
    ledger.enqueue("u", {"n": 1}, key="b1", run_at=T0 - timedelta(seconds=5))


def test_queue_depths_count_live_states_and_the_oldest_due_job(ledger):
    _ledger_with_jobs(ledger)
    backend = ledger.backend
    [first, second] = backend.jobs.claim(["a"], "w1", 2, now=T0)  # the two oldest due of "a"
    assert {first.key, second.key} == {"due-4", "due-3"}
    lease = Lease(second.id, second.lease_token, second.attempt)
    failure = Failure(lease, retry=False, run_at=None, error_class="Permanent", message="no")
    backend.jobs.fail([failure], now=T0)
    later = T0 + timedelta(seconds=first.lease_seconds + 1)  # first's lease has expired by then
    depths = {d.queue: d for d in backend.stats.depths(now=later)}
    a, b = depths["a"], depths["b"]
    assert (a.pending, a.due, a.leased, a.expired_leases, a.dead) == (4, 3, 1, 1, 1)
    # The oldest due pending job of "a" is due-2, due 180 s before T0.
    assert abs(a.oldest_due_pending_seconds - (180 + first.lease_seconds + 1)) < 1e-3
    assert (b.pending, b.due, b.leased, b.dead) == (1, 1, 0, 0)
    assert backend.stats.finished_counts() == {}
    ledger.run_worker(["b"], burst=True, handle_signals=False)
    assert backend.stats.finished_counts() == {"b": {"done": 1}}
    assert "b" not in {d.queue for d in backend.stats.depths()}


def test_minute_stats_add_up_across_writers(ledger):
    backend = ledger.backend
    row = MinuteStats(
        T0,
        "a",
        "t",
        claimed=2,
        wait_sum=1.5,
        wait_max=1.0,
        done=1,
        run_count=1,
        run_sum=0.2,
        run_max=0.2,
    )
    other = MinuteStats(T0, "a", "t", claimed=1, wait_sum=3.0, wait_max=3.0, dead=1)
    backend.stats.minutes_add([row])
    backend.stats.minutes_add([other, MinuteStats(T0 + timedelta(minutes=1), "a", "t", done=4)])
    backend.stats.minutes_add([MinuteStats(T0 - timedelta(days=3), "a", "t", done=9)])
    rows = backend.stats.minutes(T0)
    assert [
        (r.minute, r.claimed, r.wait_sum, r.wait_max, r.done, r.dead, r.run_count) for r in rows
    ] == [
        (T0, 3, 4.5, 3.0, 1, 1, 1),
        (T0 + timedelta(minutes=1), 0, 0.0, 0.0, 4, 0, 0),
    ]
    assert backend.stats.minutes_prune(T0 - timedelta(days=2)) == 1
    assert len(backend.stats.minutes(T0 - timedelta(days=10))) == 2


def test_a_flush_writes_rows_of_claims_and_rows_of_outcomes_only_together(ledger):
    """One flush writes every row in one statement. A row that only counted outcomes (no claim,
    so no wait) sits beside rows with measured waits; on PostgreSQL each column goes as one
    typed array, so an ``int`` zero among ``float`` sums was refused (found by CI, through the
    pooler: the server's last flush at shutdown)."""
    recorder = MinuteStatsRecorder(clock=lambda: T0.timestamp())
    job = ClaimedJob(
        1, "a", "k1", "t", {}, 1, "0" * 32, T0 + timedelta(seconds=61), 60.0, T0, 0, None
    )
    recorder.claimed([job])
    recorder.finished("b", "u", "done", None)  # no claim and no measured run in this minute
    recorder.finished("c", "v", "dead", 0.25)
    assert recorder.flush(ledger.minute_stats) == 3
    got = {
        (r.queue, r.task): (r.claimed, r.wait_sum, r.done, r.dead, r.run_sum)
        for r in ledger.backend.stats.minutes(T0)
    }
    assert got == {
        ("a", "t"): (1, 1.0, 0, 0, 0.0),
        ("b", "u"): (0, 0.0, 1, 0, 0.0),
        ("c", "v"): (0, 0.0, 0, 1, 0.25),
    }
    # The backend takes whole numbers where it stores seconds, from any writer.
    ledger.backend.stats.minutes_add(
        [MinuteStats(T0, "a", "t", wait_sum=2, wait_max=2), MinuteStats(T0, "d", "w", wait_sum=0.5)]
    )
    assert {r.queue: r.wait_sum for r in ledger.backend.stats.minutes(T0)}["a"] == 3.0


def test_sessions_expire_and_follow_their_key(ledger):
    backend = ledger.backend
    key, record = create_api_key(backend, "ops", ["read"])
    expires = backend.api.session_insert(digest("token-1"), record.id, 60, now=T0)
    assert expires == T0 + timedelta(seconds=60)
    assert (
        backend.api.session_get(digest("token-1"), now=T0 + timedelta(seconds=59)).id == record.id
    )
    assert backend.api.session_get(digest("token-1"), now=T0 + timedelta(seconds=61)) is None
    assert backend.api.session_get(digest("other"), now=T0) is None
    backend.api.session_insert(digest("token-2"), record.id, 3600, now=T0)
    backend.api.key_revoke(record.id)
    assert backend.api.session_get(digest("token-2"), now=T0).revoked  # the caller refuses it
    assert backend.api.session_prune(now=T0 + timedelta(seconds=120)) == 1
    backend.api.session_delete(digest("token-2"))
    assert backend.api.session_get(digest("token-2"), now=T0) is None


def test_postgres_queue_depths_never_scan_the_jobs_table(pg):
    """Plenty of finished jobs, a few live ones: the depth query reads the partial indexes."""
    schema, url = pg.new_schema_url()
    try:
        ledger = Ledger(url)
        ledger.migrate()
        table = f"{schema}.jobledger_jobs"
        with psycopg.connect(pg.url) as conn:
            conn.execute(
                f"INSERT INTO {table} (queue, key, task, payload, state, run_at, attempts,"
                " max_attempts, attempt_limit, lease_seconds, created_at, updated_at, finished_at)"
                " SELECT 'q' || (i % 5), 'k' || i, 't', '{}', 'done', now(), 1, 10, 10, 60,"
                " now(), now(), now() FROM generate_series(1, 50000) AS i"
            )
            conn.execute(
                f"INSERT INTO {table} (queue, key, task, payload, state, run_at, attempts,"
                " max_attempts, attempt_limit, lease_seconds, created_at, updated_at)"
                " SELECT 'q' || (i % 5), 'p' || i, 't', '{}', 'pending', now(), 0, 10, 10, 60,"
                " now(), now() FROM generate_series(1, 50) AS i"
            )
            conn.execute(f"ANALYZE {table}")
            sql = ledger.backend.db.sql["queue_depths"]
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, {"now": None}))
        assert "Seq Scan on jobledger_jobs" not in plan, plan
        assert "jobledger_jobs_due" in plan, plan
        assert ledger.backend.stats.depths()[0].pending == 10
        ledger.close()
    finally:
        pg.drop_schema(schema)


def test_sqlite_queue_depths_read_only_the_partial_indexes(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path}/ledger.db")
    ledger.migrate()
    backend = ledger.backend
    plan = [
        row[3]
        for row in backend.db.connection().execute(
            "EXPLAIN QUERY PLAN " + backend.db.sql["queue_depths"], {"now": 0}
        )
    ]
    scans = [step for step in plan if step.startswith("SCAN jobledger_jobs")]
    assert scans == [
        "SCAN jobledger_jobs USING INDEX jobledger_jobs_due",
        "SCAN jobledger_jobs USING INDEX jobledger_jobs_group_due",
        "SCAN jobledger_jobs USING INDEX jobledger_jobs_leased",
        "SCAN jobledger_jobs USING INDEX jobledger_jobs_dead",
    ], plan
    ledger.close()
