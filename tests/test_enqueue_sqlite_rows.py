"""SQLite inserts a batch of new jobs many rows a statement (``job_insert_rows``), in chunks
that the connection's limit on bound values allows: each job's id is the one of its own key,
whatever the chunks, and a batch with a known key, a tombstoned key or a key named twice is
answered job by job exactly as before (the behaviour itself: tests/conformance/test_enqueue.py
and test_prune.py)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jobledger import KeyConflict, Ledger
from jobledger._records import Lease, NewJob
from jobledger.backends.rows import _decode
from jobledger.backends.sqlite.jobs import _MAX_ROWS, _chunks

T0 = datetime(2026, 8, 10, 6, 0, tzinfo=UTC)
DAY = 24 * 3600.0


def _batch(n: int, prefix: str = "k", first: int = 0) -> list[dict[str, Any]]:
    return [{"payload": {"n": i}, "key": f"{prefix}{i}"} for i in range(first, first + n)]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


@pytest.fixture
def ledger(path: Path) -> Iterator[Ledger]:
    led = Ledger(f"sqlite:///{path}")
    led.migrate()

    @led.task(queue="q", max_attempts=3, lease_seconds=30)
    def work(ctx: Any, n: int = 0) -> None:
        pass

    try:
        yield led
    finally:
        led.close()


@pytest.fixture
def inserts(ledger: Ledger) -> list[str]:
    """The job inserts this thread's connection of the ledger ran (their text, values written
    in). The trace names a statement again for each trigger it runs: once is enough here."""
    sent: list[str] = []

    def trace(text: str) -> None:
        if text.startswith("INSERT INTO jobledger_jobs") and (not sent or sent[-1] != text):
            sent.append(text)

    ledger.backend.db.connection().set_trace_callback(trace)
    return sent


def _ids_by_key(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as conn:
        return dict(conn.execute("SELECT key, id FROM jobledger_jobs"))


def _rows(statement: str) -> int:
    """How many jobs one insert carried (one per ``(`` of its VALUES list)."""
    return statement.split("VALUES", 1)[1].split(") AS v")[0].count("(")


def test_chunk_sizes_are_the_largest_then_powers_of_two() -> None:
    assert _chunks(1, 250) == [1]
    assert _chunks(250, 250) == [250]
    assert _chunks(251, 250) == [250, 1]
    assert _chunks(1000, 250) == [250] * 4
    assert _chunks(249, 250) == [128, 64, 32, 16, 8, 1]
    assert _chunks(20, 9) == [9, 9, 2]
    for n in range(0, 600):
        sizes = _chunks(n, 250)
        assert sum(sizes) == n and all(0 < s <= 250 for s in sizes)


@pytest.mark.parametrize("n", [1, 2, 249, 250, 251, 1000])
def test_each_job_gets_the_id_of_its_key(ledger, path, inserts, n):
    ledger.enqueue("work", {"n": -1}, key="before", now=T0)  # ids do not start at 1
    inserts.clear()
    results = ledger.enqueue_many("work", _batch(n), now=T0)
    assert all(r.created and not r.conflict and not r.pruned for r in results)
    ids = _ids_by_key(path)
    assert [r.id for r in results] == [ids[f"k{i}"] for i in range(n)]
    if n > 1:  # (a single job is one job_insert, as an enqueue)
        assert [_rows(s) for s in inserts] == _chunks(n, _MAX_ROWS)


def test_the_values_of_each_job_are_stored_whatever_its_chunk(ledger, path, inserts):
    batch = _batch(300)
    for i in (0, 249, 250, 299):
        batch[i] |= {
            "delay": 30 + i,
            "priority": i - 100,
            "group": f"tenant-{i}",
            "correlation_id": f"corr-{i}",
        }
    results = ledger.enqueue_many("work", batch, now=T0)
    assert [_rows(s) for s in inserts] == [250, 32, 16, 2]
    for i, result in enumerate(results):
        job = ledger.job(result.id)
        assert (job.key, job.payload, job.max_attempts, job.lease_seconds) == (
            f"k{i}",
            {"n": i},
            3,
            30.0,
        )
        if i in (0, 249, 250, 299):
            assert (job.run_at, job.priority, job.group, job.correlation_id) == (
                T0 + timedelta(seconds=30 + i),
                i - 100,
                f"tenant-{i}",
                f"corr-{i}",
            )
        else:
            assert (job.run_at, job.priority, job.group) == (T0, 0, None)
            assert job.correlation_id is not None and len(job.correlation_id) == 32


def test_a_low_limit_on_bound_values_makes_small_chunks(ledger, path, inserts):
    conn = ledger.backend.db.connection()
    conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 100)  # (100 - 1) // 11: 9 a statement
    results = ledger.enqueue_many("work", _batch(40), now=T0)
    assert [_rows(s) for s in inserts] == [9, 9, 9, 9, 4]
    assert all(r.created for r in results)
    ids = _ids_by_key(path)
    assert [r.id for r in results] == [ids[f"k{i}"] for i in range(40)]
    conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 12)  # one job a statement
    more = ledger.enqueue_many("work", _batch(5, first=40), now=T0)
    assert [r.id for r in more] == [_ids_by_key(path)[f"k{i}"] for i in range(40, 45)]


def test_a_key_named_twice_in_a_later_chunk_goes_job_by_job(ledger, path):
    batch = _batch(1000)
    batch[600] = {"payload": {"n": 10}, "key": "k10"}  # the same job again
    results = ledger.enqueue_many("work", batch, now=T0)
    assert [r.created for r in results] == [i != 600 for i in range(1000)]
    assert results[600].id == results[10].id and not results[600].conflict
    ids = _ids_by_key(path)
    assert len(ids) == 999
    assert all(results[i].id == ids[f"k{i}"] for i in range(1000) if i != 600)

    other = _batch(1000, "o")
    other[700] = {"payload": {"n": -1}, "key": "o10"}  # the same key, another payload
    with pytest.raises(KeyConflict):
        ledger.enqueue_many("work", other, now=T0)
    assert len(_ids_by_key(path)) == 999  # nothing of that batch, not even its first chunks


def test_a_known_key_in_the_middle_of_a_batch(ledger, path):
    present = ledger.enqueue("work", {"n": 555}, key="k555", now=T0).id
    results = ledger.enqueue_many("work", _batch(1000), now=T0)
    assert [r.created for r in results] == [i != 555 for i in range(1000)]
    assert results[555].id == present
    ids = _ids_by_key(path)
    assert [r.id for r in results] == [ids[f"k{i}"] for i in range(1000)]


def test_a_tombstoned_key_in_the_middle_of_a_batch(ledger, path):
    job_id = ledger.enqueue("work", {"n": 300}, key="k300", now=T0).id
    [job] = ledger.backend.jobs.claim(["q"], "w", 10, now=T0)
    ledger.backend.jobs.complete([Lease(job.id, job.lease_token, job.attempt)], now=T0)
    ledger.prune(DAY, keep_keys=timedelta(days=365), now=T0 + timedelta(days=2))
    later = T0 + timedelta(days=3)

    results = ledger.enqueue_many("work", _batch(1000), now=later)
    assert (results[300].id, results[300].created, results[300].pruned) == (job_id, False, True)
    assert all(r.created for i, r in enumerate(results) if i != 300)
    ids = _ids_by_key(path)
    assert "k300" not in ids and len(ids) == 999
    assert all(results[i].id == ids[f"k{i}"] for i in range(1000) if i != 300)

    again = _batch(1000, "t")
    again[400] = {"payload": {"n": 1}, "key": "k300"}  # the pruned key, another payload
    with pytest.raises(KeyConflict):
        ledger.enqueue_many("work", again, now=later)
    assert len(_ids_by_key(path)) == 999


def test_a_batch_in_the_callers_transaction(ledger, path):
    ledger.enqueue("work", {"n": -1}, key="before", now=T0)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        results = ledger.enqueue_many("work", _batch(600), conn=conn, now=T0)
        conn.execute("ROLLBACK")
        assert set(_ids_by_key(path)) == {"before"}
        conn.execute("BEGIN")
        results = ledger.enqueue_many("work", _batch(600), conn=conn, now=T0)
        conn.execute("COMMIT")
    finally:
        conn.close()
    ids = _ids_by_key(path)
    assert [r.id for r in results] == [ids[f"k{i}"] for i in range(600)]


def _new_job(i: int, group: str | None = None, trace: str | None = None) -> NewJob:
    return NewJob("q", f"n{i}", "work", f'{{"n":{i}}}', 0, None, 3, 30.0, f"c{i}", group, trace)


def test_groups_and_trace_contexts_are_bound_only_in_the_chunks_that_have_them(
    ledger, path, inserts
):
    """A chunk without groups and trace contexts writes them as NULL in its statement; a chunk
    with one binds both columns for all its jobs (None for the others)."""
    jobs = [_new_job(i) for i in range(600)]
    jobs[260] = _new_job(260, group="tenant-1")  # the second chunk
    jobs[599] = _new_job(599, trace='{"traceparent": "00-ab-cd-01"}')  # the last one
    results = ledger.backend.jobs.insert(jobs, T0)
    assert [_rows(s) for s in inserts] == [250, 250, 64, 32, 4]
    # The statements made (by size, and whether plain); a trace shows bound NULLs as NULL too.
    made = set(ledger.backend.jobs._row_statements)
    assert made == {(250, True), (250, False), (64, True), (32, True), (4, False)}
    with sqlite3.connect(path) as conn:
        stored = {
            key: (job_id, group, trace)
            for key, job_id, group, trace in conn.execute(
                "SELECT key, id, group_name, trace_context FROM jobledger_jobs"
            )
        }
    assert [r.id for r in results] == [stored[f"n{i}"][0] for i in range(600)]
    assert {k: v[1:] for k, v in stored.items() if v[1:] != (None, None)} == {
        "n260": ("tenant-1", None),
        "n599": (None, '{"traceparent": "00-ab-cd-01"}'),
    }
    assert ledger.job(results[0].id).correlation_id == "c0"


@pytest.mark.parametrize(
    "stored, payload",
    [
        (' {"n": 1}', {"n": 1}),
        ('{"n": 2} ', {"n": 2}),
        ('\n{"n": 3}\n', {"n": 3}),
    ],
)
def test_a_payload_stored_with_whitespace_around_it_is_claimed_as_its_json(
    ledger: Ledger, path: Path, stored: str, payload: dict[str, int]
) -> None:
    # A payload written by another tool (or by hand) need not be the compact text enqueue
    # writes: the claim's fast reading falls back to json.loads for it, as the job's reading does.
    ledger.enqueue("work", {"n": 0}, key="k")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE jobledger_jobs SET payload = ? WHERE key = 'k'", (stored,))
    conn.close()
    [claimed] = ledger.backend.jobs.claim(["q"], "w", 1)
    assert claimed.payload == payload


@pytest.mark.parametrize("stored", ['{"n": 1} x', '{"n": 1}{"n": 2}', "", "nope"])
def test_a_payload_text_that_is_not_one_json_value_is_an_error_not_its_first_part(
    stored: str,
) -> None:
    # The fast reading stops after the first value; the rest must not be dropped in silence.
    with pytest.raises(json.JSONDecodeError):
        _decode(stored)
