"""The SQLite backend: one file, WAL mode, short ``BEGIN IMMEDIATE`` write transactions.

The storage roles over one ``SqliteDatabase``: the jobs role and what a prune deletes are this
dialect's own (``jobs.py``, ``history.py``), the others are shared (``backends/shared/``).
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from ...errors import SchemaMismatch
from ..shared.backend import SqlBackend
from ..shared.history import SqlHistory
from ..sqlfiles import migrations
from ..url import DatabaseURL
from .database import SqliteDatabase, split_statements
from .history import SqliteRemoval
from .jobs import SqliteJobs

__all__ = ["SqliteBackend"]


class SqliteBackend(SqlBackend):
    """jobledger in one SQLite file. Safe to share between threads (a connection per thread)."""

    dialect = "sqlite"
    #: No LISTEN: an idle worker polls (an enqueue in the same process wakes its workers).
    supports_listen = False

    def __init__(self, url: DatabaseURL, create: bool = True):
        self.path = url.sqlite_path
        self.db = SqliteDatabase(url, create=create)
        history = SqlHistory(self.db, SqliteRemoval(self.db))
        super().__init__(url, self.db, SqliteJobs(self.db, history), history)

    # -- lifecycle -------------------------------------------------------------------------------

    def migrate(self, conn: Any = None) -> list[str]:
        """Apply the missing migrations. What is applied is read first without the write lock,
        so that a migrated database is never locked for it: an application's first enqueue in
        its own write transaction (``conn``) works. A missing migration needs the write lock;
        when ``conn`` has a transaction open, that transaction holds the lock (or a snapshot
        that could not see the new tables), so waiting would deadlock: refuse at once."""
        applied = self.applied_migrations()
        missing = [m for m in migrations("sqlite") if m.version not in applied]
        if not missing:
            return []
        if isinstance(conn, sqlite3.Connection) and conn.in_transaction:
            lacks = (
                f"lacks the jobledger migrations {', '.join(m.label for m in missing)}"
                if applied
                else "has no jobledger schema"
            )
            raise SchemaMismatch(
                f"SQLite database {self.url.redacted} {lacks}, which cannot be created while "
                "the transaction open on the connection given (conn=) holds the database's "
                "lock: call ledger.migrate() before it (at start-up), or run `jobledger migrate`"
            )
        applied_now = []
        with self.db.transaction() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS jobledger_migrations ("
                " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
            )
            done = {row[0] for row in conn.execute("SELECT version FROM jobledger_migrations")}
            for migration in migrations("sqlite"):
                if migration.version in done:
                    continue
                for statement in split_statements(migration.sql):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO jobledger_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (migration.version, migration.name, time.time()),
                )
                applied_now.append(migration.label)
        return applied_now

    def schema_drop(self) -> None:
        with self.db.transaction() as c:
            names = [
                r[0]
                for r in c.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'jobledger_%'"
                )
            ]
            for name in names:
                c.execute(f'DROP TABLE "{name}"')
