"""The hot path's batching keeps every guarantee: large enqueue batches (COPY on PostgreSQL),
prefetched jobs whose leases are renewed while they wait, tokens that cannot be anyone's,
writers of one process taking turns on SQLite, and ``jobledger worker --processes N``."""

from __future__ import annotations

import re
import signal
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from jobledger import BackendUnavailable, JobSpec, JobState, KeyConflict, Ledger
from jobledger._records import AttemptOutcome, Failure, Lease

from ..support.processes import wait_exit, wait_until, worker_process
from .conftest import T0, at, enqueue, lease_of

BIG = 150  # above the size from which PostgreSQL enqueues through COPY


def test_a_large_batch_is_written_with_its_fields(ledger, tasks):
    specs = [JobSpec({"n": n}, key=f"k{n}", priority=n % 3, delay=n) for n in range(BIG)]
    results = ledger.enqueue_many("work", specs, now=T0)
    assert all(r.created for r in results) and len({r.id for r in results}) == BIG
    rows = {j.key: j for j in ledger.jobs()}
    assert len(rows) == BIG
    row = rows["k7"]
    assert (row.payload, row.priority, row.run_at, row.created_at) == ({"n": 7}, 1, at(7), T0)
    assert row.max_attempts == 3 and row.lease_seconds == 30 and row.correlation_id


def test_a_large_batch_with_a_conflict_writes_nothing(ledger, tasks):
    enqueue(ledger, 1)
    specs = [JobSpec({"n": n}, key=f"new{n}") for n in range(BIG)]
    specs.append(JobSpec({"n": 99}, key="k1"))
    with pytest.raises(KeyConflict):
        ledger.enqueue_many("work", specs, now=T0)
    assert [j.key for j in ledger.jobs()] == ["k1"]


def test_a_large_batch_reports_existing_duplicate_and_conflicting_keys(ledger, tasks):
    existing = enqueue(ledger, 1)
    specs = [JobSpec({"n": n}, key=f"new{n}") for n in range(BIG)]
    specs += [
        JobSpec({"n": 1}, key="k1"),  # exists, same payload
        JobSpec({"n": 2}, key="k1"),  # exists, other payload
        JobSpec({"n": 0}, key="new0"),  # a duplicate of the batch's first job
    ]
    results = ledger.enqueue_many("work", specs, now=T0, on_conflict="report")
    assert all(r.created and not r.conflict for r in results[:BIG])
    assert [(r.id, r.created, r.conflict) for r in results[BIG:]] == [
        (existing, False, False),
        (existing, False, True),
        (results[0].id, False, False),
    ]
    assert len(ledger.jobs()) == BIG + 1


def test_a_token_that_is_not_a_token_is_stale_not_an_error(ledger, tasks):
    job_id = enqueue(ledger, 1)
    [job] = ledger.backend.jobs.claim(["q"], "w", 1, now=T0)
    bogus = Lease(job_id, "not-a-token,}{", job.attempt)
    assert ledger.backend.jobs.complete([bogus], now=T0) == [job_id]
    assert ledger.backend.jobs.heartbeat([bogus], now=T0) == {}
    [failed] = ledger.backend.jobs.fail([Failure(bogus, True, None, "E", "x")], now=T0)
    assert failed.state is None
    assert ledger.job(job_id).state is JobState.LEASED
    assert ledger.backend.jobs.complete([lease_of(job)], now=T0) == []
    assert ledger.job(job_id).state is JobState.DONE


def test_completing_the_same_lease_twice_in_one_batch_completes_it_once(ledger, tasks):
    job_id = enqueue(ledger, 1)
    [job] = ledger.backend.jobs.claim(["q"], "w", 1, now=T0)
    assert ledger.backend.jobs.complete([lease_of(job), lease_of(job)], now=at(1)) == []
    [attempt] = ledger.backend.history.attempts(job_id)
    assert attempt.outcome is AttemptOutcome.DONE and attempt.finished_at == at(1)


