"""The SQLite database object: one file in WAL mode, a connection per thread, short
``BEGIN IMMEDIATE`` write transactions, the named statements, and the dialect's time converter
(SQLite stores times as seconds since the Unix epoch; without an explicit ``now`` the clock is
the process's).

It implements ``backends.database.Database`` for the roles written once for every dialect; this package's
own role classes (the jobs, the grouped claim, what a prune deletes) use the same interface and
``connection``.

A file that cannot be read (not a database any more, an I/O error, gone) is an outage (see
``jobledger.backends.outage``): every use fails at once until a fresh connection reads it
again, and then every thread's connection is opened afresh — a connection that met a broken
file does not recover by itself. Such a connection is also dropped at once, whatever the probe
finds: a probe that met a lock counts the file as readable, and a thread's connection must not
stay broken after the file is whole again. A lock held by another connection is not an outage:
it waits for the busy timeout, as before.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from ...errors import BackendUnavailable, SchemaMismatch
from ..database import Fill
from ..outage import Outage
from ..sqlfiles import fill as fill_text
from ..sqlfiles import queries
from ..url import DatabaseURL

__all__ = ["SqliteDatabase", "epoch", "split_statements", "to_db", "to_time"]


def epoch(now: datetime | None) -> float:
    """A time as SQLite stores it (epoch seconds); None is the process clock now (the ``now``
    of a statement without an explicit one)."""
    if now is None:
        return time.time()
    if now.tzinfo is None:
        raise ValueError(f"naive datetime {now!r}: pass an aware datetime (UTC)")
    return now.timestamp()


def to_db(value: datetime | None) -> float | None:
    """A time as SQLite stores it (epoch seconds); None stays None (NULL)."""
    return None if value is None else epoch(value)


def to_time(value: float | None) -> datetime | None:
    """A time stored by SQLite as an aware UTC datetime (None stays None)."""
    return None if value is None else datetime.fromtimestamp(value, UTC)


def _lower(text: str | None) -> str | None:
    """``text`` in lower case, as Python (and PostgreSQL's ILIKE) lowers any letter."""
    return text.lower() if isinstance(text, str) else text


def _has_schema(conn: sqlite3.Connection) -> bool:
    query = "SELECT 1 FROM sqlite_master WHERE name = 'jobledger_migrations'"
    return conn.execute(query).fetchone() is not None


class SqliteDatabase:
    """Connections to one SQLite file, safe to share between threads (a connection per thread)."""

    dialect = "sqlite"
    clock = staticmethod(epoch)
    to_db = staticmethod(to_db)
    to_time = staticmethod(to_time)

    @staticmethod
    def ilike(column: str, placeholder: str) -> str:
        # SQLite's LIKE ignores the case of ASCII letters only: the column is lowered by
        # Python's str.lower (jobledger_lower, on each of our connections) first.
        return f"jobledger_lower({column}) LIKE {placeholder} ESCAPE '\\'"

    def __init__(self, url: DatabaseURL, create: bool = True):
        self.url = url
        self.path = url.sqlite_path
        self.sql = queries("sqlite")
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._writer = threading.Lock()
        self._closed = False
        self._create = create
        self.outage = Outage(
            self._answers,
            f"SQLite database {url.redacted}",
            on_recovery=self._reset_connections,
        )
        if not create and not self.path.exists():
            raise BackendUnavailable(
                f"SQLite database {url.redacted} does not exist (no file {str(self.path)!r}); "
                "`jobledger migrate` creates it"
            )
        if not create and self.path.is_file() and self.path.stat().st_size == 0:
            raise SchemaMismatch(
                f"SQLite database {url.redacted} is an empty file: it has no jobledger schema; "
                "run `jobledger migrate`"
            )
        if not self.path.parent.exists():
            raise BackendUnavailable(
                f"cannot open SQLite database {url.redacted}: directory "
                f"{str(self.path.parent)!r} does not exist"
            )
        self.connection()  # fail now, with a clear message, if the file cannot be opened

    @property
    def label(self) -> str:
        return f"SQLite database {self.url.redacted}"

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
        """This thread's connection (opened on first use, and again after it met a file it
        could not read)."""
        local = self._local
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        if conn is not None:
            if getattr(local, "depth", 0) > 0 or not getattr(local, "doomed", False):
                return conn
            # It met a broken file inside one of our transactions, which is over now.
            self._drop_connection()
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
            if mode != "wal" and (self._create or _has_schema(conn)):
                # (Without ``create``, a database that is not a ledger is left as it was.)
                try:
                    conn.execute("PRAGMA journal_mode = WAL")
                except sqlite3.OperationalError as exc:
                    # Another connection's open transaction (an application's, say) keeps
                    # the journal mode from changing now; a later connection switches it.
                    if "locked" not in str(exc) and "busy" not in str(exc):
                        raise
            conn.execute(f"PRAGMA synchronous = {self.url.synchronous}")
            conn.create_function("jobledger_lower", 1, _lower, deterministic=True)
        except sqlite3.Error as exc:
            if not self._locked(exc):
                self.outage.suspect()
            raise self.unavailable(exc) from None
        local.conn = conn
        local.doomed = False
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
                self._drop_connection()
                self.outage.suspect()
            raise self.unavailable(exc) from None
        except sqlite3.DatabaseError as exc:
            self._drop_connection()
            self.outage.suspect()
            raise self.unavailable(exc) from None

    @contextmanager
    def transaction(self, conn: Any = None) -> Iterator[sqlite3.Connection]:
        """A write transaction: ``BEGIN IMMEDIATE`` on our connection, or a savepoint in the
        caller's (so that a refused write leaves the caller's other work alone)."""
        with self.translate():
            if conn is None:
                local = self._local
                own = self.connection()
                if getattr(local, "depth", 0):
                    # Inside our own transaction() block: join it.
                    local.depth += 1
                    try:
                        yield own
                    finally:
                        local.depth -= 1
                    return
                if own.in_transaction:
                    # A transaction left open outside any block of ours (its ROLLBACK failed):
                    # never joined, whose work would never be committed. Closing the
                    # connection ends it; the block runs on a fresh one.
                    self._drop_connection()
                    own = self.connection()
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
                    local.depth = 1
                    try:
                        yield own
                        own.execute("COMMIT")
                        committed = True
                    finally:
                        local.depth = 0
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

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection, for reads outside a write lock."""
        with self.translate():
            yield self.connection()

    # -- SQL text and values ---------------------------------------------------------------------

    @staticmethod
    def param(name: str) -> str:
        return f":{name}"

    @staticmethod
    def among(
        column: str, name: str, values: Sequence[Any], type: str = "text"
    ) -> tuple[str, dict[str, Any]]:
        names = [f":{name}{i}" for i in range(len(values))]
        params = {f"{name}{i}": value for i, value in enumerate(values)}
        return f"{column} IN ({', '.join(names) or 'NULL'})", params

    @staticmethod
    def from_json(value: str | None) -> Any:
        return None if value is None else json.loads(value)

    # -- running statements ----------------------------------------------------------------------

    def execute(
        self,
        c: sqlite3.Connection,
        name: str,
        params: Mapping[str, Any] | None = None,
        **fill: Fill,
    ) -> sqlite3.Cursor:
        return c.execute(fill_text(self.sql[name], fill), params or {})

    def executemany(
        self, c: sqlite3.Connection, name: str, rows: Sequence[Mapping[str, Any]], **common: Any
    ) -> int:
        values = [{**row, **common} for row in rows] if common else rows
        return c.executemany(self.sql[name], values).rowcount

    def read(self, name: str, params: Mapping[str, Any] | None = None, **fill: Fill) -> list[Any]:
        with self.translate():
            return (
                self.connection().execute(fill_text(self.sql[name], fill), params or {}).fetchall()
            )

    def run(
        self, name: str, params: Mapping[str, Any], conn: Any = None, **fill: Fill
    ) -> list[Any]:
        with self.transaction(conn) as c:
            return c.execute(fill_text(self.sql[name], fill), params).fetchall()

    def count(self, name: str, params: Mapping[str, Any], conn: Any = None, **fill: Fill) -> int:
        with self.transaction(conn) as c:
            return c.execute(fill_text(self.sql[name], fill), params).rowcount

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

    def _drop_connection(self) -> None:
        """Close this thread's connection after it met a file it could not read: the next use
        opens a fresh one. While a transaction block of ours is still open it is only marked
        (its rollback runs first), and ``connection()`` drops it once the block is over —
        however the error reached the block (a read nested in it reports the error as
        ``BackendUnavailable``, which the block's own ``translate`` does not look into)."""
        local = self._local
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        if conn is None:
            return
        if getattr(local, "depth", 0):
            local.doomed = True
            return
        local.conn = None
        local.doomed = False
        with self._lock:
            if conn in self._all:
                self._all.remove(conn)
        with suppress(sqlite3.Error):
            conn.close()

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
