"""``AsyncLedger``: the ledger from asyncio code, with the same semantics as ``Ledger``.

It holds a ``Ledger`` (``.sync``) for its configuration and its tasks: ``@aledger.task`` is
``Ledger.task``, a task registered on either is the other's, and ``aledger.worker(...)`` is the
sync ledger's worker. Nothing of the semantics is written here:

- **enqueue** (the hot path) builds its jobs with ``Ledger``'s own checks (key rules, groups,
  priorities, correlation ids) and writes them natively async where the backend's driver has an
  asyncio API (PostgreSQL: psycopg's async connections, the same insert plan as the sync
  enqueue; or the caller's ``psycopg.AsyncConnection``, whose commit decides). Elsewhere
  (SQLite) the sync backend writes them on a dedicated thread, never on the event loop.
- **everything else** (reads, operators, migrations) is the sync ``Ledger``'s method run on this
  ledger's threads, over the sync connection pool: one wrapper (``_OffLoop``) per name.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    Literal,
    ParamSpec,
    Self,
    TypeVar,
    overload,
)

from ._connections import raw_async_connection
from ._ledger import Ledger, _one_spec, _Spec, _specs
from ._records import Enqueued, InsertResult, JobSpec, NewJob
from ._task import Task
from .backends import DatabaseURL
from .errors import ConfigError

if TYPE_CHECKING:
    from .backends.jobs import AsyncJobs

__all__ = ["AsyncLedger"]

_P = ParamSpec("_P")
_R = TypeVar("_R")

#: Threads that run the sync ledger's calls (operators, reads; SQLite's enqueue has its own).
THREADS = 8


class _OffLoop(Generic[_P, _R]):
    """A ``Ledger`` method as an ``AsyncLedger`` coroutine method: the same signature and
    docstring, awaited; the call runs on the async ledger's threads, in the caller's context
    (``contextvars``), never on the event loop."""

    def __init__(self, method: Callable[Concatenate[Ledger, _P], _R]):
        self._method = method
        self._name = method.__name__
        self.__doc__ = method.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Self: ...

    @overload
    def __get__(
        self, obj: AsyncLedger, owner: type | None = None
    ) -> Callable[_P, Coroutine[Any, Any, _R]]: ...

    def __get__(
        self, obj: AsyncLedger | None, owner: type | None = None
    ) -> Self | Callable[_P, Coroutine[Any, Any, _R]]:
        if obj is None:
            return self
        bound: Callable[_P, _R] = getattr(obj.sync, self._name)

        @functools.wraps(bound)
        async def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            return await obj._off_loop(bound, *args, **kwargs)

        obj.__dict__[self._name] = call  # found there from now on (this is not a data descriptor)
        return call


class AsyncLedger:
    """A ``Ledger`` for asyncio code: the same tasks and semantics, its calls awaited.

    ``AsyncLedger(url)`` takes ``Ledger``'s arguments; ``AsyncLedger.of(ledger)`` wraps a
    ledger you already have (then both share its tasks and its connections). Close it with
    ``await aledger.close()`` or ``async with AsyncLedger(...) as aledger``.

    ``enqueue`` and ``enqueue_many`` are native async on PostgreSQL (an async connection pool
    of their own, opened on first use, or the caller's ``psycopg.AsyncConnection`` as
    ``conn=``); on SQLite they run on a dedicated thread. The other methods are ``Ledger``'s,
    run on a thread over the sync pool. An ``AsyncLedger`` belongs to the event loop it first
    enqueues on.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        auto_migrate: bool = True,
        create: bool = True,
        listen_url: str | None = None,
    ) -> None:
        ledger = Ledger(url, auto_migrate=auto_migrate, create=create, listen_url=listen_url)
        self._setup(ledger, owns=True)

    @classmethod
    def of(cls, ledger: Ledger) -> AsyncLedger:
        """An ``AsyncLedger`` over ``ledger``: the same tasks and database; closing it leaves
        ``ledger`` open."""
        self = cls.__new__(cls)
        self._setup(ledger, owns=False)
        return self

    def _setup(self, ledger: Ledger, *, owns: bool) -> None:
        self.sync = ledger
        """The ``Ledger`` this one awaits: its configuration, tasks and sync connections."""
        self._owns = owns
        self._threads: ThreadPoolExecutor | None = None
        self._writer: ThreadPoolExecutor | None = None
        self._async_jobs: AsyncJobs | None = None
        self._native_known = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._gate: asyncio.Semaphore | None = None
        # The same decorators and builders as the sync ledger's: tasks live there.
        self.task = ledger.task
        self.schedule = ledger.schedule
        self.worker = ledger.worker
        self.get_task = ledger.get_task
        self.tasks = ledger.tasks
        self.queues = ledger.queues

    def __repr__(self) -> str:
        return f"AsyncLedger({self.sync.url.redacted!r})"

    @property
    def url(self) -> DatabaseURL:
        """The database's URL (the sync ledger's)."""
        return self.sync.url

    # -- the database ------------------------------------------------------------------------------

    async def open(self) -> AsyncLedger:
        """Open the database now rather than on first use (migrating it with
        ``auto_migrate``), and the async connections; return the ledger. Call it at startup
        (an app's lifespan): the first connection of a process loads what the driver loads
        lazily, which would otherwise hold the first enqueues up."""
        async with self._admission():
            native = await self._native()
            if native is not None:
                await native.open()
        return self

    async def close(self) -> None:
        """Close the async connections, the threads, and the sync ledger unless it was given
        to ``AsyncLedger.of``."""
        jobs, loop = self._async_jobs, self._loop
        self._forget_loop()
        if jobs is not None and loop is asyncio.get_running_loop():
            await jobs.close()
        # (Opened on a loop that has ended since: its connections ended with it.)
        if self._owns:
            await self._off_loop(self.sync.close)
        for pool in (self._threads, self._writer):
            if pool is not None:
                pool.shutdown(wait=False)
        self._threads = self._writer = None

    async def __aenter__(self) -> AsyncLedger:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- enqueue -----------------------------------------------------------------------------------

    async def enqueue(
        self,
        task: Task | str,
        payload: dict[str, Any] | None = None,
        *,
        key: str | None = None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        conn: Any = None,
        correlation_id: str | None = None,
        group: str | None = None,
        now: datetime | None = None,
    ) -> Enqueued:
        """``Ledger.enqueue``, awaited: put one job in the ledger; return ``(id, created)``.

        A known key creates nothing (``created=False``), or raises ``KeyConflict`` with another
        task or payload. ``conn``: an open ``psycopg.AsyncConnection`` on the ledger's
        PostgreSQL database; the job exists only if its transaction commits.
        """
        spec = _one_spec(payload, key, delay, run_at, priority, correlation_id, group)
        results = await self._insert(
            task, [spec], queue=queue, conn=conn, now=now, priority_given=priority is not None
        )
        return results[0].enqueued()

    async def enqueue_many(
        self,
        task: Task | str,
        jobs: Iterable[JobSpec | dict[str, Any]],
        *,
        queue: str | None = None,
        conn: Any = None,
        on_conflict: Literal["raise", "report"] = "raise",
        now: datetime | None = None,
    ) -> list[InsertResult]:
        """``Ledger.enqueue_many``, awaited: a batch in one transaction (``on_conflict``:
        ``"raise"`` writes nothing of a batch with a conflicting key, ``"report"`` marks it)."""
        return await self._insert(
            task,
            _specs(jobs),
            queue=queue,
            conn=conn,
            now=now,
            on_conflict=on_conflict,
            priority_given=True,
        )

    async def _insert(
        self,
        task: Task | str,
        specs: list[_Spec],
        *,
        queue: str | None,
        conn: Any,
        now: datetime | None,
        on_conflict: Literal["raise", "report"] = "raise",
        priority_given: bool,
    ) -> list[InsertResult]:
        async with self._admission():
            # Checked first, as by Ledger: a refused job never opens the database.
            jobs = self.sync._new_jobs(
                task, specs, queue=queue, now=now, priority_given=priority_given
            )
            # A SQLAlchemy AsyncConnection or AsyncSession: psycopg's connection under it.
            conn = await raw_async_connection(conn)
            native = await self._native()
            if native is not None:
                return self.sync._written(
                    await native.insert(jobs, now, conn=conn, on_conflict=on_conflict)
                )
            return await self._write_on_thread(jobs, now, conn, on_conflict)

    async def _write_on_thread(
        self,
        jobs: list[NewJob],
        now: datetime | None,
        conn: Any,
        on_conflict: Literal["raise", "report"],
    ) -> list[InsertResult]:
        if conn is not None:
            raise ConfigError(
                f"AsyncLedger cannot enqueue in a caller's connection on {self.sync.url.redacted}"
                " (its driver has no asyncio API, and a sqlite3 connection belongs to its thread):"
                " call Ledger.enqueue(conn=...) from that connection's thread (AsyncLedger.sync"
                " is the ledger), or enqueue without conn"
            )
        writer = self._writer
        if writer is None:
            writer = self._writer = ThreadPoolExecutor(1, thread_name_prefix="jobledger-write")
        return await self._run(writer, self.sync._write, jobs, now, None, on_conflict)

    def _admission(self) -> asyncio.Semaphore:
        """The enqueues in flight at once: as many as the writes can use (``pool_size``: the
        async connections, or calls queued for the one writer thread). The others wait here
        at once, so that a burst (``gather`` of a thousand enqueues) never holds the loop for
        the checks of all of them in one go: each is checked when admitted."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._loop is not None and not self._loop.is_closed():
                raise ConfigError(
                    "this AsyncLedger enqueues on the event loop it was first used on, which is"
                    " still running; use one AsyncLedger per loop (or close it there first)"
                )
            self._forget_loop()  # the loop it was used on has ended (asyncio.run returned)
            self._loop = loop
        gate = self._gate
        if gate is None:
            gate = self._gate = asyncio.Semaphore(self.sync.url.pool_size)
        return gate

    def _forget_loop(self) -> None:
        self._async_jobs = None
        self._native_known = False
        self._loop = None
        self._gate = None

    async def _native(self) -> AsyncJobs | None:
        """The backend's asyncio enqueue, or None (then its sync one runs on a thread); of the
        loop ``_admission`` checked."""
        if not self._native_known:
            backend = self.sync._backend
            if backend is None:
                backend = await self._off_loop(self.sync._open)
            if not self._native_known:
                self._async_jobs = backend.async_jobs()
                self._native_known = True
        return self._async_jobs

    # -- everything else: the sync ledger's methods, on a thread -----------------------------------

    async def _off_loop(self, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        threads = self._threads
        if threads is None:
            threads = self._threads = ThreadPoolExecutor(
                THREADS, thread_name_prefix="jobledger-async"
            )
        return await self._run(threads, fn, *args, **kwargs)

    @staticmethod
    async def _run(
        threads: ThreadPoolExecutor, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs
    ) -> _R:
        context = contextvars.copy_context()
        call = functools.partial(context.run, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(threads, call)

    schema_version = _OffLoop(Ledger.schema_version)
    migrate = _OffLoop(Ledger.migrate)
    job = _OffLoop(Ledger.job)
    job_by_key = _OffLoop(Ledger.job_by_key)
    find = _OffLoop(Ledger.find)
    history = _OffLoop(Ledger.history)
    jobs = _OffLoop(Ledger.jobs)
    stats = _OffLoop(Ledger.stats)
    rescue = _OffLoop(Ledger.rescue)
    redrive = _OffLoop(Ledger.redrive)
    resolve = _OffLoop(Ledger.resolve)
    cancel = _OffLoop(Ledger.cancel)
    prune = _OffLoop(Ledger.prune)
    set_group_limits = _OffLoop(Ledger.set_group_limits)
    group_limits = _OffLoop(Ledger.group_limits)
    groups = _OffLoop(Ledger.groups)
    pause_group = _OffLoop(Ledger.pause_group)
    resume_group = _OffLoop(Ledger.resume_group)
    result = _OffLoop(Ledger.result)