def test_a_stale_lease_in_a_large_completion_changes_nothing_and_the_others_complete(ledger, tasks):
    """600 leases in one call (more than one statement's chunk), one of them the token of an
    attempt that expired: 599 jobs done with their attempts closed, the stale one reported and
    left as it was (leased by its new attempt, which stays open)."""
    specs = [JobSpec({"n": n}, key=f"k{n}") for n in range(600)]
    ledger.enqueue_many("work", specs, now=T0)
    [first] = ledger.backend.jobs.claim(["q"], "w", 1, now=T0)
    assert [r.job_id for r in ledger.backend.jobs.rescue(now=at(31))] == [first.id]
    jobs = ledger.backend.jobs.claim(["q"], "w", 600, now=at(32))
    assert len(jobs) == 600 and first.id in {j.id for j in jobs}
    again = next(j for j in jobs if j.id == first.id)
    leases = [lease_of(first) if j.id == first.id else lease_of(j) for j in jobs]
    assert ledger.backend.jobs.complete(leases, now=at(33)) == [first.id]
    states = {j.id: j.state for j in ledger.jobs()}
    assert states.pop(first.id) is JobState.LEASED
    assert set(states.values()) == {JobState.DONE} and len(states) == 599
    row = ledger.job(first.id)
    assert (row.lease_token, row.attempts, row.finished_at) == (again.lease_token, 2, None)
    expired, current = ledger.backend.history.attempts(first.id)
    assert expired.outcome is AttemptOutcome.LEASE_EXPIRED
    assert (current.lease_token, current.outcome, current.finished_at) == (
        again.lease_token,
        None,
        None,
    )
    for job in jobs[:3] + jobs[-3:]:
        if job.id != first.id:
            [attempt] = ledger.backend.history.attempts(job.id)
            assert (attempt.outcome, attempt.finished_at) == (AttemptOutcome.DONE, at(33))
    # The current lease still completes it.
    assert ledger.backend.jobs.complete([lease_of(again)], now=at(34)) == []
    assert ledger.job(first.id).state is JobState.DONE


def test_a_claim_and_a_completion_of_any_count_open_and_close_every_attempt(ledger, tasks):
    """437 jobs: SQLite opens and closes their attempts in statements of several sizes (256,
    128, 32, 16, 4 and 1 rows); none is left out or written twice."""
    specs = [JobSpec({"n": n}, key=f"k{n}") for n in range(437)]
    ledger.enqueue_many("work", specs, now=T0)
    jobs = ledger.backend.jobs.claim(["q"], "w", 437, now=at(1))
    assert len({j.id for j in jobs}) == 437
    assert ledger.backend.jobs.complete([lease_of(j) for j in jobs], now=at(2)) == []
    assert {j.state for j in ledger.jobs()} == {JobState.DONE}
    for job in jobs:
        [attempt] = ledger.backend.history.attempts(job.id)
        assert (attempt.lease_token, attempt.started_at, attempt.outcome, attempt.finished_at) == (
            job.lease_token,
            at(1),
            AttemptOutcome.DONE,
            at(2),
        )


def test_prefetched_jobs_keep_their_leases_while_they_wait(ledger):
    release = threading.Event()

    @ledger.task(queue="w", lease_seconds=0.6, max_attempts=3)
    def slow(ctx, n: int) -> None:
        if n == 0:
            release.wait(60)

    first, _ = ledger.enqueue(slow, {"n": 0}, key="first", priority=1)
    waiting = [ledger.enqueue(slow, {"n": n}, key=f"w{n}").id for n in range(1, 4)]
    # One thread, three more jobs claimed ahead: they wait behind the first for three lease
    # periods, while an eager rescuer would hand out any lease that ran out.
    worker = ledger.worker(["w"], concurrency=1, batch_size=4, prefetch=3, rescue_interval=0.05)
    t = threading.Thread(target=worker.run)
    t.start()
    try:
        wait_until(lambda: all(ledger.job(i).state is JobState.LEASED for i in waiting))
        until = ledger.job(waiting[0]).lease_until
        wait_until(
            lambda: ledger.job(waiting[0]).lease_until >= until + timedelta(seconds=1.2),
            what="the waiting jobs' leases to be renewed past three lease periods",
        )
        release.set()
        wait_until(lambda: worker.stats.completed == 4, what="all four completions")
    finally:
        release.set()
        worker.stop()
        t.join(10)
    assert [ledger.job(i).attempts for i in [first, *waiting]] == [1, 1, 1, 1]
    assert worker.stats.lease_lost == 0 and worker.stats.rescued == 0


