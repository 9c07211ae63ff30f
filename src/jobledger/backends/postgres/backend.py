"""The PostgreSQL backend: psycopg 3 with a connection pool, SKIP LOCKED claims, LISTEN/NOTIFY.

The backend is its lifecycle (migrations, the schema check) and one object per storage role,
each over the one ``PostgresDatabase``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql as pgsql

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
from .api import PostgresApi
from .database import PostgresDatabase
from .effects import PostgresEffects
from .groups import PostgresGroups
from .history import PostgresHistory
from .jobs import PostgresJobs
from .leader import PostgresLeader
from .listener import PgListener
from .outbox import PostgresOutbox
from .schedules import PostgresSchedules
from .stats import PostgresStats
from .subscriptions import PostgresSubscriptions

__all__ = ["PostgresBackend"]


class PostgresBackend:
    """jobledger on PostgreSQL. One instance per process; it is safe to share between threads."""

    dialect = "postgres"

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

    def __init__(self, url: DatabaseURL):
        self.url = url
        self.schema = url.schema
        self.db = PostgresDatabase(url)
        leader = PostgresLeader(self.db)
        history = PostgresHistory(self.db)
        self.history = history
        self.jobs = PostgresJobs(self.db, history)
        self.effects = PostgresEffects(self.db)
        self.leader = leader
        self.schedules = PostgresSchedules(self.db, leader)
        self.outbox = PostgresOutbox(self.db, leader)
        self.subscriptions = PostgresSubscriptions(self.db)
        self.api = PostgresApi(self.db)
        self.groups = PostgresGroups(self.db)
        self.stats = PostgresStats(self.db)

    # -- capabilities ----------------------------------------------------------------------------

    @property
    def supports_listen(self) -> bool:
        return True

    def listener(self, queues: Sequence[str]) -> PgListener:
        return PgListener(self.db, set(queues))

    # -- lifecycle -------------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        with self.db.transaction() as conn:
            yield conn

    def close(self) -> None:
        self.db.close()

    def migrate(self, conn: Any = None) -> list[str]:
        """Apply the missing migrations, on a connection of our own under an advisory lock.
        What is applied is read first, so that a migrated schema takes no lock and no DDL (and
        no CREATE privilege). ``conn`` (an application's open transaction) needs nothing here:
        it sees the tables once they are committed, even in REPEATABLE READ."""
        known = {m.version for m in migrations("postgres")}
        if known <= self.applied_migrations():
            return []
        applied_now: list[str] = []
        schema = pgsql.Identifier(self.schema)
        try:
            with self.db.connect() as conn:
                conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (f"jobledger:{self.schema}",))
                try:
                    conn.execute(pgsql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
                    conn.execute(
                        pgsql.SQL(
                            "CREATE TABLE IF NOT EXISTS {}.jobledger_migrations ("
                            " version integer PRIMARY KEY, name text NOT NULL,"
                            " applied_at timestamptz NOT NULL DEFAULT now())"
                        ).format(schema)
                    )
                    done = {
                        row[0]
                        for row in conn.execute(
                            pgsql.SQL("SELECT version FROM {}.jobledger_migrations").format(schema)
                        )
                    }
                    for migration in migrations("postgres"):
                        if migration.version in done:
                            continue
                        with conn.transaction():
                            conn.execute(pgsql.SQL("SET LOCAL search_path TO {}").format(schema))
                            conn.execute(migration.sql.encode())
                            conn.execute(
                                pgsql.SQL(
                                    "INSERT INTO {}.jobledger_migrations (version, name) VALUES (%s, %s)"
                                ).format(schema),
                                (migration.version, migration.name),
                            )
                        applied_now.append(migration.label)
                finally:
                    conn.execute(
                        "SELECT pg_advisory_unlock(hashtext(%s))", (f"jobledger:{self.schema}",)
                    )
        except psycopg.OperationalError as exc:
            raise self.db.unavailable(exc) from None
        return applied_now

    def schema_version(self) -> int:
        try:
            rows = self.db.read(
                f"SELECT coalesce(max(version), 0) FROM {self.db.tables['migrations']}", {}
            )
        except SchemaMismatch:
            return 0
        return int(rows[0][0])

    def applied_migrations(self) -> set[int]:
        try:
            return {
                int(r[0])
                for r in self.db.read(f"SELECT version FROM {self.db.tables['migrations']}", {})
            }
        except SchemaMismatch:
            return set()

    def check_schema(self) -> None:
        problem = schema_problem(
            "postgres",
            self.applied_migrations(),
            f"PostgreSQL at {self.url.redacted} (schema {self.schema!r})",
        )
        if problem:
            raise SchemaMismatch(problem)

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
