"""jobledger through a real PgBouncer in transaction mode (``?pooler=transaction``).

A pool of two server sessions is shared by every client connection of the test, so whatever a
client left on a session — a prepared statement, a session-level advisory lock, a LISTEN —
would meet the next client of that session. Shown here: migrations from several processes at
once leave no lock behind and apply each migration once; single and bulk enqueues from many
threads and a worker process run every job once, within the pool's sessions; wake-ups come
from a LISTEN on the direct ``listen_url``, and without one the ledger polls; and the HTTP API
publishes, receives and acks through the pooler.

Without ``pooler=transaction`` the same enqueues fail with ``DuplicatePreparedStatement`` (the
single enqueue's prepared statement met a session that had it already) — what the option is for.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from jobledger import AsyncLedger, JobFilter, JobState, Ledger
from jobledger._records import QueueSettings
from jobledger.backends.sqlfiles import migrations

from .support.http import ServeProcess
from .support.pgbouncer import PgBouncer
from .support.postgres import PostgresServer
from .support.processes import wait_exit, wait_until, worker_process
from .support.waiting import slowdown

POOL_SIZE = 2


class Pooled:
    """One test's schema, reached directly and through its own PgBouncer."""

    def __init__(self, pg: PostgresServer, bouncer: PgBouncer):
        self.pg = pg
        self.bouncer = bouncer
        self.schema, self.direct = pg.new_schema_url()
        self.url = bouncer.url(self.direct) + "&pooler=transaction"

    def listening_sessions(self) -> int:
        """Idle sessions whose last statement was a LISTEN on this ledger's channel."""
        with psycopg.connect(self.pg.url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND state = 'idle'"
                " AND query = %s",
                (self.pg.dbname, f'LISTEN "jobledger_{self.schema}"'),
            ).fetchone()
        return int(row[0]) if row else 0

    def advisory_locks(self) -> int:
        """Advisory locks held in the test database, by any session."""
        with psycopg.connect(self.pg.url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database"
                " WHERE l.locktype = 'advisory' AND d.datname = %s",
                (self.pg.dbname,),
            ).fetchone()
        return int(row[0]) if row else 0


@pytest.fixture(params=["postgres"])
def pooled(request: pytest.FixtureRequest, pg: PostgresServer, tmp_path: Path) -> Iterator[Pooled]:
    with PgBouncer(pg.url, tmp_path / "pgbouncer", pool_size=POOL_SIZE) as bouncer:
        through = Pooled(pg, bouncer)
        try:
            yield through
        finally:
            pg.drop_schema(through.schema)


