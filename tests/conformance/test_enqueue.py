"""Enqueue: keys, conflicts, payload rules, ordering, transactional enqueue (SPEC §2, §4)."""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime, timedelta, timezone

import psycopg
import pytest

from jobledger import (
    JobFilter,
    JobSpec,
    JobState,
    KeyConflict,
    Ledger,
    PayloadError,
    SchemaMismatch,
    Task,
)
from jobledger._records import LATEST_TIME
from jobledger.errors import ConfigError

from ..support.async_api import app_connection, is_async
from ..support.processes import wait_until
from .conftest import T0, at, enqueue, lease_of


def test_same_key_twice_makes_one_row(api, tasks):
    """Drill 1."""
    first = api.enqueue(tasks["work"], {"n": 1}, key="4187:2026-W33", now=T0)
    again = api.enqueue(tasks["work"], {"n": 1}, key="4187:2026-W33", now=at(5))
    assert first.created and not again.created
    assert again.id == first.id
    assert len(api.jobs(JobFilter(queue="q"))) == 1


def test_same_key_in_another_queue_is_another_job(api, tasks):
    a = api.enqueue("work", {"n": 1}, key="k", queue="q", now=T0)
    b = api.enqueue("work", {"n": 1}, key="k", queue="other", now=T0)
    assert a.created and b.created and a.id != b.id


def test_payload_order_does_not_matter(api, tasks):
    first = api.enqueue(
        api.task(lambda ctx, a, b: None, name="pair", queue="q"),
        {"a": 1, "b": 2},
        key="k2",
        now=T0,
    )
    again = api.enqueue("pair", {"b": 2, "a": 1}, key="k2", now=T0)
    assert first.id == again.id and not again.created


def test_same_key_other_payload_is_a_conflict_and_changes_nothing(api, tasks):
    job_id = enqueue(api, 1)
    before = api.job(job_id)
    with pytest.raises(KeyConflict) as err:
        api.enqueue("work", {"n": 2}, key="k1", now=at(10))
    assert "k1" in str(err.value) and err.value.existing_ids == [job_id]
    assert api.job(job_id) == before


@pytest.mark.parametrize(
    "number",
    [1e300, 1e23, 1e16, 1.5e16, -0.0, 0.1 + 0.2, 5e-324, 1.5e-7, 2**70, -(2**63) - 1],
    ids=repr,
)
def test_a_payload_with_any_json_number_is_replayed_not_a_conflict(api, tasks, number):
    """PostgreSQL's jsonb keeps a number as a decimal: 1e+300 comes back as the digits of
    10^300, another number as a Python float. The same payload enqueued again was reported as
    a conflict (``KeyConflict`` on a plain retry of the enqueue); it is the same job, on every
    path that finds the key taken: one job, a batch, a publish."""
    from jobledger._records import NewJob, PublishItem, encode_payload

    first = api.enqueue("work", {"n": number}, key="k", now=T0)
    again = api.enqueue("work", {"n": number}, key="k", now=at(1))
    assert first.created and (again.id, again.created) == (first.id, False)
    [replayed, new] = api.enqueue_many(
        "work", [{"payload": {"n": number}, "key": "k"}, {"payload": {"n": 1}, "key": "other"}]
    )
    assert (replayed.id, replayed.created, replayed.conflict) == (first.id, False, False)
    assert new.created
    job = NewJob("q", "k", "work", encode_payload({"n": number}), 0, None, 3, 30.0)
    [published] = api.backend.jobs.publish([PublishItem(job, "fp")], now=at(2))
    assert (published.status, published.job_id) == ("replayed", first.id)
    with pytest.raises(KeyConflict):
        api.enqueue("work", {"n": [number]}, key="k", now=at(3))
    assert len(api.jobs(JobFilter(queue="q"))) == 2


def test_same_key_other_task_is_a_conflict(api, tasks):
    enqueue(api, 1)
    with pytest.raises(KeyConflict):
        api.enqueue("elsewhere", {"n": 1}, key="k1", queue="q", now=T0)


