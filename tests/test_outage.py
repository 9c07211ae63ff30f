"""The outage gate every backend uses (``jobledger.backends.outage``): a probe that fails makes
the database down and every use fail at once; the first probe that succeeds renews the
connections and ends it; suspicions while the database answers cost one probe per interval."""

from __future__ import annotations

import threading

import pytest

from jobledger.backends.outage import Outage
from jobledger.errors import BackendUnavailable

from .support.processes import wait_until


class Database:
    """A probe that answers or not, counting its calls, and the backend's callbacks."""

    def __init__(self) -> None:
        self.answers = True
        self.probes = 0
        self.events: list[str] = []
        self.recovery_fails = 0
        self.lock = threading.Lock()

    def probe(self) -> None:
        with self.lock:
            self.probes += 1
        if not self.answers:
            raise ConnectionRefusedError("connection refused\nsecond line")

    def on_down(self) -> None:
        self.events.append("down")

    def on_recovery(self) -> None:
        if self.recovery_fails:
            self.recovery_fails -= 1
            raise RuntimeError("cannot reopen")
        self.events.append("recovered")


@pytest.fixture
def database():
    return Database()


@pytest.fixture
def outage(database):
    gate = Outage(
        database.probe,
        "the test database",
        on_down=database.on_down,
        on_recovery=database.on_recovery,
        interval=0.01,
    )
    yield gate
    gate.close()


def test_a_failed_probe_makes_every_use_fail_at_once_until_a_probe_succeeds(outage, database):
    outage.check()  # up: nothing raised
    database.answers = False
    outage.suspect()
    wait_until(lambda: outage.down, what="the outage")
    with pytest.raises(BackendUnavailable) as caught:
        outage.check()
    assert "the test database is unavailable (connection refused)" in str(caught.value)
    assert "retry shortly" in str(caught.value)
    probes = database.probes
    wait_until(lambda: database.probes >= probes + 3, what="probes to repeat while down")
    assert database.events == ["down"]  # told once, however many probes fail
    database.answers = True
    wait_until(lambda: not outage.down, what="the outage to end")
    outage.check()
    assert database.events == ["down", "recovered"]
    assert outage.outages == 1


def test_suspicions_while_the_database_answers_cost_one_probe_per_interval(database):
    outage = Outage(database.probe, "db", interval=3600)
    try:
        for _ in range(100):
            outage.suspect()
        outage.settle()
        assert database.probes == 1 and not outage.down
        outage.suspect(now=True)  # a broken connection: probe whatever the interval
        outage.settle()
        assert database.probes == 2 and not outage.down
    finally:
        outage.close()


def test_settle_waits_for_the_verdict_of_a_running_probe(database):
    release = threading.Event()

    def slow_probe() -> None:
        release.wait(5)
        raise ConnectionRefusedError("refused")

    outage = Outage(slow_probe, "db", interval=0.01)
    try:
        outage.suspect(now=True)
        threading.Timer(0.2, release.set).start()
        outage.settle(timeout=5)
        assert outage.down
    finally:
        release.set()
        outage.close()


def test_an_outage_goes_on_while_the_connections_cannot_be_renewed(outage, database):
    database.answers = False
    outage.suspect()
    wait_until(lambda: outage.down, what="the outage")
    database.recovery_fails = 2
    database.answers = True
    wait_until(lambda: not outage.down, what="the outage to end after two failed renewals")
    assert database.events == ["down", "recovered"]
    assert database.recovery_fails == 0


def test_a_closed_gate_probes_no_more(outage, database):
    outage.close()
    outage.suspect(now=True)
    outage.settle(timeout=0.2)
    assert database.probes == 0


def test_a_postgresql_connection_that_cannot_be_had_makes_the_server_known_down(
    monkeypatch, tmp_path
):
    """The pool could not make a connection in time (the server's address takes connections
    and never answers: a host that hangs), rather than handing out one found broken: that
    failure too has the outage probe the server, so that once the probe finds it down the next
    use fails at once, saying for how long, instead of waiting for a connection again."""
    import socket

    from jobledger import Ledger
    from jobledger.backends.postgres import database

    from .support.outage import PostgresCut

    monkeypatch.setattr(database, "CONNECT_TIMEOUT", 1)
    monkeypatch.setattr(database, "PROBE_TIMEOUT", 1)
    cut = PostgresCut(tmp_path)
    hangs = None
    try:
        ledger = Ledger(cut.url)
        ledger.migrate()
        cut.cut()
        # The server's port now takes connections and never answers. The single enqueue's
        # pool has made no connection yet: it must make one, and cannot.
        hangs = socket.create_server(("127.0.0.1", cut.server.port), backlog=64)
        try:
            with pytest.raises(BackendUnavailable, match="couldn't get a connection"):
                ledger.enqueue("t", {}, key="first")
            outage = ledger.backend.db.outage
            wait_until(lambda: outage.down, what="the outage found by the probe")
            with pytest.raises(BackendUnavailable, match=r"down for \d"):
                ledger.enqueue("t", {}, key="second")
        finally:
            ledger.close()
    finally:
        if hangs is not None:
            hangs.close()
        cut.close()
