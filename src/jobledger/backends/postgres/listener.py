"""Wake-ups on PostgreSQL: LISTEN on the ledger's channel (enqueues NOTIFY it), on a session of
its own: to the ledger's URL, or to its listen URL when that goes through a pooler."""

from __future__ import annotations

import random
import time
from contextlib import suppress
from typing import Any

import psycopg
from psycopg import sql as pgsql

from .database import CONNECT_TIMEOUT, PostgresDatabase

__all__ = ["PgListener"]


class PgListener:
    """LISTEN on the ledger's channel over a dedicated connection; reconnects when it breaks.

    While the database is down (or, during a failover, only a standby answers), reconnecting is
    retried with exponential backoff — from 0.1 s up to 5 s, jittered — rather than as fast as
    the connection attempts fail.
    """

    _MAX_BACKOFF = 5.0

    def __init__(self, db: PostgresDatabase, queues: set[str]):
        self._db = db
        self._queues = queues
        self._conn: psycopg.Connection[Any] | None = None
        self._failures = 0
        self._retry_at = 0.0

    def _connect(self) -> psycopg.Connection[Any]:
        conninfo = self._db.url.listen_conninfo
        if conninfo is None:  # the backend offers no listener then: see supports_listen
            raise psycopg.OperationalError("no direct URL to LISTEN on")
        conn = psycopg.connect(conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT)
        conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(self._db.channel)))
        return conn

    def _failed(self) -> None:
        self.close()
        self._failures += 1
        delay = min(self._MAX_BACKOFF, 0.1 * 2 ** (self._failures - 1))
        self._retry_at = time.monotonic() + delay * (0.5 + random.random() / 2)

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a notification about one of our queues.

        Returns True on a wake-up, or after a connection broke or was made again (a
        notification may have been missed in between)."""
        if self._conn is None or self._conn.closed:
            pause = self._retry_at - time.monotonic()
            if pause > 0:
                time.sleep(min(pause, timeout))
                return False
            try:
                self._conn = self._connect()
            except psycopg.Error:
                self._failed()
                return False
            self._failures = 0
            return True
        try:
            for note in self._conn.notifies(timeout=timeout):
                if note.payload in self._queues:
                    return True
            return False
        except psycopg.Error:
            self._failed()
            return True

    def close(self) -> None:
        if self._conn is not None:
            with suppress(psycopg.Error):
                self._conn.close()
            self._conn = None