def test_batch_with_a_conflict_writes_nothing(api, tasks):
    enqueue(api, 1)
    batch = [
        JobSpec({"n": 10}, key="k10"),
        JobSpec({"n": 99}, key="k1"),
        JobSpec({"n": 11}, key="k11"),
    ]
    with pytest.raises(KeyConflict):
        api.enqueue_many("work", batch, now=T0)
    assert [j.key for j in api.jobs()] == ["k1"]


def test_batch_report_mode_writes_the_others(api, tasks):
    enqueue(api, 1)
    batch = [
        {"payload": {"n": 10}, "key": "k10"},
        {"payload": {"n": 99}, "key": "k1"},
        {"payload": {"n": 1}, "key": "k1"},
    ]
    results = api.enqueue_many("work", batch, on_conflict="report", now=T0)
    assert [(r.created, r.conflict) for r in results] == [
        (True, False),
        (False, True),
        (False, False),
    ]
    assert sorted(j.key for j in api.jobs()) == ["k1", "k10"]


def test_duplicate_keys_within_one_batch(api, tasks):
    results = api.enqueue_many(
        "work", [JobSpec({"n": 1}, key="a"), JobSpec({"n": 1}, key="a")], now=T0
    )
    assert results[0].created and not results[1].created and results[0].id == results[1].id
    with pytest.raises(KeyConflict):
        api.enqueue_many("work", [JobSpec({"n": 1}, key="b"), JobSpec({"n": 2}, key="b")], now=T0)
    assert api.jobs(JobFilter(key_prefix="b")) == []


@pytest.mark.parametrize(
    "payload, message",
    [
        ([1, 2], "JSON object"),
        ("text", "JSON object"),
        ({"n": float("nan")}, "not valid JSON"),
        ({"n": object()}, "not JSON-serialisable"),
        ({"blob": "x" * (256 * 1024)}, "256 KiB"),
        # The limit is in bytes of UTF-8, not in characters: 70,000 four-byte characters.
        ({"blob": "\U0001f680" * 70_000}, "280011 bytes"),
        # A lone half of a surrogate pair (JSON's "\ud800" decodes to one) is no UTF-8.
        ({"s": "caf\u00e9 \ud800"}, "unpaired surrogate"),
        ({"\udc00": 1}, "unpaired surrogate"),
    ],
)
def test_bad_payloads_are_refused_clearly(api, tasks, payload, message):
    with pytest.raises(PayloadError, match=message):
        api.enqueue("work", payload, key="bad", now=T0)
    assert api.jobs() == []


def test_payload_of_exactly_256_kib_is_accepted(api):
    api.task(lambda ctx, blob: None, name="big", queue="q")
    overhead = len('{"blob":""}')
    job_id, created = api.enqueue("big", {"blob": "x" * (256 * 1024 - overhead)}, key="big", now=T0)
    assert created and len(api.job(job_id).payload["blob"]) == 256 * 1024 - overhead


def test_payload_must_fit_the_handler(api, tasks):
    with pytest.raises(PayloadError, match="does not fit task 'work'"):
        api.enqueue("work", {"unknown": 1}, key="x", now=T0)


@pytest.mark.parametrize("key", ["", "a" * 513, "line\nbreak", 42])
def test_bad_keys_are_refused(api, tasks, key):
    with pytest.raises(PayloadError):
        api.enqueue("work", {"n": 1}, key=key, now=T0)


@pytest.mark.parametrize("text", ["\ud800", "k\udcff", "\udbffk"], ids=repr)
@pytest.mark.parametrize("field", ["key", "group", "correlation_id"])
def test_a_name_with_half_a_surrogate_pair_is_refused_and_writes_nothing(api, tasks, field, text):
    """No text in UTF-8 holds half of a surrogate pair: both drivers raised their own
    UnicodeEncodeError from inside the enqueue. Now a PayloadError that says so, in a single
    enqueue and in a batch alike (a large one is streamed: the odd job is its 250th)."""
    spec = {"key": "k1", field: text}
    with pytest.raises(PayloadError, match="contains half of a surrogate pair"):
        api.enqueue("work", {"n": 1}, now=T0, **spec)
    batch = [{"payload": {"n": n}, "key": f"b{n}"} for n in range(400)]
    batch[250] = {"payload": {"n": 250}, **spec}
    with pytest.raises(PayloadError, match="contains half of a surrogate pair"):
        api.enqueue_many("work", batch)
    assert api.jobs() == []


