"""The handler's view of its job: identity, lease, effects and the ledger's transaction."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

from .._connections import raw_connection
from .._faults import fault_point
from ..backends.base import Backend
from ..errors import LeaseLost
from .leases import LeaseHold

__all__ = ["JobContext"]

T = TypeVar("T")

log = logging.getLogger("jobledger.worker")


class JobContext:
    """Passed to every handler as its first argument.

    ``key``, ``job_id``, ``attempt`` (1 on the first run), ``queue``, ``task``, ``group`` and
    ``correlation_id`` identify the job. Pass ``key`` (or ``idempotency_key(...)``) to any
    provider that accepts an idempotency key: a retry after a crash then carries the same key.

    An async handler awaits the ``a``-prefixed twins (``await ctx.aonce(...)``,
    ``aheartbeat``, ``arecord_effect``, ``aeffect_recorded``): they do the same database work
    on a thread, so the event loop the handler runs on (the application's, for an embedded
    worker) is not blocked while they wait.
    """

    def __init__(
        self,
        hold: LeaseHold,
        backend: Backend,
        renew: Callable[[LeaseHold], None],
        clock: Callable[[], datetime | None],
    ):
        self._hold = hold
        self._backend = backend
        self._renew = renew
        self._clock = clock
        self.completed = False
        """True once the job was completed inside ``transaction()``."""
        job = hold.job
        self.job_id: int = job.id
        self.key: str = job.key
        self.queue: str = job.queue
        self.task: str = job.task
        self.attempt: int = job.attempt
        self.payload: dict[str, Any] = job.payload
        self.correlation_id: str | None = job.correlation_id
        self.group: str | None = job.group
        """The job's group (tenant), or None."""
        self.budget_left: int = job.budget_left
        self._log: logging.LoggerAdapter[logging.Logger] | None = None

    @property
    def log(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger whose records carry the job's id, key, queue and attempt."""
        if self._log is None:
            job = self._hold.job
            self._log = logging.LoggerAdapter(
                log, {"job_id": job.id, "key": job.key, "queue": job.queue, "attempt": job.attempt}
            )
        return self._log

    def __repr__(self) -> str:
        return f"<JobContext job={self.job_id} key={self.key!r} queue={self.queue!r} attempt={self.attempt}>"

    # -- the lease ---------------------------------------------------------------------------------

    @property
    def lease_token(self) -> str:
        return self._hold.lease.token

    @property
    def lease_until(self) -> datetime:
        """When the lease expires unless renewed. The worker renews it every lease/3."""
        return self._hold.lease_until

    @property
    def lease_lost(self) -> bool:
        """True once a renewal was refused: another worker may be running this job now. A
        handler that sees this should stop and not cause further effects."""
        return self._hold.lost

    def heartbeat(self) -> None:
        """Renew the lease now. Raises ``LeaseLost`` if it is no longer this attempt's."""
        self._renew(self._hold)
        if self._hold.lost:
            raise LeaseLost(self.job_id, self.lease_token, "heartbeat")

    # -- effects -----------------------------------------------------------------------------------

    def idempotency_key(self, effect: str | None = None) -> str:
        """The key to hand a provider: the job key, or ``key:effect`` for one of several effects."""
        return self.key if effect is None else f"{self.key}:{effect}"

    def effect_recorded(self, effect: str) -> bool:
        """True when ``effect`` was already recorded for this job's key (by any attempt)."""
        return self._backend.effects.get(self.queue, self.key, effect) is not None

    def record_effect(
        self, effect: str, detail: dict[str, Any] | None = None, conn: Any = None
    ) -> bool:
        """Record that ``effect`` happened, fenced by this attempt's lease.

        Returns True when recorded now, False when already recorded. Raises ``LeaseLost`` when
        this attempt no longer holds the job. With ``conn`` (from ``transaction()``) the record
        commits together with the rest of that transaction.
        """
        return self._backend.effects.record(
            self.queue,
            self.key,
            effect,
            self._hold.lease,
            detail,
            self._clock(),
            raw_connection(conn),
        )

    def once(self, effect: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        """Perform an external effect at most once per recorded success.

        If ``effect`` is already recorded for this key, return None without calling ``fn``.
        Otherwise call ``fn(*args, **kwargs)``, record the effect, and return ``fn``'s result.

        A crash between the call and the record repeats the call on the next attempt: pass
        ``ctx.idempotency_key(effect)`` to the provider so that it drops the repeat. The
        record makes the effect safe against a redrive long after the provider forgot the key.
        """
        if inspect.iscoroutinefunction(fn):
            raise _not_awaited(effect)
        if self._already(effect):
            return None
        result = fn(*args, **kwargs)
        if inspect.iscoroutine(result):
            result.close()  # never started: nothing happened, and nothing is recorded
            raise _not_awaited(effect)
        fault_point("effect.after_call")
        self.record_effect(effect)
        return result

    def _already(self, effect: str) -> bool:
        if not self.effect_recorded(effect):
            return False
        self.log.info("effect %r already recorded for key %r; not repeating it", effect, self.key)
        return True

    # -- the same, awaited (async handlers) ------------------------------------------------------

    async def aheartbeat(self) -> None:
        """``heartbeat()`` without blocking the event loop."""
        await asyncio.to_thread(self.heartbeat)

    async def aeffect_recorded(self, effect: str) -> bool:
        """``effect_recorded()`` without blocking the event loop."""
        return await asyncio.to_thread(self.effect_recorded, effect)

    async def arecord_effect(self, effect: str, detail: dict[str, Any] | None = None) -> bool:
        """``record_effect()`` without blocking the event loop."""
        return await asyncio.to_thread(self.record_effect, effect, detail)

    async def aonce(
        self, effect: str, fn: Callable[..., Awaitable[T] | T], *args: Any, **kwargs: Any
    ) -> T | None:
        """``once()`` for async handlers: ``fn`` may be a coroutine function (awaited) or a
        plain one; the effect's lookup and record run on a thread."""
        if await asyncio.to_thread(self._already, effect):
            return None
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        fault_point("effect.after_call")
        await self.arecord_effect(effect)
        return result

    # -- the ledger's transaction -------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """A transaction on the ledger's database whose commit also completes this job.

        Run your own SQL on the connection it yields (psycopg or sqlite3, by backend). On
        leaving the block the job is completed in the same transaction, fenced by the lease: if
        the lease was lost, nothing commits and ``LeaseLost`` is raised. If the block raises,
        nothing commits and the job fails as usual. The handler should return soon after.
        """
        if self.completed:
            raise RuntimeError("this job was already completed in a transaction")
        with self._backend.transaction() as conn:
            yield conn
            stale = self._backend.jobs.complete([self._hold.lease], self._clock(), conn=conn)
            if stale:
                raise LeaseLost(self.job_id, self.lease_token, "complete in transaction")
            # The outcome is handed on (as by Runtime.finish): a renewal refused from here on
            # meets this completion, not a lost lease. A commit that fails after this makes
            # the handler fail, and that failure's write judges the lease.
            self._hold.ended = True
        self.completed = True


def _not_awaited(effect: str) -> TypeError:
    return TypeError(
        f"ctx.once({effect!r}, …) was given a coroutine function: its effect would be recorded "
        "without running it; await ctx.aonce(...) in an async handler"
    )
