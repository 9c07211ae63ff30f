"""Leases the runtime holds: one ``LeaseHold`` per claimed job, and the keeper that renews them.

The keeper renews, in one statement, every lease that is a third through (jobs claimed and
still waiting for a runner included: the runtime holds them). It also ends attempts that run past
their timeout: their lease is no longer renewed, and the runtime records them as ``timed_out``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .._records import ClaimedJob, Lease
from ..errors import BackendUnavailable

__all__ = ["LeaseHold", "LeaseKeeper"]

log = logging.getLogger("jobledger.worker")


@dataclass(eq=False, slots=True)
class LeaseHold:
    """The runtime's record of one claimed job's lease, shared by its handler's context, the
    keeper and whatever delivers the job."""

    job: ClaimedJob
    timeout: float | None = None
    """Seconds the attempt may run (None: no bound)."""
    lease: Lease = field(init=False)
    lease_until: datetime = field(init=False)
    renewed_at: float = field(init=False, default_factory=time.monotonic)
    lost: bool = field(init=False, default=False)
    started: bool = field(init=False, default=False)
    released: bool = field(init=False, default=False)
    finished: bool = field(init=False, default=False)
    ended: bool = field(init=False, default=False)
    """The attempt's outcome is handed to the recorder: a renewal refused from now on is the
    recorder's to judge (its write finds whether the job is its own, done, or lost)."""
    timed_out: bool = field(init=False, default=False)
    orphaned: bool = field(init=False, default=False)
    """Its handler's thread was given up on after the timeout (a sync handler)."""
    future: Future[Any] | asyncio.Task[Any] | None = field(init=False, default=None)
    """An async handler's run on the runtime's event loop (cancelled on a timeout): a task of
    the loop, or the future of a runner thread's hand-over to it."""
    started_at: float = field(init=False, default=0.0)
    lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    span: Any = field(init=False, default=None)
    """The attempt's span while a tracer follows it (``AttemptTracer``), else None."""

    def __post_init__(self) -> None:
        self.lease = Lease(self.job.id, self.job.lease_token, self.job.attempt)
        self.lease_until = self.job.lease_until

    def start(self, future: Future[Any] | asyncio.Task[Any] | None = None) -> bool:
        """Its handler is about to run: the attempt is marked started (and its clock set), under
        the lock, unless the job was given back first (False: it must not run). ``future``: the
        run of an async handler (as ``future`` below), set before its timeout can be (a
        timed-out attempt on the loop is cancelled, never orphaned)."""
        with self.lock:
            if self.released:
                return False
            self.started = True
            self.started_at = time.monotonic()
            if future is not None:
                self.future = future
        return True

    @property
    def active(self) -> bool:
        """Still this runtime's to renew: neither lost, finished, given back nor timed out."""
        return not (self.lost or self.finished or self.released or self.timed_out)


class LeaseKeeper:
    """A thread that renews the leases of ``holds()`` a third through, and hands attempts that
    ran past their timeout to ``on_timeout``.

    ``renew(holds)`` writes the renewals (and deals with refusals); ``tick`` is the longest
    pause between looks (it checks six times per lease, so a lease is renewed between 1/3 and
    1/2 of its length)."""

    def __init__(
        self,
        holds: Callable[[], list[LeaseHold]],
        renew: Callable[[list[LeaseHold]], None],
        on_timeout: Callable[[LeaseHold], None],
        stop: threading.Event,
        lease_seconds: Sequence[float] = (),
    ):
        self._holds = holds
        self._renew = renew
        self._on_timeout = on_timeout
        self._stop = stop
        self._base = min([*lease_seconds, 6.0]) / 6
        self._thread = threading.Thread(target=self._loop, name="jobledger-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def _loop(self) -> None:
        tick = max(0.02, min(1.0, self._base))
        while not self._stop.wait(tick):
            holds = self._holds()
            if holds:
                shortest = min(h.job.lease_seconds for h in holds) / 6
                bounds = [h.timeout / 4 for h in holds if h.timeout is not None and h.started]
                tick = max(0.02, min(1.0, self._base, shortest, *bounds))
            now = time.monotonic()
            due = []
            for hold in holds:
                if not hold.active:
                    continue
                if (
                    hold.timeout is not None
                    and hold.started
                    and now - hold.started_at >= hold.timeout
                ):
                    self._on_timeout(hold)
                    continue
                # Jobs claimed and still waiting for a runner are renewed too: the runtime
                # holds them, and their leases must not run out in the queue.
                if now - hold.renewed_at >= hold.job.lease_seconds / 3:
                    due.append(hold)
            if not due:
                continue
            try:
                self._renew(due)
            except BackendUnavailable as exc:
                log.warning("lease renewal failed: %s", exc)