def test_a_key_of_exactly_512_characters_is_accepted_on_the_full_check_too(api, tasks):
    # The limit is inclusive. A key that is not printable (U+0085 is valid in a key) skips the
    # quick check and goes through the full one, which must draw the line at the same place.
    for key in ("k" * 512, "\x85" + "k" * 511):
        job_id, created = api.enqueue("work", {"n": 1}, key=key, now=T0)
        assert created and api.job(job_id).key == key


@pytest.mark.parametrize(
    "correlation_id", [2**70, 7, True, b"c-1", "a\nb", "x\x00", "x" * 256], ids=repr
)
def test_a_correlation_id_that_no_job_can_have_is_refused_and_writes_nothing(
    api, tasks, correlation_id
):
    """A correlation id goes into logs and a push delivery's headers: a text of 1-255
    characters without control characters. An int was stored as an int on SQLite (past its
    integers: OverflowError) and was an AttributeError on PostgreSQL; U+0000 was stored by
    SQLite and refused by PostgreSQL."""
    with pytest.raises(PayloadError, match="correlation_id"):
        api.enqueue("work", {"n": 1}, key="k1", correlation_id=correlation_id, now=T0)
    with pytest.raises(PayloadError, match="correlation_id"):
        api.enqueue_many(
            "work", [{"payload": {"n": 2}, "key": "k2", "correlation_id": correlation_id}]
        )
    assert api.jobs() == []


def test_a_correlation_id_is_kept_and_an_empty_one_is_made(api, tasks):
    given = api.enqueue("work", {"n": 1}, key="k1", correlation_id="x" * 255, now=T0)
    made = api.enqueue("work", {"n": 2}, key="k2", correlation_id="", now=T0)
    assert api.job(given.id).correlation_id == "x" * 255
    assert len(api.job(made.id).correlation_id) == 32


def test_a_key_is_required(api, tasks):
    with pytest.raises(PayloadError, match="a key is required"):
        api.enqueue("work", {"n": 1}, now=T0)


def test_key_rule_derives_the_key(api):
    digest = api.task(
        lambda ctx, customer_id, week: None, name="digest", queue="q", key="{customer_id}:{week}"
    )
    job_id, _ = digest.enqueue({"customer_id": 4187, "week": "2026-W33"}, now=T0)
    assert api.job(job_id).key == "4187:2026-W33"


def test_a_task_that_could_not_run_is_refused_when_it_is_registered(ledger):
    """Registration refuses, naming the task, what would otherwise fail only when a job of it
    runs or is enqueued; a name taken by another handler is refused too, so that the jobs of
    one are never run by the other. Nothing refused is registered."""

    def handler(ctx, n: int = 0) -> int:
        return n + 1

    def other(ctx, n: int = 0) -> None:
        pass

    def no_context(*, n: int = 0) -> None:
        pass

    refused = [
        (42, {"name": "answer"}, "task 'answer': handler 42 is not callable"),
        (handler, {"name": "bad name"}, "task name 'bad name' is invalid"),
        (handler, {"backoff": 5}, "task 'handler': backoff must be a jobledger.Backoff"),
        (handler, {"key": 42}, "task 'handler': key must be a format string or a function"),
        (handler, {"group": 4.5}, "task 'handler': group must be a format string or a function"),
        (no_context, {}, "task 'no_context': the handler must take the job context as its first"),
    ]
    for fn, options, message in refused:
        with pytest.raises(ConfigError) as err:
            ledger.task(fn, **options)
        assert str(err.value).startswith(message)
    assert ledger.tasks() == []
    work = ledger.task(handler, name="work", queue="q")
    assert ledger.task(handler, name="work", queue="q").fn is handler  # the same handler again
    with pytest.raises(ConfigError, match="a task named 'work' is already registered"):
        ledger.task(other, name="work", queue="q")
    assert [t.fn for t in ledger.tasks()] == [handler]
    assert work(None, n=41) == 42  # a task is still its function
    with pytest.raises(ConfigError, match="task must be a registered Task or a task name, got 42"):
        ledger.enqueue(42, {"n": 1}, key="k", now=T0)
    with pytest.raises(ConfigError, match="task 'loose' is not registered with a ledger"):
        Task(fn=handler, name="loose").enqueue({"n": 1}, key="k")
    assert ledger.jobs() == []


