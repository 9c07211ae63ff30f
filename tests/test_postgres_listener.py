"""The PostgreSQL wake-up listener survives a lost connection and does not hammer a database
that is down (during a failover only a read-only standby may answer)."""

from __future__ import annotations

import time

import psycopg
import pytest

from jobledger import Ledger
from jobledger._records import Lease
from jobledger.backends.postgres.listener import PgListener
from jobledger.backends.url import DatabaseURL

from .support.waiting import Patience

pytestmark = pytest.mark.postgres_only


class _Unreachable:
    url = DatabaseURL.parse("postgresql://postgres@127.0.0.1:1/postgres")
    channel = "jobledger_public"

    def conninfo(self, role: str, conninfo: str | None = None) -> str:
        return conninfo or self.url.conninfo


def test_reconnecting_to_a_database_that_is_down_backs_off(monkeypatch):
    listener = PgListener(_Unreachable(), {"q"})  # type: ignore[arg-type]
    attempts = 0
    connect = listener._connect

    def counting_connect():
        nonlocal attempts
        attempts += 1
        return connect()

    monkeypatch.setattr(listener, "_connect", counting_connect)
    started = time.monotonic()
    while time.monotonic() - started < 1.0:
        assert listener.wait(0.2) is False
    # Backoff 0.1, 0.2, 0.4, 0.8 s (jittered down to half): at most 5 tries in a second, where
    # retrying as fast as the refusals come made thousands.
    assert 2 <= attempts <= 5


def test_a_connection_made_again_starts_the_backoff_over(pg):
    """After a long outage the next break is retried after a tenth of a second, not after the
    backoff the outage had reached."""
    schema, url = pg.new_schema_url()
    ledger = Ledger(url)
    ledger.migrate()
    try:
        listener = ledger.backend.listener(["q"])
        listener._failures = 8  # as after a long outage, then the database is back
        assert listener.wait(0.1) is True  # connected
        with psycopg.connect(pg.url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (listener._conn.info.backend_pid,))
        assert listener.wait(2.0) is True  # broken: wake up, someone must look
        assert listener._retry_at - time.monotonic() <= 0.1
        listener.close()
    finally:
        ledger.close()
        pg.drop_schema(schema)


def test_a_listener_is_woken_only_for_its_own_queues(pg):
    schema, url = pg.new_schema_url()
    ledger = Ledger(url)
    ledger.migrate()
    try:
        listener = ledger.backend.listener(["a"])
        assert listener.wait(0.1) is True  # connected
        with psycopg.connect(pg.url, autocommit=True) as admin:
            for queue in ("b", "a"):
                admin.execute("SELECT pg_notify(%s, %s)", (ledger.backend.db.channel, queue))
        # The notifications arrive in order: "b" is passed over, "a" wakes it.
        assert listener.woken(5.0) == {"a"}
        listener.close()
    finally:
        ledger.close()
        pg.drop_schema(schema)


def test_listener_wakes_after_its_connection_is_killed_and_listens_again(pg):
    schema, url = pg.new_schema_url()
    ledger = Ledger(url)
    ledger.migrate()
    try:
        listener = ledger.backend.listener(["q"])
        assert listener.wait(0.1) is True  # connected: a wake-up may have been missed before
        with psycopg.connect(pg.url, autocommit=True) as admin:
            pid = listener._conn.info.backend_pid
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            assert listener.wait(2.0) is True  # broken: wake up, someone must look
            patience = Patience(10)
            while listener._conn is None and not patience.expired():
                listener.wait(0.1)  # reconnects after a short pause
            assert listener._conn is not None
            admin.execute("SELECT pg_notify(%s, 'q')", (ledger.backend.db.channel,))
            assert listener.wait(5.0) is True
        listener.close()
    finally:
        ledger.close()
        pg.drop_schema(schema)


def lease_of(job) -> Lease:
    return Lease(job.id, job.lease_token, job.attempt)


def _notes(conn: psycopg.Connection) -> list[str]:  # type: ignore[type-arg]
    """The notifications already received on ``conn`` (a round trip fetches them)."""
    conn.execute("SELECT 1")
    return [n.payload for n in conn.notifies(timeout=0.2)]