def test_shutdown_gives_back_prefetched_jobs_uncharged(ledger):
    release = threading.Event()
    started = threading.Event()

    @ledger.task(queue="w", lease_seconds=30)
    def blocking(ctx, n: int) -> None:
        if n == 0:
            started.set()
            release.wait(60)

    ledger.enqueue(blocking, {"n": 0}, key="first", priority=1)
    waiting = [ledger.enqueue(blocking, {"n": n}, key=f"w{n}").id for n in range(1, 4)]
    worker = ledger.worker(["w"], concurrency=1, batch_size=4, prefetch=3)
    t = threading.Thread(target=worker.run)
    t.start()
    try:
        wait_until(started.is_set, what="the first job to start")
        wait_until(lambda: all(ledger.job(i).state is JobState.LEASED for i in waiting))
        worker.stop()
        wait_until(
            lambda: all(ledger.job(i).state is JobState.PENDING for i in waiting),
            what="the prefetched jobs to be given back",
        )
        release.set()
    finally:
        release.set()
        t.join(10)
    for job_id in waiting:
        row = ledger.job(job_id)
        assert row.budget_left == row.max_attempts
        outcomes = [a.outcome for a in ledger.backend.history.attempts(job_id)]
        assert outcomes == [AttemptOutcome.RELEASED]
    assert worker.stats.released == 3 and worker.stats.completed == 1


def test_sqlite_writers_of_one_process_still_time_out(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path}/ledger.db?busy_timeout=200")
    ledger.task(lambda ctx, n: None, name="t", queue="q")
    ledger.migrate()
    holding, done = threading.Event(), threading.Event()

    def hold() -> None:
        with ledger.backend.transaction():
            holding.set()
            done.wait(60)

    t = threading.Thread(target=hold)
    t.start()
    try:
        wait_until(holding.is_set, what="the write transaction")
        with pytest.raises(BackendUnavailable, match="locked"):
            ledger.enqueue("t", {"n": 1}, key="k")
    finally:
        done.set()
        t.join(10)
    assert ledger.enqueue("t", {"n": 1}, key="k").created
    ledger.close()


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def test_processes_share_the_work_of_one_worker_command(ledger, db_url, tmp_path):
    barrier = tmp_path / "start"
    ledger.task(lambda ctx, n: None, name="noop", queue="drill")
    ledger.enqueue_many("noop", [{"payload": {"n": n}, "key": f"n{n}"} for n in range(1000)])
    proc = worker_process(
        "tests.apps.drill_app:ledger",
        db_url,
        "--burst",
        "--processes",
        "2",
        "--concurrency",
        "2",
        env={"DRILL_START_BARRIER": str(barrier)},
    )
    # Both children import the app and wait at the barrier; the barrier releases them together.
    wait_until(lambda: len(_children(proc.pid)) == 2, what="two worker processes")
    barrier.touch()
    code, _out, err = wait_exit(proc, 120)
    assert code == 0, err
    claimed = [int(n) for n in re.findall(r"claimed (\d+)", err)]
    assert len(claimed) == 2 and sum(claimed) == 1000, err
    if ledger.url.dialect == "postgres":
        # SQLite does not share its write lock fairly between processes (docs/backends.md):
        # a process that drains fast can take every claim before the other's busy handler
        # wakes. There both processes run and finish; the work is done once between them.
        assert min(claimed) > 0, err
    assert "2 worker processes done" in err
    assert all(j.state is JobState.DONE and j.attempts == 1 for j in ledger.jobs())