def test_a_key_or_group_template_the_payload_cannot_fill_is_refused_and_writes_nothing(api):
    """A task's key or group template that names a field the payload lacks (or a position,
    which a payload never fills) is refused before anything is written, naming the task, the
    template and what is missing."""
    api.task(lambda ctx, **payload: None, name="digest", queue="q", key="{customer_id}:{week}")
    api.task(lambda ctx, **payload: None, name="tenant", queue="q", key="{n}", group="{tenant}")
    api.task(lambda ctx, **payload: None, name="positional", queue="q", key="{0}")
    refused = [
        ("digest", {"customer_id": 4187}, "key template '{customer_id}:{week}'", ": 'week'"),
        ("tenant", {"n": 1}, "group template '{tenant}'", ": 'tenant'"),
        ("positional", {"n": 1}, "key template '{0}'", ": Replacement index 0 out of range"),
    ]
    for task, payload, template, missing in refused:
        with pytest.raises(PayloadError) as err:
            api.enqueue(task, payload, now=T0)
        assert str(err.value).startswith(
            f"task '{task}': {template} cannot be filled from the payload{missing}"
        )
    assert api.jobs() == []
    job_id, _ = api.enqueue("tenant", {"n": 1, "tenant": "acme"}, now=T0)
    assert (api.job(job_id).key, api.job(job_id).group) == ("1", "acme")


def test_unregistered_task_by_name(api):
    job_id, created = api.enqueue("elsewhere.task", {"x": 1}, key="k", queue="remote", now=T0)
    job = api.job(job_id)
    assert (
        created
        and job.task == "elsewhere.task"
        and job.queue == "remote"
        and job.max_attempts == 10
    )


def test_delay_and_run_at(api, tasks):
    a = api.enqueue("work", {"n": 1}, key="a", delay=30, now=T0).id
    b = api.enqueue("work", {"n": 2}, key="b", run_at=at(60), now=T0).id
    assert api.job(a).run_at == at(30) and api.job(b).run_at == at(60)
    with pytest.raises(ConfigError):
        api.enqueue("work", {"n": 3}, key="c", delay=1, run_at=at(1), now=T0)
    with pytest.raises(ConfigError):
        api.enqueue("work", {"n": 3}, key="c", delay=-1, now=T0)
    assert api.backend.jobs.claim(["q"], "w", 10, now=at(29)) == []
    assert [j.id for j in api.backend.jobs.claim(["q"], "w", 10, now=at(60))] == [a, b]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"priority": True}, "priority must be a whole number (32-bit), got True"),
        ({"priority": 1.5}, "priority must be a whole number (32-bit), got 1.5"),
        ({"priority": "9"}, "priority must be a whole number (32-bit), got '9'"),
        ({"priority": 2**31}, "priority must be a whole number (32-bit), got 2147483648"),
        ({"priority": -(2**40)}, "priority must be a whole number (32-bit), got -1099511627776"),
        (
            {"run_at": T0.replace(tzinfo=None)},
            "run_at must be an aware datetime (with a time zone)",
        ),
        ({"run_at": "2026-08-10"}, "run_at must be an aware datetime (with a time zone)"),
        (
            {"run_at": datetime.max.replace(tzinfo=UTC)},
            "run_at must come no later than 9999-12-30 (UTC), the latest time the ledger keeps",
        ),
        (
            {"run_at": LATEST_TIME + timedelta(microseconds=1)},
            "run_at must come no later than 9999-12-30 (UTC)",
        ),
        ({"delay": 1e12}, "delay must come no later than 9999-12-30 (UTC)"),
        (
            {"run_at": datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))},
            "run_at must come no earlier than 0001-01-02 (UTC), the earliest time the ledger",
        ),
        ({"delay": 1e300}, "delay must come no later than 9999-12-30 (UTC)"),
    ],
)
def test_a_priority_or_run_at_out_of_reach_is_refused_and_writes_nothing(
    api, tasks, options, message
):
    """A priority is a 32-bit whole number (not a bool), as the column that holds it; a run
    time is an aware datetime, never read in some local zone; and a task's default priority is
    held to the same."""
    with pytest.raises(ConfigError) as err:
        api.enqueue("work", {"n": 1}, key="k", now=T0, **options)
    assert str(err.value).startswith(message)
    assert api.jobs() == []
    if "priority" in options:
        with pytest.raises(ConfigError, match="priority must be a whole number"):
            api.task(lambda ctx: None, name="urgent", queue="q", priority=options["priority"])
    edge = api.enqueue("work", {"n": 1}, key="edge", priority=2**31 - 1, now=T0)
    assert api.job(edge.id).priority == 2**31 - 1


