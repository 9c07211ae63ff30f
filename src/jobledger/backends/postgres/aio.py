"""The enqueue under asyncio: the plans of ``plan.py`` driven over psycopg's async connections.

Connections of its own (``_Connections``), made on first use on the running event loop and
closed by ``close``; or the caller's ``psycopg.AsyncConnection``, whose transaction decides whether the
jobs exist. The statements, their order and what their rows mean are the plan's
(``PostgresJobs.insert_plan``), the same that ``PostgresJobs.insert`` drives in a thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import psycopg
import psycopg_pool

from ..._records import InsertResult, NewJob, OnConflict
from ...errors import BackendUnavailable
from ..jobs import AsyncJobs, Now
from .database import CONNECT_TIMEOUT, NEVER_BY_COUNT, PostgresDatabase
from .jobs import PostgresJobs
from .plan import Copy, Done, Plan, Quick, Steps, next_step

__all__ = ["PostgresAsyncJobs"]

_T = TypeVar("_T")


class _Connections:
    """At most ``size`` async connections, each made when a task needs one and none is idle, by
    that task: no task of the pool's own runs in the background, so nothing is left running
    when the loop ends unclosed (``asyncio.run`` returning), which psycopg_pool's
    ``AsyncConnectionPool`` would hold up. Configured as the thread pools' connections are
    (``database._configure``): autocommit, nothing prepared behind our back, times in UTC."""

    def __init__(self, conninfo: str, size: int):
        self._conninfo = conninfo
        self._slots = asyncio.Semaphore(size)
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        self._closed = False

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with self._slots:
            conn = self._idle.pop() if self._idle else await self._connect()
            try:
                yield conn
            finally:
                idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                if self._closed or conn.broken or not idle:
                    await conn.close()
                else:
                    self._idle.append(conn)

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        if self._closed:
            raise BackendUnavailable("the ledger's async connections are closed")
        conn = await psycopg.AsyncConnection.connect(
            self._conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT
        )
        conn.prepare_threshold = NEVER_BY_COUNT
        await conn.execute("SET TIME ZONE 'UTC'")
        return conn

    async def check(self) -> None:
        """A connection was found broken: the idle ones may be too (a server restart), so
        close them; new ones are made as needed."""
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()

    async def close(self) -> None:
        self._closed = True
        await self.check()


class PostgresAsyncJobs(AsyncJobs):
    """``insert`` of the jobs role, awaited. Belongs to one event loop (its pool's)."""

    def __init__(self, db: PostgresDatabase, jobs: PostgresJobs):
        self._db = db
        self._jobs = jobs
        self._pool: _Connections | None = None

    async def _insert(
        self, jobs: Sequence[NewJob], now: Now, conn: Any, on_conflict: OnConflict
    ) -> list[InsertResult]:
        if conn is not None and not isinstance(conn, psycopg.AsyncConnection):
            raise TypeError(
                f"conn must be a psycopg AsyncConnection for {self._db.url.redacted}, "
                f"got {type(conn)!r} (a psycopg Connection goes to Ledger.enqueue)"
            )
        plan = self._jobs.insert_plan(jobs, now, conn is not None, on_conflict)
        results = await self.run(plan, conn)
        # A sync worker of this process claims from its position: what was placed ahead of it
        # is claimed at once, as after the sync enqueue.
        self._jobs.placed(jobs, now)
        return results

    async def run(self, plan: Plan[_T], conn: Any = None) -> _T:
        """Drive ``plan`` on the event loop (as ``plan.run`` does in a thread)."""
        answer: Any = None
        error: Exception | None = None
        while not isinstance(step := next_step(plan, answer, error), Done):
            answer, error = None, None
            try:
                with self._db.translate():
                    if isinstance(step, Quick):
                        # Prepared as the sync path prepares it, unless through a pooler.
                        prepared = step.prepared is not None and self._db.prepares
                        answer = await self._quick(step.text, step.params, prepared)
                    else:
                        async with self._transaction(conn) as c:
                            answer = await _run_steps(c, step.steps)
            except Exception as exc:  # noqa: BLE001 - given to the plan, which re-raises or handles
                error = exc
        return step.value  # type: ignore[no-any-return]

    async def _quick(self, text: str, params: dict[str, Any], prepare: bool) -> list[Any]:
        """As ``PostgresDatabase.quickly``: sent again on another connection if the server
        closed this one, twice at most; a broken connection asks whether the server is down."""
        pool = await self._opened()
        for attempt in range(3):
            async with pool.connection() as c:
                try:
                    cur = await c.execute(text, params, prepare=prepare or None)
                    return await cur.fetchall() if cur.description else []
                except (psycopg.OperationalError, psycopg.InterfaceError):
                    if attempt == 2 or not c.broken:
                        raise
            await self._broken(pool)
        raise AssertionError("unreachable")

    @asynccontextmanager
    async def _transaction(self, conn: Any) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """Our own transaction on a pooled connection checked alive, or a savepoint in the
        caller's (as ``PostgresDatabase.transaction``)."""
        if conn is None:
            pool = await self._opened()
            for _ in range(3):
                async with pool.connection() as own:
                    try:
                        await psycopg_pool.AsyncConnectionPool.check_connection(own)
                    except psycopg.Error:
                        pass  # broken: the pool discards it when it comes back
                    else:
                        async with own.transaction():
                            yield own
                        return
                await self._broken(pool)
            raise BackendUnavailable(
                f"PostgreSQL at {self._db.url.redacted} gives broken connections"
            )
        if (
            not conn.autocommit
            and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        ):
            # Start the caller's transaction, so that ours is a savepoint inside it rather than a
            # transaction of its own that would commit on the caller's behalf.
            await conn.execute("SELECT 1")
        async with conn.transaction():
            yield conn

    async def _broken(self, pool: _Connections) -> None:
        """A pooled connection was found broken: fail now if the server is down (asked off the
        loop: the probe connects), else have the pool check its other connections."""
        await asyncio.to_thread(self._db.fail_if_down)
        await pool.check()

    async def _opened(self) -> _Connections:
        if self._pool is None:
            budget = self._db.url.connection_budget
            self._pool = _Connections(self._db.conninfo("async"), budget.statements)
        return self._pool

    async def open(self) -> None:
        with self._db.translate():
            async with (await self._opened()).connection() as c:
                await c.execute("SELECT 1")

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()


async def _run_steps(c: psycopg.AsyncConnection[Any], steps: Steps) -> Any:
    rows: list[Any] | None = None
    while True:
        try:
            statement = steps.send(rows)
        except StopIteration as done:
            return done.value
        if isinstance(statement, Copy):
            async with c.cursor() as cur, cur.copy(statement.text) as copy:
                for piece in statement.data:
                    await copy.write(piece)
            rows = []
            continue
        cur = await c.execute(statement.text, statement.params, prepare=False)
        rows = await cur.fetchall() if cur.description else []
