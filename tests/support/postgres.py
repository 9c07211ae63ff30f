"""Finding a PostgreSQL server for the tests, and giving each test its own schema.

Order: ``JOBLEDGER_TEST_POSTGRES_URL``, then a server on 127.0.0.1:5432 (user postgres), then a
private server started with ``pgserver`` (a pip package that bundles PostgreSQL), so that the
PostgreSQL cases run on a fresh machine too.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from jobledger import Ledger

LOCAL_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def _answers(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=3):
            return True
    except psycopg.Error:
        return False


def with_database(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{dbname}"))


def with_query(url: str, **params: str) -> str:
    parts = urlsplit(url)
    extra = "&".join(f"{k}={v}" for k, v in params.items())
    query = f"{parts.query}&{extra}" if parts.query else extra
    return urlunsplit(parts._replace(query=query))


class PostgresServer:
    """A reachable server and a scratch database on it for this test session."""

    def __init__(self) -> None:
        self._pgserver = None
        self.admin_url = self._find()
        self.dbname = f"jobledger_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.dbname}"')
        self.url = with_database(self.admin_url, self.dbname)

    def _find(self) -> str:
        explicit = os.environ.get("JOBLEDGER_TEST_POSTGRES_URL")
        if explicit:
            if not _answers(explicit):
                raise RuntimeError(f"JOBLEDGER_TEST_POSTGRES_URL does not answer: {explicit}")
            self.source = "JOBLEDGER_TEST_POSTGRES_URL"
            return explicit
        if _answers(LOCAL_URL):
            self.source = "127.0.0.1:5432"
            return LOCAL_URL
        import pgserver  # started only when no server answers

        self._pgserver = pgserver.get_server(
            tempfile.mkdtemp(prefix="jobledger-pg-"), cleanup_mode="stop"
        )
        self.source = "pgserver"
        return self._pgserver.get_uri()

    def new_schema_url(self) -> tuple[str, str]:
        schema = f"t_{uuid.uuid4().hex[:12]}"
        return schema, with_query(self.url, schema=schema)

    def drop_schema(self, schema: str) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    def close(self) -> None:
        try:
            with psycopg.connect(self.admin_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')
        except psycopg.Error:
            pass
        if self._pgserver is not None:
            self._pgserver.cleanup()


def plan_nodes(plan: dict) -> list[dict]:
    """Every node of a plan in EXPLAIN's JSON form (``plan["Plan"]`` and all below it)."""
    return [plan, *(node for child in plan.get("Plans", []) for node in plan_nodes(child))]


@contextmanager
def ledger_with_jobs(
    pg: PostgresServer, jobs: int, group: Any = None
) -> Iterator[tuple[Ledger, str]]:
    """A ledger on a schema of its own with one task, ``t`` on queue ``q`` (its jobs in
    ``group``: a name or a rule, as ``ledger.task`` takes it), and ``jobs`` of its jobs pending
    (payload ``{"n": n}``, key ``k{n}``); the ledger closed and the schema dropped after."""
    schema, url = pg.new_schema_url()
    ledger = Ledger(url)
    try:
        ledger.task(lambda ctx, n: None, name="t", queue="q", group=group)
        if jobs:
            ledger.enqueue_many("t", [{"payload": {"n": n}, "key": f"k{n}"} for n in range(jobs)])
        yield ledger, schema
    finally:
        ledger.close()
        pg.drop_schema(schema)