def test_a_job_due_at_the_latest_time_the_ledger_keeps_reads_back_as_that_time(api, tasks):
    """The last run time an enqueue takes is read back as itself, in the job and in the list,
    on both backends (SQLite keeps seconds: a time near the end of what a datetime holds read
    back past it, and made every list that held the job fail)."""
    by_time = api.enqueue("work", {"n": 1}, key="at", run_at=LATEST_TIME, now=T0).id
    by_delay = api.enqueue(
        "work", {"n": 2}, key="in", delay=(LATEST_TIME - T0).total_seconds(), now=T0
    ).id
    assert api.job(by_time).run_at == api.job(by_delay).run_at == LATEST_TIME
    assert {j.run_at for j in api.jobs()} == {LATEST_TIME}


def test_higher_priority_first_then_oldest_run_at(api, tasks):
    low_old = api.enqueue("work", {"n": 1}, key="low-old", run_at=at(-20), now=T0).id
    high_new = api.enqueue("work", {"n": 2}, key="high-new", run_at=at(-1), priority=5, now=T0).id
    low_new = api.enqueue("work", {"n": 3}, key="low-new", run_at=at(-10), now=T0).id
    high_old = api.enqueue("work", {"n": 4}, key="high-old", run_at=at(-5), priority=5, now=T0).id
    order = [j.id for j in api.backend.jobs.claim(["q"], "w", 10, now=T0)]
    assert order == [high_old, high_new, low_old, low_new]


def test_claim_batches_follow_priority(api, tasks):
    for n in range(9):
        api.enqueue("work", {"n": n}, key=f"k{n}", priority=n % 3, now=T0)
    batches = [api.backend.jobs.claim(["q"], "w", 3, now=T0) for _ in range(3)]
    assert [[j.priority for j in batch] for batch in batches] == [[2, 2, 2], [1, 1, 1], [0, 0, 0]]


def test_jobs_another_process_places_ahead_of_claimed_ones_are_claimed(
    ledger, tasks, db_url, monkeypatch
):
    """A claim may start past what its process already took (PostgreSQL: postgres/cursor.py).
    Jobs that another process then places ahead of that position — a higher priority, an
    earlier run time, a job it released — are still claimed, by the time the rest is, on a
    database where a scan from the start is cheap. Whether it is cheap is timed; on a busy
    machine it may not be, and the scan then waits for its turn (tests/test_claim_cursor.py
    covers that), so here it counts as cheap whatever it took."""
    from jobledger.backends.postgres import cursor

    monkeypatch.setattr(cursor, "CHEAP", float("inf"))
    for n in range(6):
        enqueue(ledger, n, run_at=at(-60 + n))
    jobs = ledger.backend.jobs
    seen = {j.id for j in jobs.claim(["q"], "w", 2, now=T0)}
    other = Ledger(db_url)
    try:
        other.task(lambda ctx, n=0: None, name="work", queue="q", max_attempts=3)
        ahead = other.enqueue("work", {"n": 10}, key="ahead", priority=5, now=T0).id
        early = other.enqueue("work", {"n": 11}, key="early", run_at=at(-3600), now=T0).id
        taken = other.backend.jobs.claim(["q"], "w2", 1, now=T0)
        assert [j.id for j in taken] == [ahead]
        assert other.backend.jobs.release([lease_of(taken[0])], now=T0) == []
    finally:
        other.close()
    while batch := jobs.claim(["q"], "w", 2, now=T0):
        seen.update(j.id for j in batch)
    assert {ahead, early} <= seen and len(seen) == 8


# -- transactional enqueue -------------------------------------------------------------------------