def _within(seconds: float, call: Any, what: str) -> Any:
    """``call()`` on a thread; fails if it has not returned within ``seconds`` machine seconds."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds * slowdown())
    assert not thread.is_alive(), f"{what} did not return within {seconds} s (it hangs)"
    if errors:
        raise errors[0]
    return result[0]


def test_migrations_through_the_pooler_apply_once_and_leave_no_lock(pooled):
    """Four ledgers migrate at once through two server sessions: each migration is applied
    once, no advisory lock outlives the migrations, and a fifth ledger's first use does not
    wait on one (a session-level lock left on a pooled session made it hang for minutes)."""
    ledgers = [Ledger(pooled.url) for _ in range(4)]
    start = threading.Barrier(len(ledgers))

    def migrate(ledger: Ledger) -> list[str]:
        start.wait()
        return ledger.migrate()

    with ThreadPoolExecutor(len(ledgers)) as pool:
        applied = list(pool.map(migrate, ledgers))
    labels = sorted(label for each in applied for label in each)
    assert labels == sorted(m.label for m in migrations("postgres"))
    assert pooled.advisory_locks() == 0
    fresh = Ledger(pooled.url)
    _within(30, fresh.open, "a fresh ledger's first use through the pooler")
    assert fresh.schema_version() == max(m.version for m in migrations("postgres"))
    for ledger in [*ledgers, fresh]:
        ledger.close()


def test_enqueues_and_a_worker_through_the_pooler_run_every_job_once(pooled):
    ledger = Ledger(pooled.url)
    ledger.migrate()
    errors: list[str] = []

    def singles(thread: int) -> None:
        for n in range(50):
            try:
                ledger.enqueue("note", {"n": n}, key=f"s{thread}-{n}", queue="outage")
            except Exception as exc:  # noqa: BLE001 - counted and shown
                errors.append(repr(exc))

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(singles, range(6)))
    ledger.enqueue_many(
        "note", [{"payload": {"n": n}, "key": f"b-{n}"} for n in range(300)], queue="outage"
    )
    # A large batch goes in by COPY in one transaction; with known keys in it, that
    # transaction rolls back and the checked path runs, still nothing relying on the session.
    again = ledger.enqueue_many(
        "note", [{"payload": {"n": n}, "key": f"b-{n}"} for n in range(200, 300)], queue="outage"
    )
    assert not any(r.created for r in again)
    # Jobs with a group: the grouped claim's statements are sent unnamed through the pooler.
    ledger.enqueue_many(
        "note",
        [{"payload": {"n": n}, "key": f"g-{n}", "group": f"g{n % 7}"} for n in range(100)],
        queue="outage",
    )
    assert errors == []
    assert pooled.bouncer.server_sessions(pooled.pg.dbname) <= POOL_SIZE

    worker = worker_process("tests.apps.outage_app:ledger", pooled.url, "--burst")
    code, out, err = wait_exit(worker)
    assert code == 0, err
    assert "Traceback" not in err, err
    jobs = ledger.jobs(JobFilter(queue="outage"))
    assert len(jobs) == 700
    assert {j.state for j in jobs} == {JobState.DONE}
    assert {j.attempts for j in jobs} == {1}, "a job ran twice"
    ledger.close()


def test_wakeups_come_from_a_direct_listen_url_and_without_one_workers_poll(pooled):
    ledger = Ledger(pooled.url)
    ledger.migrate()
    assert ledger.backend.supports_listen is False
    assert ledger.backend.listener(["q"]) is None
    ledger.close()

    listening = Ledger(pooled.url, listen_url=pooled.direct)
    ran = threading.Event()

    @listening.task(queue="q")
    def wake(ctx: Any) -> None:
        ran.set()

    assert listening.backend.supports_listen is True
    # Idle, the worker sleeps up to an hour between claims: only a LISTEN wakes it.
    worker = listening.worker(["q"], poll_interval=3600)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        # Once its LISTEN session is up, nothing but a notification can wake it.
        wait_until(lambda: pooled.listening_sessions() > 0, timeout=60, what="the worker's LISTEN")
        other = Ledger(pooled.url)  # enqueued through the pooler: NOTIFY at its commit
        other.enqueue("wake", {}, key="k", queue="q")
        other.close()
        assert ran.wait(20 * slowdown()), "the worker was not woken by the NOTIFY"
    finally:
        worker.stop()
        thread.join(30)
        listening.close()


def test_asyncledger_enqueues_through_the_pooler(pooled):
    """The asyncio API's enqueue sends nothing prepared either: 300 enqueues at once through
    two server sessions, none failing, each job once; and a batch of 300 (by COPY)."""
    aledger = AsyncLedger(pooled.url, listen_url=pooled.direct)

    async def main() -> list[bool]:
        await aledger.migrate()
        made = await asyncio.gather(
            *(aledger.enqueue("note", {"n": n}, key=f"a{n}", queue="outage") for n in range(300))
        )
        batch = await aledger.enqueue_many(
            "note", [{"payload": {"n": n}, "key": f"b{n}"} for n in range(300)], queue="outage"
        )
        await aledger.close()
        return [m.created for m in made] + [r.created for r in batch]

    assert asyncio.run(main()) == [True] * 600
    ledger = Ledger(pooled.url)
    assert len(ledger.jobs(JobFilter(queue="outage", limit=1000))) == 600
    ledger.close()


def test_the_http_api_through_the_pooler(pooled):
    ledger = Ledger(pooled.url)
    ledger.migrate()
    ledger.queue_settings.declare(QueueSettings("inbox"))
    key, _ = ledger.keys.create("pooled", ["admin"])
    ledger.close()
    server = ServeProcess(pooled.url, "--no-access-log", "--no-push")
    try:
        with httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60
        ) as client:
            for n in range(20):
                published = client.post(
                    "/v1/queue/publish",
                    json={"queue": "inbox", "payload": {"n": n}},
                    headers={"Idempotency-Key": f"p{n}"},
                )
                assert published.status_code == 201, published.text
            replay = client.post(
                "/v1/queue/publish",
                json={"queue": "inbox", "payload": {"n": 0}},
                headers={"Idempotency-Key": "p0"},
            )
            assert replay.status_code == 200, replay.text
            acked = 0
            while acked < 20:
                got = client.post("/v1/queue/receive", json={"queue": "inbox", "max_messages": 10})
                assert got.status_code == 200, got.text
                for message in got.json()["messages"]:
                    done = client.post("/v1/queue/ack", json={"receipt": message["receipt"]})
                    assert done.status_code == 200, done.text
                    acked += 1
    finally:
        server.stop()
    assert "Traceback" not in server.output, server.output
