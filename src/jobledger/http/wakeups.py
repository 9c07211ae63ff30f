"""Wake-ups for long-polling receives: "a job may have arrived in queue Q".

A receive that found nothing waits here, not in a thread. It is woken by a publish in this
process at once, and on PostgreSQL by ``LISTEN/NOTIFY`` for publishes and enqueues from any
process: one listening connection for every queue that someone has waited on, shared by all
their waiters (one connection of the process's budget: docs/deployment.md, "Connections"). Without a listener (SQLite), waiters fall back to polling; the caller bounds each wait.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING

from .._services.listen import ANY_QUEUE

if TYPE_CHECKING:
    from .._services.listen import Listener, Listening

__all__ = ["Wakeups"]

log = logging.getLogger("jobledger.http")


class Wakeups:
    """Per-queue events on one event loop, fed by publishes here and by database listeners."""

    def __init__(self, listening: Listening, loop: asyncio.AbstractEventLoop):
        self._listening = listening
        self._loop = loop
        self._events: dict[str, asyncio.Event] = {}
        #: The queues someone has waited on, all heard by one listener (one LISTEN session)
        #: on one thread, made when the first waiter arms.
        self._queues: set[str] = set()
        self._listener: Listener | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def notify(self, queue: str) -> None:
        """Wake everyone waiting on ``queue`` (call from the event loop)."""
        event = self._events.pop(queue, None)
        if event is not None:
            event.set()

    def notify_threadsafe(self, queue: str) -> None:
        if not self._stop.is_set():
            self._loop.call_soon_threadsafe(self.notify, queue)

    def arm(self, queue: str) -> asyncio.Event:
        """The event the next wake-up on ``queue`` will set. Arm it *before* looking for work,
        so that a publish between the look and the wait is not missed."""
        self._listen(queue)
        event = self._events.get(queue)
        if event is None:
            event = self._events[queue] = asyncio.Event()
        return event

    @staticmethod
    async def wait(event: asyncio.Event, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for an armed event; True when woken."""
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def _listen(self, queue: str) -> None:
        if not self._listening.supported or self._stop.is_set():
            return
        with self._lock:
            if queue in self._queues:
                return
            self._queues.add(queue)
            if self._listener is not None:
                self._listener.add(queue)
            if self._thread is not None:
                return
            self._thread = threading.Thread(
                target=self._listen_loop, name="jobledger-listen", daemon=True
            )
        self._thread.start()

    def _listen_loop(self) -> None:
        with self._lock:
            listener = self._listener = self._listening.listener(sorted(self._queues))
        if listener is None:
            return
        try:
            while not self._stop.is_set():
                woken = listener.woken(0.5)
                if ANY_QUEUE in woken:
                    with self._lock:
                        woken = set(self._queues)
                for queue in woken:
                    self.notify_threadsafe(queue)
        except Exception:  # never take the server down with a listener
            log.exception("the listener for queues %s failed", ",".join(sorted(self._queues)))
        finally:
            listener.close()
            with self._lock:
                # The next arm starts another, listening on every queue again.
                self._listener = self._thread = None
                self._queues.clear()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(2.0)