def _app_connection(api):
    """The application's connection, of the kind ``api`` takes: sqlite3 or psycopg for
    ``Ledger``, a ``psycopg.AsyncConnection`` for ``AsyncLedger``, which refuses a sqlite3
    connection (tests/test_async_ledger.py)."""
    if is_async(api) and api.url.dialect == "sqlite":
        pytest.skip("AsyncLedger does not enqueue in a sqlite3 connection")
    return app_connection(api)


def test_transactional_enqueue_commits_with_the_app(api, tasks):
    conn = _app_connection(api)
    try:
        job_id, created = api.enqueue("work", {"n": 1}, key="tx", conn=conn, now=T0)
        assert created
        assert api.jobs(JobFilter(key_prefix="tx")) == []  # not visible before commit
        conn.commit()
        assert api.job(job_id).state is JobState.PENDING
    finally:
        conn.close()


def test_transactional_enqueue_rolled_back_leaves_no_job(api, tasks):
    conn = _app_connection(api)
    try:
        api.enqueue("work", {"n": 1}, key="tx", conn=conn, now=T0)
        conn.rollback()
    finally:
        conn.close()
    assert api.jobs() == []
    # The key is free again.
    assert api.enqueue("work", {"n": 1}, key="tx", now=T0).created


def test_transactional_enqueue_conflict_keeps_the_app_transaction(api, tasks):
    enqueue(api, 1)
    conn = _app_connection(api)
    try:
        api.enqueue("work", {"n": 5}, key="tx5", conn=conn, now=T0)
        with pytest.raises(KeyConflict):
            api.enqueue("work", {"n": 2}, key="k1", conn=conn, now=T0)
        conn.commit()
    finally:
        conn.close()
    assert sorted(j.key for j in api.jobs()) == ["k1", "tx5"]


def test_a_batch_refused_for_a_conflict_in_the_app_transaction_leaves_none_of_its_jobs(api, tasks):
    """A key conflict refuses the whole batch ("inserts nothing"), also inside the
    application's transaction: the batch's new keys are undone with it, while what the
    application wrote before stays and commits."""
    enqueue(api, 1)
    conn = _app_connection(api)
    try:
        api.enqueue("work", {"n": 5}, key="tx5", conn=conn, now=T0)
        batch = [{"payload": {"n": 6}, "key": "tx6"}, {"payload": {"n": 2}, "key": "k1"}]
        with pytest.raises(KeyConflict):
            api.enqueue_many("work", batch, conn=conn, now=T0)
        conn.commit()
    finally:
        conn.close()
    assert sorted(j.key for j in api.jobs()) == ["k1", "tx5"]


def test_wrong_connection_type_is_refused(api, tasks):
    if is_async(api) and api.url.dialect == "sqlite":
        with pytest.raises(ConfigError, match="cannot enqueue in a caller's connection"):
            api.enqueue("work", {"n": 1}, key="x", conn=object(), now=T0)
        return
    with pytest.raises(TypeError, match="conn must be"):
        api.enqueue("work", {"n": 1}, key="x", conn=object(), now=T0)
    assert api.jobs() == []


def test_concurrent_enqueues_of_one_key_make_one_job(api, tasks):
    results = []
    barrier = threading.Barrier(8)

    def go() -> None:
        barrier.wait()
        results.append(api.enqueue("work", {"n": 7}, key="race"))

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({r.id for r in results}) == 1
    assert sum(r.created for r in results) == 1