def test_completions_tell_waiters_for_results_only_while_one_listens(pg):
    """A drain nobody waits on sends no NOTIFY (PostgreSQL serialises notifying commits); while a
    ledger's result listener is connected, each completion batch sends one, naming its queue."""
    schema, url = pg.new_schema_url()
    try:
        ledger = Ledger(url)
        ledger.task(lambda ctx, n: {"n": n}, name="t", queue="q")
        ledger.enqueue_many("t", [{"payload": {"n": n}, "key": f"k{n}"} for n in range(40)])
        db = ledger.backend.db
        with psycopg.connect(db.url.conninfo, autocommit=True) as spy:
            spy.execute(f'LISTEN "{db.finish_channel}"')
            ledger.run_worker(["q"], burst=True, handle_signals=False, batch_size=10)
            assert len(ledger.jobs()) == 40 and _notes(spy) == []
            listener = ledger.backend.finish_listener()
            try:
                assert listener.wait_finished(5.0) == {"*"}  # connected: look at everything
                ledger.enqueue_many("t", [{"payload": {"n": n}, "key": f"m{n}"} for n in range(3)])
                ledger.run_worker(["q"], burst=True, handle_signals=False, batch_size=10)
                told = _notes(spy)
                assert told and set(told) == {"q"} and len(told) <= 3, told
                assert listener.wait_finished(5.0) == {"q"}
                # One batch of two queues: the notification names none, so look at every one.
                ledger.enqueue("t", {"n": 1}, key="r1", queue="r")
                ledger.enqueue("t", {"n": 2}, key="q1")
                jobs = ledger.backend.jobs
                leases = [lease_of(j) for j in jobs.claim(["q", "r"], "w", 2)]
                assert len(leases) == 2 and jobs.complete(leases) == []
                assert _notes(spy) == [""]
                assert listener.wait_finished(5.0) == {"*"}
            finally:
                listener.close()
            # The lock went with the listener's connection: silence again.
            ledger.enqueue("t", {"n": 99}, key="last")
            ledger.run_worker(["q"], burst=True, handle_signals=False)
            assert ledger.result("last") == {"n": 99} and _notes(spy) == []
        ledger.close()
    finally:
        pg.drop_schema(schema)


def test_long_polls_on_several_queues_share_one_listen_session(pg):
    """``serve``'s wake-ups: waiters on three queues are heard by one LISTEN session (one
    connection of the process's budget, not one per queue), and a notification wakes only the
    waiters of the queue it names."""
    import asyncio

    from jobledger.http.wakeups import Wakeups

    schema, url = pg.new_schema_url()
    ledger = Ledger(url)
    ledger.migrate()

    def sessions() -> int:
        with psycopg.connect(pg.url, autocommit=True) as admin:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND query = %s",
                (pg.dbname, f'LISTEN "{ledger.backend.db.channel}"'),
            ).fetchone()
        return int(row[0]) if row else 0

    async def run() -> None:
        wakeups = Wakeups(ledger.listening, asyncio.get_running_loop())
        try:
            events = {q: wakeups.arm(q) for q in ("a", "b", "c")}
            patience = Patience(10)
            while sessions() != 1 and not patience.expired():
                await asyncio.sleep(0.05)
            assert sessions() == 1
            # Connecting wakes everyone (a notification may have been missed): arm again.
            for event in events.values():
                assert await Wakeups.wait(event, 10.0)
            events = {q: wakeups.arm(q) for q in ("a", "b", "c")}
            with psycopg.connect(pg.url, autocommit=True) as admin:
                admin.execute("SELECT pg_notify(%s, 'b')", (ledger.backend.db.channel,))
            assert await Wakeups.wait(events["b"], 5.0)
            assert not events["a"].is_set() and not events["c"].is_set()
            assert sessions() == 1
        finally:
            wakeups.close()

    try:
        asyncio.run(run())
    finally:
        ledger.close()
        pg.drop_schema(schema)
