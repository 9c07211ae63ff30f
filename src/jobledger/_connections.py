"""The caller's connection of a transactional enqueue (``conn=``), as the backends take it.

A ``conn=`` is an open DBAPI connection of the ledger's database — psycopg's or sqlite3's — or
a SQLAlchemy ``Connection`` or ``Session`` on one (``raw_connection``); SQLAlchemy's async forms
are unwrapped by ``raw_async_connection``, for the asyncio API. SQLAlchemy is imported only
when the object given comes from it: a ledger used without it never imports it.

The job is written in the transaction the caller's object is in (one is begun when none is, as
SQLAlchemy itself would on the first statement), so the caller's commit decides: rolled back,
the job never existed. See docs/integrations.md ("SQLAlchemy").
"""

from __future__ import annotations

from typing import Any

from .errors import ConfigError

__all__ = ["SUPPORTED_DRIVERS", "raw_async_connection", "raw_connection"]

#: The SQLAlchemy drivers whose connections the backends take: sqlite3 (``sqlite://``, the
#: default pysqlite driver) and psycopg 3 (``postgresql+psycopg://``).
SUPPORTED_DRIVERS = ("pysqlite", "psycopg")


def _from_sqlalchemy(conn: Any) -> bool:
    return type(conn).__module__.partition(".")[0] == "sqlalchemy"


def raw_connection(conn: Any) -> Any:
    """The DBAPI connection to write in: ``conn`` itself (None, a psycopg or sqlite3
    connection), or the one under a SQLAlchemy ``Connection`` or ``Session`` (in the transaction
    it is in, begun now if it had none)."""
    if conn is None or not _from_sqlalchemy(conn):
        return conn
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session

    if isinstance(conn, Session):
        # The connection of the session's transaction (begun if the session had none yet).
        conn = conn.connection()
    if not isinstance(conn, Connection):
        if type(conn).__name__ in ("AsyncConnection", "AsyncSession"):
            raise ConfigError(
                f"conn is a SQLAlchemy {type(conn).__name__}: give it to the asyncio API "
                "(AsyncLedger), or give Ledger its sync_connection / sync_session"
            )
        raise ConfigError(
            f"conn must be a SQLAlchemy Connection or Session (or a psycopg or sqlite3 "
            f"connection), got {type(conn).__module__}.{type(conn).__qualname__}"
        )
    _check_driver(conn.dialect.name, conn.dialect.driver)
    if not conn.in_transaction():
        # SQLAlchemy begins on the first statement it runs; ours does not go through it, so
        # begin here: the caller's commit() (or rollback()) then decides for the job too.
        conn.begin()
    return conn.connection.dbapi_connection


async def raw_async_connection(conn: Any) -> Any:
    """The driver's async connection under a SQLAlchemy ``AsyncConnection`` or ``AsyncSession``
    on PostgreSQL (psycopg's ``AsyncConnection``, in the transaction it is in, begun now if it
    had none); ``conn`` itself when it does not come from SQLAlchemy."""
    if conn is None or not _from_sqlalchemy(conn):
        return conn
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    if isinstance(conn, AsyncSession):
        conn = await conn.connection()
    if not isinstance(conn, AsyncConnection):
        raise ConfigError(
            f"conn must be a SQLAlchemy AsyncConnection or AsyncSession (or a psycopg "
            f"AsyncConnection), got {type(conn).__module__}.{type(conn).__qualname__}"
        )
    _check_driver(conn.dialect.name, conn.dialect.driver)
    if not conn.in_transaction():
        await conn.begin()
    raw = await conn.get_raw_connection()
    return raw.driver_connection


def _check_driver(dialect: str, driver: str) -> None:
    if driver in SUPPORTED_DRIVERS:
        return
    if driver == "psycopg2":
        raise ConfigError(
            "SQLAlchemy's psycopg2 driver is not supported: jobledger writes with psycopg 3; "
            "make the engine with a postgresql+psycopg:// URL"
        )
    raise ConfigError(
        f"SQLAlchemy's {dialect}+{driver} driver is not supported: use sqlite:// (sqlite3) or "
        "postgresql+psycopg:// (psycopg 3)"
    )