def test_a_batch_racing_a_transaction_that_inserts_one_of_its_keys(ledger, tasks):
    """A small batch of new keys (PostgreSQL: one statement) waits on a key that the caller's
    open transaction has just inserted; once that commits, the batch reports the key's job as
    existing and creates the others (on PostgreSQL the statement fails, writing nothing, and
    the checked path answers)."""
    conn = app_connection(ledger)
    theirs, _ = ledger.enqueue("work", {"n": 1}, key="k1", conn=conn, now=T0)
    results = []
    batch = [{"payload": {"n": n}, "key": f"k{n}"} for n in (1, 2)]
    enqueuer = threading.Thread(target=lambda: results.append(ledger.enqueue_many("work", batch)))
    enqueuer.start()
    if ledger.url.dialect == "postgres":
        with psycopg.connect(ledger.url.conninfo, autocommit=True) as watch:
            wait_until(
                lambda: watch.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE wait_event_type = 'Lock' AND query LIKE '%%INSERT INTO%%'"
                ).fetchone()[0],
                what="the batch to wait on the key's lock",
            )
    else:
        # SQLite: the batch waits for the write lock; nothing to observe, and the outcome
        # must hold whether it started waiting already or not.
        enqueuer.join(0.2)
    conn.commit()
    conn.close()
    enqueuer.join(10)
    [[first, second]] = results
    assert (first.id, first.created) == (theirs, False)
    assert second.created
    assert sorted(j.key for j in ledger.jobs()) == ["k1", "k2"]


def _app_write_transaction(db_url: str):
    """The application's own connection, holding an open write transaction on its own table
    (on SQLite: the database's one write lock)."""
    url = Ledger(db_url).url
    if url.dialect == "sqlite":
        conn = sqlite3.connect(url.sqlite_path)
    else:
        conn = psycopg.connect(url.conninfo)
        conn.execute(f'SET search_path TO "{url.schema}", public')
    conn.execute("CREATE TABLE IF NOT EXISTS app_orders (id integer PRIMARY KEY)")
    conn.commit()
    conn.execute("INSERT INTO app_orders (id) VALUES (1)")
    return conn


def test_transactional_enqueue_works_on_a_process_first_use(db_url):
    """Issue 16, item 1: the first enqueue of a process, in the application's open write
    transaction, on a migrated database. The ledger's schema check must not need the write
    lock the application holds."""
    migrated = Ledger(db_url)
    migrated.migrate()
    migrated.close()
    conn = _app_write_transaction(db_url)
    first_use = Ledger(db_url)
    try:
        job_id, created = first_use.enqueue("work", {"n": 1}, key="tx", conn=conn, now=T0)
        assert created
        conn.commit()
        assert first_use.job(job_id).key == "tx"
    finally:
        conn.close()
        first_use.close()


def test_transactional_enqueue_on_a_database_without_the_schema(db_url):
    """The first use of a database that has no jobledger schema yet is an enqueue in the
    application's open write transaction. PostgreSQL creates the schema on the ledger's own
    connection and the enqueue works. SQLite cannot: creating it needs the write lock the
    application's transaction holds, so it refuses at once (no wait), saying what to do, and
    the application's transaction is left as it was (docs/backends.md)."""
    conn = _app_write_transaction(db_url)
    ledger = Ledger(db_url)
    try:
        if ledger.url.dialect == "postgres":
            assert ledger.enqueue("work", {"n": 1}, key="tx", conn=conn, now=T0).created
            conn.commit()
            assert [j.key for j in ledger.jobs()] == ["tx"]
            return
        with pytest.raises(SchemaMismatch, match=r"ledger\.migrate\(\)") as refused:
            ledger.enqueue("work", {"n": 1}, key="tx", conn=conn, now=T0)
        assert "jobledger migrate" in str(refused.value)
        conn.commit()  # the application's own write was not disturbed
        assert conn.execute("SELECT count(*) FROM app_orders").fetchone()[0] == 1
        ledger.migrate()
        assert ledger.enqueue("work", {"n": 1}, key="tx", conn=conn, now=T0).created
        conn.commit()
        assert [j.key for j in ledger.jobs()] == ["tx"]
    finally:
        conn.close()
        ledger.close()


# -- large batches: on PostgreSQL a batch of COPY_FROM jobs or more goes in by COPY -------------

LARGE = 150  # at least COPY_FROM (backends/postgres/jobs.py): the COPY path on PostgreSQL

#: Payload values that COPY's text format and JSON each read specially.
AWKWARD = [
    'say "hi"',
    "back\\slash",
    "\\N",
    "\\.",
    "tab\there",
    "line\nbreak",
    "carriage\rreturn",
    "\\u0000 as text",
    "é ü ß 日本 🚀 \u2028",
    "",
]


def _large(first: int = 0, n: int = LARGE, **payload) -> list[dict]:
    return [{"payload": {"n": i, **payload}, "key": f"big{i}"} for i in range(first, first + n)]


