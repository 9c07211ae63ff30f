"""The SQLite backend: one file, WAL mode, short ``BEGIN IMMEDIATE`` write transactions.

The backend is its lifecycle (migrations, the schema check) and one object per storage role,
each over the one ``SqliteDatabase``.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ...errors import SchemaMismatch
from ..api import Api
from ..effects import Effects
from ..groups import Groups
from ..history import History
from ..jobs import Jobs
from ..leader import Leader
from ..outbox import Outbox
from ..schedules import Schedules
from ..sqlfiles import migrations, schema_problem
from ..stats import Stats
from ..subscriptions import Subscriptions
from ..url import DatabaseURL
from .api import SqliteApi
from .database import SqliteDatabase, split_statements
from .effects import SqliteEffects
from .groups import SqliteGroups
from .history import SqliteHistory
from .jobs import SqliteJobs
from .leader import SqliteLeader
from .outbox import SqliteOutbox
from .schedules import SqliteSchedules
from .stats import SqliteStats
from .subscriptions import SqliteSubscriptions

__all__ = ["SqliteBackend"]


class SqliteBackend:
    """jobledger in one SQLite file. Safe to share between threads (a connection per thread)."""

    dialect = "sqlite"

    jobs: Jobs
    history: History
    effects: Effects
    leader: Leader
    schedules: Schedules
    outbox: Outbox
    subscriptions: Subscriptions
    api: Api
    groups: Groups
    stats: Stats

    def __init__(self, url: DatabaseURL, create: bool = True):
        self.url = url
        self.path = url.sqlite_path
        self.db = SqliteDatabase(url, create=create)
        leader = SqliteLeader(self.db)
        history = SqliteHistory(self.db)
        self.history = history
        self.jobs = SqliteJobs(self.db, history)
        self.effects = SqliteEffects(self.db)
        self.leader = leader
        self.schedules = SqliteSchedules(self.db, leader)
        self.outbox = SqliteOutbox(self.db, leader)
        self.subscriptions = SqliteSubscriptions(self.db)
        self.api = SqliteApi(self.db)
        self.groups = SqliteGroups(self.db)
        self.stats = SqliteStats(self.db)

    # -- capabilities ----------------------------------------------------------------------------

    @property
    def supports_listen(self) -> bool:
        return False

    def listener(self, queues: Sequence[str]) -> None:
        return None

    # -- lifecycle -------------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self.db.transaction() as conn:
            yield conn

    def close(self) -> None:
        self.db.close()

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

    def schema_version(self) -> int:
        try:
            return int(
                self.db.read("SELECT coalesce(max(version), 0) FROM jobledger_migrations")[0][0]
            )
        except SchemaMismatch:
            return 0

    def applied_migrations(self) -> set[int]:
        try:
            return {int(r[0]) for r in self.db.read("SELECT version FROM jobledger_migrations")}
        except SchemaMismatch:
            return set()

    def check_schema(self) -> None:
        problem = schema_problem(
            "sqlite", self.applied_migrations(), f"SQLite database {self.url.redacted}"
        )
        if problem:
            raise SchemaMismatch(problem)

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
