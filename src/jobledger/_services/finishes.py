"""Waiting for jobs to finish (``ledger.result(ref, timeout=...)``).

On PostgreSQL, completions (and failures and rescues that leave jobs dead) NOTIFY a channel of
their own once per batch, naming the batch's queue (or none, for a batch of several). One
``LISTEN`` connection per ledger, shared by every waiter of the process, hears them and wakes
the waiters of that queue (of every queue, for none), who then look at their job again. The connection is made when the first waiter arms and closed a
while after the last one has gone. Without a listener (SQLite) ``arm`` returns None and the
waiter polls.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from ..backends.base import ANY_QUEUE
from .base import LedgerStorage, Service

__all__ = ["FinishWatch"]

log = logging.getLogger("jobledger")

#: How long ``arm`` waits for the listening connection to be made (then the waiter polls).
CONNECT_WAIT = 10.0
#: How long the listening connection is kept after the last waiter has gone.
LINGER = 10.0


@dataclass
class _Watch:
    """One listening thread's state: set ``ready`` once it listens, ``stop`` to end it."""

    ready: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)


class FinishWatch(Service):
    """Wake-ups for waiters on jobs' ends, from any process (``ledger.finishes``)."""

    def __init__(self, ledger: LedgerStorage):
        super().__init__(ledger)
        self._lock = threading.Lock()
        self._waiters: dict[threading.Event, str] = {}
        self._watch: _Watch | None = None

    def arm(self, queue: str, connect_wait: float = CONNECT_WAIT) -> threading.Event | None:
        """An event that is set when a job of ``queue`` may have finished; None when the
        database tells no one (poll instead). Arm *before* looking at the job, so that a
        finish between the look and the wait is not missed; ``disarm`` when done. The first
        waiter waits up to ``connect_wait`` seconds for the listening connection."""
        backend = self._backend
        if not backend.supports_listen:
            return None
        event = threading.Event()
        with self._lock:
            self._waiters[event] = queue
            watch = self._watch
            if watch is None:
                watch = self._watch = _Watch()
                threading.Thread(
                    target=self._listen, args=(watch,), name="jobledger-results", daemon=True
                ).start()
        watch.ready.wait(connect_wait)
        return event

    def disarm(self, event: threading.Event) -> None:
        with self._lock:
            self._waiters.pop(event, None)

    def waiting(self) -> int:
        """How many waiters are armed now."""
        with self._lock:
            return len(self._waiters)

    def close(self) -> None:
        """Close the listening connection (a later ``arm`` makes another)."""
        with self._lock:
            watch, self._watch = self._watch, None
        if watch is not None:
            watch.stop.set()

    def _listen(self, watch: _Watch) -> None:
        listener = None
        try:
            listener = self._backend.finish_listener()
            idle_since: float | None = None
            while listener is not None and not watch.stop.is_set():
                # The first wait makes the connection (and reports every queue).
                finished = listener.wait_finished(0.5)
                watch.ready.set()
                with self._lock:
                    if finished:
                        for event, queue in self._waiters.items():
                            if queue in finished or ANY_QUEUE in finished:
                                event.set()
                    if self._waiters:
                        idle_since = None
                    elif idle_since is None:
                        idle_since = time.monotonic()
                    elif time.monotonic() - idle_since > LINGER and self._watch is watch:
                        self._watch = None
                        return
        except Exception:  # never lose the waiters to a bug: they look again on their own
            log.exception("listening for finished jobs failed")
        finally:
            watch.ready.set()
            with self._lock:
                if self._watch is watch:
                    self._watch = None
            if listener is not None:
                listener.close()