def test_a_large_batch_of_new_keys_creates_each_in_order(api, tasks):
    batch = _large()
    batch[3] |= {"delay": 30, "priority": 7, "group": "tenant-1"}
    batch[4] |= {"run_at": at(90), "correlation_id": "corr-4"}
    results = api.enqueue_many("work", batch, now=T0)
    assert all(r.created and not r.conflict for r in results)
    ids = [r.id for r in results]
    assert ids == sorted(ids) and len(set(ids)) == LARGE
    job = api.job(ids[7])
    assert (job.key, job.payload, job.run_at, job.created_at) == ("big7", {"n": 7}, T0, T0)
    assert len(api.jobs(JobFilter(queue="q", limit=1000))) == LARGE


def test_a_large_batch_keeps_every_awkward_payload_and_key(api):
    # Keys hold no control characters (validate_key); quotes, backslashes and "\\N" they may.
    printable = [t.replace("\t", " ").replace("\n", " ").replace("\r", " ") for t in AWKWARD]
    batch = [
        {"payload": {"text": text, "n": i, text: i}, "key": f'k"\\{i} {printable[i % 10]}'}
        for i, text in enumerate(AWKWARD * (LARGE // len(AWKWARD)))
    ]
    results = api.enqueue_many("free", batch, queue="q", now=T0)
    assert all(r.created for r in results)
    for spec, result in zip(batch, results, strict=True):
        job = api.job(result.id)
        assert (job.key, job.payload) == (spec["key"], spec["payload"])


@pytest.mark.parametrize("n", [1, LARGE])
def test_a_nul_in_a_payload_is_refused_in_a_batch_of_any_size(api, n):
    """PostgreSQL's jsonb cannot hold U+0000: a payload with one is refused by the ledger's own
    check, not the database's, on both backends alike (a batch whole, by COPY's size as by the
    array statement's: a batch built as the COPY reads it rolls back), and nothing is written.
    The letters \\u0000 are text and are kept."""
    batch = _large(n=n)
    batch[-1]["payload"] = {"n": "nul\x00here"}
    with pytest.raises(PayloadError, match="U\\+0000"):
        api.enqueue_many("free", batch, queue="q", now=T0)
    with pytest.raises(PayloadError, match="U\\+0000"):
        api.enqueue("free", {"n": ["a", {"b": "\x00"}]}, key="one", queue="q", now=T0)
    assert api.jobs() == []
    kept = api.enqueue("free", {"n": "\\u0000"}, key="letters", queue="q", now=T0)
    assert api.job(kept.id).payload == {"n": "\\u0000"}


def test_a_large_batch_with_a_key_present(api, tasks):
    present = api.enqueue("work", {"n": 5}, key="big5", now=T0).id
    results = api.enqueue_many("work", _large(), now=at(1))
    assert [r.created for r in results] == [i != 5 for i in range(LARGE)]
    assert results[5].id == present and not results[5].conflict
    with pytest.raises(KeyConflict) as err:
        api.enqueue_many("work", _large(LARGE - 1, 10) + [{"payload": {"n": 9}, "key": "big5"}])
    assert err.value.existing_ids == [present]
    assert len(api.jobs(JobFilter(queue="q", limit=1000))) == LARGE
    report = api.enqueue_many(
        "work", [{"payload": {"n": 9}, "key": "big5"}] + _large(LARGE, LARGE), on_conflict="report"
    )
    assert (report[0].id, report[0].created, report[0].conflict) == (present, False, True)
    assert all(r.created for r in report[1:])


def test_a_large_batch_naming_a_key_twice(api, tasks):
    batch = _large()
    batch.append({"payload": {"n": 3}, "key": "big3"})
    results = api.enqueue_many("work", batch, now=T0)
    assert results[3].created and not results[-1].created and results[-1].id == results[3].id
    assert len(api.jobs(JobFilter(queue="q", limit=1000))) == LARGE
    other = _large(LARGE, LARGE)
    other.append({"payload": {"n": -1}, "key": f"big{LARGE}"})
    with pytest.raises(KeyConflict):
        api.enqueue_many("work", other, now=T0)
    assert len(api.jobs(JobFilter(queue="q", limit=1000))) == LARGE