def test_processes_stop_together_on_sigterm(ledger, db_url, tmp_path):
    started, go = tmp_path / "started", tmp_path / "go"
    ledger.task(lambda ctx, n: None, name="send", queue="drill")
    ledger.task(lambda ctx, n: None, name="noop", queue="drill")
    jobs = [ledger.enqueue("send", {"n": n}, key=f"block{n}").id for n in range(2)]
    proc = worker_process(
        "tests.apps.lifecycle_app:ledger",
        db_url,
        "--processes",
        "2",
        "--concurrency",
        "1",
        "--poll-interval",
        "0.05",
        env={"LIFECYCLE_STARTED": str(started), "LIFECYCLE_GO": str(go)},
    )
    try:
        # Each child runs one blocking job: both are up, with their signal handlers in place.
        wait_until(
            lambda: len({ledger.job(i).leased_by for i in jobs} - {None}) == 2,
            timeout=60,
            what="each worker process to hold one job",
        )
        proc.send_signal(signal.SIGTERM)
        go.touch()
        code, _out, err = wait_exit(proc, 60)
    finally:
        go.touch()
        if proc.poll() is None:
            proc.kill()
    assert code == 0, err
    assert len(re.findall(r"worker done", err)) == 2, err
    assert all(ledger.job(i).state is JobState.DONE for i in jobs)


def test_a_batch_keeps_keys_and_payloads_with_quotes_braces_and_backslashes(ledger, tasks):
    odd = ['a"b', "c\\d", "e,f", "{g}", "h i", "NULL", "ü:ß€", "'q'", 'back\\"slash', 'x{"a": 1}']
    specs = [
        JobSpec({"n": i, "text": key, "nested": {"k": [key, None, 1.5]}}, key=key)
        for i, key in enumerate(odd)
    ]
    ledger.task(lambda ctx, **payload: None, name="blob", queue="q")
    results = ledger.enqueue_many("blob", specs, now=T0)
    assert all(r.created for r in results)
    rows = {j.key: j for j in ledger.jobs()}
    assert sorted(rows) == sorted(odd)
    for i, key in enumerate(odd):
        assert rows[key].payload == {"n": i, "text": key, "nested": {"k": [key, None, 1.5]}}
    again = ledger.enqueue_many("blob", specs, now=T0)
    assert [r.id for r in again] == [r.id for r in results] and not any(r.created for r in again)


def test_postgres_hot_path_reconnects_after_sessions_are_cut(pg):
    import psycopg

    schema, url = pg.new_schema_url()
    ledger = Ledger(url)
    try:
        ledger.task(lambda ctx, n: None, name="t", queue="q")
        ledger.enqueue_many("t", [{"payload": {"n": n}, "key": f"a{n}"} for n in range(3)])
        ledger.backend.jobs.claim(["q"], "w", 1)  # every pool has a connection now
        claimed = []
        for step in ("enqueue", "enqueue_many", "claim", "complete", "fail"):
            with psycopg.connect(pg.url, autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = %s AND pid <> pg_backend_pid()",
                    (pg.dbname,),
                )
            # The statement is sent again on a new connection, once.
            if step == "enqueue":
                assert ledger.enqueue("t", {"n": 9}, key="b").created
            elif step == "enqueue_many":
                results = ledger.enqueue_many("t", [{"payload": {"n": 8}, "key": "c"}] * 2)
                assert results[0].created and results[1].id == results[0].id
            elif step == "claim":
                claimed = ledger.backend.jobs.claim(["q"], "w", 10)
                assert len(claimed) == 4
            elif step == "complete":  # an outcome: its batch too, on the main pool
                done = [Lease(j.id, j.lease_token, j.attempt) for j in claimed[:2]]
                assert ledger.backend.jobs.complete(done) == []
                assert {ledger.job(j.id).state for j in claimed[:2]} == {JobState.DONE}
            else:
                failure = Failure(
                    Lease(claimed[2].id, claimed[2].lease_token, claimed[2].attempt),
                    True,
                    None,
                    "E",
                    "boom",
                )
                [result] = ledger.backend.jobs.fail([failure])
                assert result.state is JobState.PENDING
    finally:
        ledger.close()
        pg.drop_schema(schema)
