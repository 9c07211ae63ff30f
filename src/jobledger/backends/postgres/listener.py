"""Wake-ups on PostgreSQL: LISTEN on the ledger's channel (enqueues NOTIFY it), and on its
channel of finished jobs (completions, and failures that leave jobs dead, NOTIFY it once per
batch with their queue, or nothing for a batch of several queues) — each on a session of its
own: to the ledger's URL, or to its listen URL when that goes through a pooler."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import psycopg
from psycopg import sql as pgsql

from ..base import ANY_QUEUE
from .database import CONNECT_TIMEOUT, PostgresDatabase

__all__ = ["PgFinishListener", "PgListener"]


class PgListener:
    """LISTEN on the ledger's channel over a dedicated connection; reconnects when it breaks.

    While the database is down (or, during a failover, only a standby answers), reconnecting is
    retried with exponential backoff — from 0.1 s up to 5 s, jittered — rather than as fast as
    the connection attempts fail.
    """

    _MAX_BACKOFF = 5.0

    #: Its connection's role (``application_name``: see ``ConnectionBudget``).
    role = "listen"

    def __init__(self, db: PostgresDatabase, queues: set[str], channel: str | None = None):
        self._db = db
        self._queues = queues
        self._channel = channel or db.channel
        self._conn: psycopg.Connection[Any] | None = None
        self._failures = 0
        self._retry_at = 0.0

    def _connect(self) -> psycopg.Connection[Any]:
        conninfo = self._db.url.listen_conninfo
        if conninfo is None:  # the backend offers no listener then: see supports_listen
            raise psycopg.OperationalError("no direct URL to LISTEN on")
        conn = psycopg.connect(
            self._db.conninfo(self.role, conninfo), autocommit=True, connect_timeout=CONNECT_TIMEOUT
        )
        conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(self._channel)))
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
        return bool(self._receive(timeout, self._queues.__contains__))

    def woken(self, timeout: float) -> set[str]:
        """The queues of ours a notification named within ``timeout`` seconds (``{ANY_QUEUE}``
        after the connection broke or was made again), or an empty set."""
        return set(self._receive(timeout, self._queues.__contains__))

    def add(self, queue: str) -> None:
        """Be woken for ``queue`` too (the channel is the same: nothing is sent)."""
        self._queues.add(queue)

    def _receive(self, timeout: float, wanted: Callable[[str], bool]) -> list[str]:
        """The payloads of the first wanted notification within ``timeout`` (``[ANY_QUEUE]``
        after the connection broke or was made again), or ``[]``."""
        if self._conn is None or self._conn.closed:
            pause = self._retry_at - time.monotonic()
            if pause > 0:
                time.sleep(min(pause, timeout))
                return []
            try:
                self._conn = self._connect()
            except psycopg.Error:
                self._failed()
                return []
            self._failures = 0
            return [ANY_QUEUE]
        try:
            for note in self._conn.notifies(timeout=timeout):
                if wanted(note.payload):
                    return [note.payload]
            return []
        except psycopg.Error:
            self._failed()
            return [ANY_QUEUE]

    def close(self) -> None:
        if self._conn is not None:
            with suppress(psycopg.Error):
                self._conn.close()
            self._conn = None


class PgFinishListener(PgListener):
    """LISTEN on the channel of finished jobs, for waiters on results (``ledger.result``).

    Its connection holds a shared advisory lock while it listens: completions tell only while
    someone holds it (``someone_waits`` in jobs.sql), so a ledger nobody waits on sends no
    NOTIFY. The lock goes with the connection."""

    role = "results"

    def __init__(self, db: PostgresDatabase):
        super().__init__(db, set(), db.finish_channel)

    def _connect(self) -> psycopg.Connection[Any]:
        conn = super()._connect()
        try:
            # After LISTEN: a completion that sees the lock held tells a connection that hears.
            conn.execute(
                "SELECT pg_advisory_lock_shared(hashtextextended(%s, 0))", (self._db.waiters_lock,)
            )
        except BaseException:
            with suppress(psycopg.Error):
                conn.close()
            raise
        return conn

    def wait_finished(self, timeout: float) -> set[str] | None:
        """Wait up to ``timeout`` seconds for jobs to finish. The queue they finished in, or
        ``{ANY_QUEUE}`` when that is not known (the first call, which connects; a connection
        made again; a batch of several queues); None when nothing finished."""
        got = self._receive(timeout, lambda payload: True)
        if not got:
            return None
        return {got[0] or ANY_QUEUE}
