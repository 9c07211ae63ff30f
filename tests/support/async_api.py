"""The async API driven from a sync test, so that one conformance case runs against both APIs.

``AsyncDriven(ledger)`` looks like a ``Ledger``: each coroutine method of ``AsyncLedger`` is
called and awaited on an event loop of its own (a thread), from whichever thread the test calls
it; everything else is the ``AsyncLedger``'s (``task``, ``worker``, ``url``) or, where it has
no such name (``backend``), the sync ledger's. A connection to pass as ``conn=`` comes from
``app_connection()``: a ``psycopg.AsyncConnection`` on PostgreSQL, driven the same way.
"""

from __future__ import annotations

import asyncio
import inspect
import sqlite3
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import psycopg

from jobledger import AsyncLedger, Ledger

_T = TypeVar("_T")


class DrivenConnection:
    """An application's ``psycopg.AsyncConnection``, its transaction ended from the test."""

    def __init__(self, driven: AsyncDriven, conn: psycopg.AsyncConnection[Any]):
        self._driven = driven
        self.raw = conn

    def commit(self) -> None:
        self._driven.run(self.raw.commit())

    def rollback(self) -> None:
        self._driven.run(self.raw.rollback())

    def execute(self, query: Any, params: Any = None) -> Any:
        return self._driven.run(self.raw.execute(query, params))

    def close(self) -> None:
        self._driven.run(self.raw.close())


class AsyncDriven:
    """An ``AsyncLedger`` over ``ledger``, with a sync face (see the module's docstring)."""

    api = "async"

    def __init__(self, ledger: Ledger):
        self.sync = ledger
        self.aledger = AsyncLedger.of(ledger)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="async-api", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=120)

    def __getattr__(self, name: str) -> Any:
        try:
            value = getattr(self.aledger, name)
        except AttributeError:
            return getattr(self.sync, name)
        if not inspect.iscoroutinefunction(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            conn = kwargs.get("conn")
            if isinstance(conn, DrivenConnection):
                kwargs["conn"] = conn.raw
            return self.run(value(*args, **kwargs))

        return call

    def app_connection(self) -> DrivenConnection | sqlite3.Connection:
        if self.sync.url.dialect == "sqlite":
            return sqlite3.connect(self.sync.url.sqlite_path)
        conninfo = self.sync.url.conninfo
        return DrivenConnection(self, self.run(psycopg.AsyncConnection.connect(conninfo)))

    def close(self) -> None:
        try:
            self.run(self.aledger.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=30)
            self.loop.close()


def app_connection(api: Any) -> Any:
    """The application's own connection on the database of ``api`` (a ``Ledger`` or an
    ``AsyncDriven``), of the kind that API takes as ``conn=``."""
    if isinstance(api, AsyncDriven):
        return api.app_connection()
    if api.url.dialect == "sqlite":
        return sqlite3.connect(api.url.sqlite_path)
    return psycopg.connect(api.url.conninfo)


def is_async(api: Any) -> bool:
    return isinstance(api, AsyncDriven)
