"""The PostgreSQL backend: psycopg 3 with a connection pool, SKIP LOCKED claims, LISTEN/NOTIFY.

The storage roles over one ``PostgresDatabase``: the jobs role and what a prune deletes are this
dialect's own (``jobs.py``, ``history.py``), the others are written once (``backends/<role>.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql as pgsql

from ..backend import SqlBackend
from ..history import History
from ..jobs import AsyncJobs
from ..sqlfiles import migrations
from ..url import DatabaseURL
from .database import PostgresDatabase
from .history import PostgresRemoval
from .jobs import PostgresJobs
from .listener import PgFinishListener, PgListener

__all__ = ["PostgresBackend"]


class PostgresBackend(SqlBackend):
    """jobledger on PostgreSQL. One instance per process; it is safe to share between threads."""

    dialect = "postgres"

    def __init__(self, url: DatabaseURL):
        self.schema = url.schema
        #: LISTEN/NOTIFY: an enqueue wakes idle workers on every host — unless the URL goes
        #: through a pooler in transaction mode and no direct listen URL is given; then idle
        #: workers poll.
        self.supports_listen = url.listen_conninfo is not None
        self.db = PostgresDatabase(url)
        history = History(self.db, PostgresRemoval(self.db))
        self._jobs = PostgresJobs(self.db, history)
        history.made_pending = self._jobs.rewind
        super().__init__(url, self.db, self._jobs, history)

    def async_jobs(self) -> AsyncJobs:
        """The enqueue on psycopg's async connections (``aio.py``), the same plan as ``jobs``."""
        from .aio import PostgresAsyncJobs  # psycopg_pool's asyncio side: only for AsyncLedger

        return PostgresAsyncJobs(self.db, self._jobs)

    def listener(self, queues: Sequence[str]) -> PgListener | None:
        return PgListener(self.db, set(queues)) if self.supports_listen else None

    def finish_listener(self) -> PgFinishListener | None:
        return PgFinishListener(self.db) if self.supports_listen else None

    # -- lifecycle -------------------------------------------------------------------------------

    def migrate(self, conn: Any = None) -> list[str]:
        """Apply the missing migrations, in one transaction of our own under a
        transaction-scoped advisory lock (so that nothing outlives it on a server session: a
        pooler in transaction mode may hand that session to another client next). What is
        applied is read first, so that a migrated schema takes no lock and no DDL (and no
        CREATE privilege). ``conn`` (an application's open transaction) needs nothing here: it
        sees the tables once they are committed, even in REPEATABLE READ."""
        known = {m.version for m in migrations("postgres")}
        if known <= self.applied_migrations():
            return []
        applied_now: list[str] = []
        schema = pgsql.Identifier(self.schema)
        try:
            with self.db.connect() as conn, conn.transaction():
                conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"jobledger:{self.schema}",)
                )
                conn.execute(pgsql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
                conn.execute(
                    pgsql.SQL(
                        "CREATE TABLE IF NOT EXISTS {}.jobledger_migrations ("
                        " version integer PRIMARY KEY, name text NOT NULL,"
                        " applied_at timestamptz NOT NULL DEFAULT now())"
                    ).format(schema)
                )
                # Read under the lock: another process may have applied them meanwhile.
                done = {
                    row[0]
                    for row in conn.execute(
                        pgsql.SQL("SELECT version FROM {}.jobledger_migrations").format(schema)
                    )
                }
                conn.execute(pgsql.SQL("SET LOCAL search_path TO {}").format(schema))
                for migration in migrations("postgres"):
                    if migration.version in done:
                        continue
                    conn.execute(migration.sql.encode())
                    conn.execute(
                        pgsql.SQL(
                            "INSERT INTO {}.jobledger_migrations (version, name) VALUES (%s, %s)"
                        ).format(schema),
                        (migration.version, migration.name),
                    )
                    applied_now.append(migration.label)
        except psycopg.OperationalError as exc:
            raise self.db.unavailable(exc) from None
        return applied_now

    def schema_drop(self) -> None:
        with self.db.transaction() as c:
            if self.schema != "public":
                c.execute(
                    pgsql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                        pgsql.Identifier(self.schema)
                    )
                )
                return
            names = c.execute(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = 'public' AND table_name LIKE 'jobledger\\_%%'"
            ).fetchall()
            for (name,) in names:
                c.execute(
                    pgsql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(
                        pgsql.Identifier("public", name)
                    )
                )
