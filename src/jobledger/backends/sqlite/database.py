"""The SQLite database object: one file in WAL mode, a connection per thread, short
``BEGIN IMMEDIATE`` write transactions, the named statements, and the dialect's time converter
(SQLite stores times as seconds since the Unix epoch).

The role classes of this package reach the database only through this object's public
interface: ``sql``, ``read``, ``transaction``, ``connection``, and the converters ``to_db``,
``to_db_or_none`` and ``to_time``.

A file that cannot be read (not a database any more, an I/O error, gone) is an outage (see
``jobledger.backends.outage``): every use fails at once until a fresh connection reads it
again, and then every thread's connection is opened afresh — a connection that met a broken
file does not recover by itself. A lock held by another connection is not an outage: it waits
for the busy timeout, as before.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from ...errors import BackendUnavailable, SchemaMismatch
from ..outage import Outage
from ..sqlfiles import queries
from ..url import DatabaseURL

__all__ = ["SqliteDatabase", "split_statements", "to_db", "to_db_or_none", "to_time"]


def to_db(value: datetime | None) -> float:
    """A time as SQLite stores it (epoch seconds); None is the process clock now."""
    if value is None:
        return time.time()
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: pass an aware datetime (UTC)")
    return value.timestamp()


def to_db_or_none(value: datetime | None) -> float | None:
    """A time as SQLite stores it; None stays None (NULL)."""
    return None if value is None else to_db(value)


def to_time(value: float | None) -> datetime | None:
    """A time stored by SQLite as an aware UTC datetime (None stays None)."""
    return None if value is None else datetime.fromtimestamp(value, UTC)


class SqliteDatabase:
    """Connections to one SQLite file, safe to share between threads (a connection per thread)."""

    dialect = "sqlite"

    def __init__(self, url: DatabaseURL, create: bool = True):
        self.url = url
        self.path = url.sqlite_path
        self.sql = queries("sqlite")
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._writer = threading.Lock()
        self._closed = False
        self.outage = Outage(
            self._answers,
            f"SQLite database {url.redacted}",
            on_recovery=self._reset_connections,
        )
        if not create and not self.path.exists():
            raise BackendUnavailable(
                f"SQLite database {url.redacted} does not exist (no file {str(self.path)!r})"
            )
        if not self.path.parent.exists():
            raise BackendUnavailable(
                f"cannot open SQLite database {url.redacted}: directory "
                f"{str(self.path.parent)!r} does not exist"
            )
        self.connection()  # fail now, with a clear message, if the file cannot be opened

    @staticmethod
    def _locked(exc: BaseException) -> bool:
        text = str(exc)
        return "locked" in text or "busy" in text

    def unavailable(self, exc: BaseException) -> BackendUnavailable:
        text = str(exc)
        if self._locked(exc):
            return BackendUnavailable(
                f"SQLite database {self.url.redacted} is locked by another connection "
                f"(waited {self.url.busy_timeout_ms} ms): {text}"
            )
        return BackendUnavailable(f"SQLite database {self.url.redacted} cannot be used: {text}")

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (opened on first use)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        if self._closed:
            raise BackendUnavailable(f"the ledger for {self.url.redacted} is closed")
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.url.busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA busy_timeout = {self.url.busy_timeout_ms}")
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if mode != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self.url.synchronous}")
        except sqlite3.Error as exc:
            if not self._locked(exc):
                self.outage.suspect()
            raise self.unavailable(exc) from None
        self._local.conn = conn
        with self._lock:
            self._all.append(conn)
        return conn

    @contextmanager
    def translate(self) -> Iterator[None]:
        """Driver errors inside the block as jobledger's own; while the file is known to be
        unreadable, ``BackendUnavailable`` at once."""
        try:
            self.outage.check()
            yield
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                raise SchemaMismatch(
                    f"SQLite database {self.url.redacted} has no jobledger tables "
                    f"({exc}); run `jobledger migrate`"
                ) from None
            if not self._locked(exc):
                self.outage.suspect()
            raise self.unavailable(exc) from None
        except sqlite3.DatabaseError as exc:
            self.outage.suspect()
            raise self.unavailable(exc) from None

    @contextmanager
    def transaction(self, conn: Any = None) -> Iterator[sqlite3.Connection]:
        """A write transaction: ``BEGIN IMMEDIATE`` on our connection, or a savepoint in the
        caller's (so that a refused write leaves the caller's other work alone)."""
        with self.translate():
            if conn is None:
                own = self.connection()
                if own.in_transaction:
                    # Inside our own transaction() block: join it.
                    yield own
                    return
                # Threads of this process take turns here rather than in SQLite's busy handler,
                # which sleeps (1, 2, 5, 10 … ms) between tries instead of waking on release.
                if not self._writer.acquire(timeout=self.url.busy_timeout_ms / 1000):
                    raise BackendUnavailable(
                        f"SQLite database {self.url.redacted} is locked by another thread of "
                        f"this process (waited {self.url.busy_timeout_ms} ms)"
                    )
                try:
                    own.execute("BEGIN IMMEDIATE")
                    committed = False
                    try:
                        yield own
                        own.execute("COMMIT")
                        committed = True
                    finally:
                        if not committed and own.in_transaction:
                            own.execute("ROLLBACK")
                finally:
                    self._writer.release()
                return
            if not isinstance(conn, sqlite3.Connection):
                raise TypeError(f"conn must be a sqlite3 Connection, got {type(conn)!r}")
            if not conn.in_transaction and conn.isolation_level is not None:
                # The caller's connection opens transactions implicitly; open it now so the
                # job joins it (a bare SAVEPOINT would commit on release).
                conn.execute("BEGIN")
            conn.execute("SAVEPOINT jobledger")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK TO jobledger")
                conn.execute("RELEASE jobledger")
                raise
            conn.execute("RELEASE jobledger")

    def read(self, text: str, params: Any = ()) -> list[Any]:
        """The rows of one statement, on this thread's connection, outside a write lock."""
        with self.translate():
            return self.connection().execute(text, params).fetchall()

    def _answers(self) -> None:
        """The outage's probe: a fresh connection (never creating the file) reads the schema.
        A lock held elsewhere means the file is there and readable."""
        try:
            conn = sqlite3.connect(f"file:{quote(str(self.path))}?mode=rw", uri=True, timeout=0)
            try:
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            finally:
                conn.close()
        except sqlite3.Error as exc:
            if not self._locked(exc):
                raise

    def _reset_connections(self) -> None:
        """Close every thread's connection: each opens a fresh one at its next use."""
        with self._lock:
            for conn in self._all:
                with suppress(sqlite3.Error):
                    conn.close()
            self._all.clear()
            self._local = threading.local()

    def close(self) -> None:
        self.outage.close()
        with self._lock:
            self._closed = True
            for conn in self._all:
                with suppress(sqlite3.Error):
                    conn.close()
            self._all.clear()
        self._local = threading.local()


def split_statements(script: str) -> Iterator[str]:
    """Split a migration script into statements (sqlite3 runs one at a time in a transaction)."""
    buffer: list[str] = []
    for line in script.splitlines():
        if not buffer and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buffer.append(line)
        text = "\n".join(buffer)
        if sqlite3.complete_statement(text):
            yield text
            buffer = []
    if "".join(buffer).strip():
        raise ValueError(f"incomplete statement at the end of a migration: {' '.join(buffer)[:80]}")
