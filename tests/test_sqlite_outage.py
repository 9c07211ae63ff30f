"""A SQLite connection that met a broken file is dropped at once, whatever the outage probe
finds: it does not recover by itself, and a probe that met another connection's lock counts the
file as readable, so the outage may never be declared (and its recovery never renew the
connections). Found by the public-scrape outage test under load."""

from __future__ import annotations

import sqlite3

import pytest

from jobledger import Ledger
from jobledger.errors import BackendUnavailable

from .support.outage import SqliteCut


def test_a_connection_that_met_a_broken_file_is_opened_afresh_after_it_is_whole(tmp_path):
    cut = SqliteCut(tmp_path)
    ledger = Ledger(cut.url)
    ledger.migrate()
    try:
        job = ledger.enqueue("t", {"n": 1}, key="a").id
        db = ledger.backend.db
        db.outage._probe = lambda: None  # a probe that met a lock: the file "answers"
        assert ledger.job(job) is not None  # this thread's connection is open and warm
        cut.cut()
        with pytest.raises(BackendUnavailable, match="not a database"):
            ledger.job(job)
        assert not db.outage.down  # the probe never said so: nothing renews the connections
        cut.restore()
        assert ledger.job(job) is not None
    finally:
        ledger.close()


class _BreaksOnRead:
    """This thread's connection, made to fail its next read as a broken file does (a real cut
    needs a checkpoint, which a write transaction held open keeps from running)."""

    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn
        self.armed = False

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        if self.armed and sql.lstrip().upper().startswith("SELECT"):
            self.armed = False
            raise sqlite3.DatabaseError("file is not a database")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self._conn, name)


def test_a_broken_file_met_by_a_read_inside_a_write_transaction_drops_the_connection_after_it(
    tmp_path,
):
    """The read's own block reports the error as BackendUnavailable and leaves the connection
    to the write transaction around it (its rollback runs first), whose block then sees no
    driver error. The connection is dropped all the same, once the transaction is over."""
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.migrate()
    try:
        job = ledger.enqueue("t", {"n": 1}, key="a").id
        db = ledger.backend.db
        db.outage._probe = lambda: None  # a probe that met a lock: the file "answers"
        breaking = _BreaksOnRead(db.connection())
        db._local.conn = breaking
        with pytest.raises(BackendUnavailable, match="not a database"), db.transaction():
            breaking.armed = True
            ledger.job(job)  # a read, on this thread's connection, inside the transaction
        assert db.connection() is not breaking
        assert ledger.job(job) is not None
    finally:
        ledger.close()


def test_a_transaction_left_open_on_the_threads_connection_is_never_joined(tmp_path):
    """A transaction of ours whose ROLLBACK failed stays open on the thread's connection, outside
    any block of ours. The next write must not join it (whose work would never be committed)."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = Ledger(url)
    ledger.migrate()
    try:
        db = ledger.backend.db
        db.connection().execute("BEGIN IMMEDIATE")  # as a failed ROLLBACK leaves it
        job = ledger.enqueue("t", {"n": 1}, key="a").id
        other = Ledger(url)
        try:
            assert other.job(job) is not None  # committed, seen from another connection
        finally:
            other.close()
    finally:
        ledger.close()
