"""Consumers: run the ledger's task handlers for the messages a broker delivers.

``BrokerConsumer`` is a ``Worker`` whose jobs come from a broker instead of a polling claim:
everything after the claim — runner threads, async handlers, lease renewal, fenced and batched
outcome writes, the rescuer, graceful shutdown — is the polling worker's own code. For each
message it claims the job **by key** in the ledger (``job_claim_keys``: one transaction for the
messages received together; the same lease and token as any claim, and an attempt opened), runs
the handler, writes the outcome, and only then acknowledges the message. What it does with a
message depends on the job, never on the message:

=====================================  ==========================================================
the job in the ledger                  the consumer
=====================================  ==========================================================
pending and due                        claims it, runs the handler, writes the outcome, then acks
done, dead or cancelled                acks without running anything (a redelivery, a repeat)
leased by another worker               acks: if that lease ends without finishing the job, the
                                       job becomes pending again and the ledger writes a new
                                       outbox record — a new message follows
pending, due within ``not_due_wait``   waits until it is due, then claims (clocks differ a little)
pending, due later                     acks: the record for that run time is published then
pending, its group paused              keeps the message and looks again until the pause ends
no such job                            acks (it was pruned, or never committed)
not a jobledger message                acks and logs an error
the ledger cannot be reached           keeps the message and tries again with backoff
=====================================  ==========================================================

A consumer killed after writing the outcome and before the ack leaves the message to be
delivered again; the job is finished by then, so the repeat is acknowledged and skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .._faults import fault_point
from .._ledger import Ledger
from .._records import Counts, JobRow, JobState
from .._runtime.leases import LeaseHold
from .._runtime.worker import Worker, WorkerStats
from ..errors import BackendUnavailable, BrokerUnavailable, ConfigError, JobledgerError
from .base import Delivery, Subscriber, subscriber_for
from .urls import BrokerURL

__all__ = ["BrokerConsumer", "DeliveryStats"]

log = logging.getLogger("jobledger.consumer")

DeliveryHook = Callable[[Delivery, str], None]


@dataclass
class DeliveryStats(Counts):
    """What a consumer did with the messages it received."""

    received: int = 0
    redelivered: int = 0
    """Messages the broker had delivered before."""
    claimed: int = 0
    """Messages whose job was claimed and run."""
    finished: int = 0
    """Messages for a job already done, dead or cancelled: acknowledged, nothing run."""
    held: int = 0
    """Messages for a job leased by another worker: acknowledged, nothing run."""
    stale: int = 0
    """Messages for a job pending until later: acknowledged (a later message covers it)."""
    waited: int = 0
    """Messages that came a little before their job was due, and waited for it."""
    unknown: int = 0
    """Messages naming no job of the ledger."""
    malformed: int = 0
    ledger_errors: int = 0
    """Times a claim failed because the ledger was unreachable (the message was kept)."""


class BrokerConsumer(Worker):
    """Runs the handlers of a ledger's tasks for messages from a broker
    (``jobledger consume APP --from URL``).

    - ``source``: the broker URL, the same one the relay publishes to.
    - ``queues``: the ledger queues to consume (default: the queues of the registered tasks).
      Each must be routed to a broker (``jobledger outbox route QUEUE``).
    - ``concurrency``: handlers run at once, and messages held unacknowledged at most.
    - ``not_due_wait``: a message that arrives at most this many seconds before its job is due
      waits for it (default 2).
    - ``on_delivery(delivery, outcome)``: called for every message with what was done with it
      (``claimed``, ``finished``, ``held``, ``stale``, ``waited``, ``unknown``, ``malformed``,
      ``ledger_error``) — for metrics and tests; it must not block.

    Other options are the ``Worker``'s (``name``, ``rescue_interval``, ``grace_seconds``,
    ``clock``). A consumer runs the rescuer like any worker.
    """

    def __init__(
        self,
        ledger: Ledger,
        source: str | BrokerURL,
        queues: Sequence[str] | None = None,
        *,
        concurrency: int = 4,
        not_due_wait: float = 2.0,
        on_delivery: DeliveryHook | None = None,
        subscriber: Subscriber | None = None,
        **options: Any,
    ):
        super().__init__(ledger, queues, concurrency=concurrency, batch_size=1, **options)
        self.url = source if isinstance(source, BrokerURL) else BrokerURL.parse(source)
        self.subscriber = subscriber or subscriber_for(self.url, self.name)
        self.not_due_wait = float(not_due_wait)
        self.on_delivery = on_delivery
        self.deliveries = DeliveryStats()
        self._acks: dict[tuple[int, str], Delivery] = {}
        self._acks_lock = threading.Lock()
        self._broker_loop: asyncio.AbstractEventLoop | None = None
        self._broker_thread: threading.Thread | None = None
        self._closing: asyncio.Event | None = None
        self._room: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._waiting: set[Delivery] = set()
        self._broker_error: JobledgerError | None = None

    def __repr__(self) -> str:
        return f"BrokerConsumer({self.url.redacted!r}, queues={self.queues!r})"

    # -- the Worker's loop, fed by the broker ---------------------------------------------------

    def run(self) -> WorkerStats:
        """Consume until ``stop()``. Returns the worker's stats; ``deliveries`` has the
        messages'."""
        routed = {r.queue for r in self.backend.outbox.routes()}
        missing = [q for q in self.queues if q not in routed]
        if missing:
            raise ConfigError(
                f"queue(s) {', '.join(missing)} are not routed to a broker, so no job of theirs "
                "is ever published: route them first (jobledger outbox route QUEUE), or leave "
                "them to polling workers"
            )
        self._start()
        try:
            self._fetch_loop()
        finally:
            try:
                self._shutdown()
            finally:
                self._close_broker()
        if self._broker_error is not None:
            raise self._broker_error
        return self.stats

    def _fetch_loop(self) -> None:
        ready = threading.Event()
        self._broker_thread = threading.Thread(
            target=self._broker_thread_main, args=(ready,), name="jobledger-broker", daemon=True
        )
        self._broker_thread.start()
        ready.wait(10)
        next_rescue = 0.0
        while not self._stopping.is_set():
            if time.monotonic() >= next_rescue:
                self._rescue()
                next_rescue = time.monotonic() + self.rescue_interval
            self._stopping.wait(min(self.rescue_interval, 0.5))

    def finished(self, holds: list[LeaseHold]) -> None:
        super().finished(holds)
        for hold in holds:
            with self._acks_lock:
                delivery = self._acks.pop((hold.job.id, hold.job.lease_token), None)
            if delivery is None:
                continue
            # The job's outcome is in the ledger (or it was given back unstarted): the message
            # has done its work.
            fault_point("consumer.before_ack")
            self._soon(self._ack(delivery))

    def _holding(self) -> int:
        with self._acks_lock:
            return len(self._acks)

    # -- the broker thread -----------------------------------------------------------------------

    def _broker_thread_main(self, ready: threading.Event) -> None:
        try:
            asyncio.run(self._broker_main(ready))
        except JobledgerError as exc:  # e.g. the broker's client library is not installed
            self._broker_error = exc
            self.stop()
        except Exception:  # a bug: stop the consumer rather than run without a broker
            log.exception("the broker loop of consumer %s failed; stopping", self.name)
            self.stop()
        finally:
            ready.set()

    async def _broker_main(self, ready: threading.Event) -> None:
        self._broker_loop = asyncio.get_running_loop()
        self._closing = asyncio.Event()
        self._room = asyncio.Event()
        ready.set()
        failures = 0
        connected = False
        next_extend = 0.0
        while not self._stopping.is_set():
            try:
                if time.monotonic() >= next_extend:
                    next_extend = time.monotonic() + await self._extend_held()
                if not connected:
                    await self.subscriber.connect(self.queues, self.concurrency)
                    connected = True
                    if failures:
                        log.info("consumer %s reconnected to %s", self.name, self.url.redacted)
                    failures = 0
                room = self.concurrency - self._holding()
                if room <= 0:
                    self._room.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._room.wait(), 0.25)
                    continue
                deliveries = await self.subscriber.receive(room, 0.25)
                if deliveries:
                    await self._handle(deliveries, first=True)
            except BrokerUnavailable as exc:
                connected = False
                failures += 1
                delay = min(5.0, 0.05 * 2 ** min(failures, 7)) * (0.5 + random.random() / 2)
                log.warning("consumer %s: %s; reconnecting in %.1f s", self.name, exc, delay)
                await self.subscriber.close()
                await self._pause(delay)
        # Stopping: take no more messages, but ack what the jobs still running finish.
        await self._closing.wait()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=10)
        for delivery in list(self._waiting):
            await delivery.release()
        await self.subscriber.close()

    async def _extend_held(self) -> float:
        """Keep the messages of running jobs from going to another consumer (a job may run
        longer than JetStream's ack_wait or Redis's reclaim_after); returns when to do it
        again."""
        after = self.url.redelivery_after
        if after is None:
            return 3600.0
        with self._acks_lock:
            held = list(self._acks.values())
        for delivery in held:
            await delivery.extend()
        return max(0.05, after / 3)

    def _close_broker(self) -> None:
        loop, closing = self._broker_loop, self._closing
        if loop is not None and closing is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(closing.set)
        if self._broker_thread is not None:
            self._broker_thread.join(15)

    async def _pause(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._stopping.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    def _soon(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a coroutine on the broker loop, from any thread; it is awaited before the
        consumer closes its connection."""
        loop = self._broker_loop
        if loop is None:
            coro.close()
            return

        def spawn() -> None:
            task = asyncio.ensure_future(coro)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        try:
            loop.call_soon_threadsafe(spawn)
        except RuntimeError:  # the loop ended: the message comes again, and is skipped
            coro.close()

    async def _ack(self, delivery: Delivery) -> None:
        await delivery.ack()
        if self._room is not None:
            self._room.set()

    # -- one message -----------------------------------------------------------------------------

    def _outcome(self, delivery: Delivery, outcome: str) -> None:
        if outcome != "ledger_error":
            self.deliveries.add(**{outcome: 1})
        if self.on_delivery is not None:
            try:
                self.on_delivery(delivery, outcome)
            except Exception:  # a hook must never break the consumer
                log.exception("on_delivery hook failed")

    async def _handle(self, deliveries: list[Delivery], first: bool) -> None:
        """Claim the jobs of some messages in one transaction, dispatch what was claimed, and
        settle the rest."""
        if first:
            redelivered = sum(d.redelivered for d in deliveries)
            self.deliveries.add(received=len(deliveries), redelivered=redelivered)
        valid: list[Delivery] = []
        for delivery in deliveries:
            envelope = delivery.envelope
            if envelope is None or envelope.queue not in self.queues:
                log.error(
                    "consumer %s: dropping a message that is not a jobledger message for queues %s",
                    self.name,
                    ",".join(self.queues),
                )
                self._outcome(delivery, "malformed")
                await delivery.ack()
            else:
                valid.append(delivery)
        if not valid:
            return
        wanted = [(d.envelope.queue, d.envelope.key) for d in valid if d.envelope is not None]
        try:
            claims, holds = await asyncio.to_thread(self.claim_keys, wanted)
        except BackendUnavailable as exc:
            log.warning("consumer %s: cannot claim %d job(s): %s", self.name, len(valid), exc)
            for delivery in valid:
                self.deliveries.add(ledger_errors=1)
                self._outcome(delivery, "ledger_error")
                self._later(delivery, 0.5 + random.random())
            return
        for delivery, claim in zip(valid, claims, strict=True):
            if claim.job is not None:
                with self._acks_lock:
                    self._acks[(claim.job.id, claim.job.lease_token)] = delivery
                self._outcome(delivery, "claimed")
                continue
            outcome, wait = self._decide(claim.current, claim.paused_until)
            self._outcome(delivery, outcome)
            if outcome == "waited":
                self._later(delivery, wait)
            else:
                await delivery.ack()
        self._dispatch(holds)

    def _decide(
        self, job: JobRow | None, paused_until: datetime | None = None
    ) -> tuple[str, float]:
        """What to do with a message whose job could not be claimed."""
        if job is None:
            return "unknown", 0.0
        if job.state.is_final:
            return "finished", 0.0
        if job.state is JobState.LEASED:
            return "held", 0.0
        if paused_until is not None:
            # Its group is paused: keep the message and look again (no new message would come
            # when the pause ends).
            pause = (paused_until - self._py_now()).total_seconds()
            return "waited", min(max(0.02, pause), max(1.0, self.not_due_wait))
        wait = (job.run_at - self._py_now()).total_seconds()
        if wait <= self.not_due_wait:
            return "waited", max(0.02, wait)
        return "stale", 0.0

    def _later(self, delivery: Delivery, seconds: float) -> None:
        self._waiting.add(delivery)

        async def again() -> None:
            await self._pause(seconds)
            self._waiting.discard(delivery)
            if self._stopping.is_set():
                await delivery.release()
                return
            await self._handle([delivery], first=False)

        task = asyncio.ensure_future(again())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- reporting -------------------------------------------------------------------------------

    def summary(self) -> str:
        d = self.deliveries
        return (
            f"received {d.received} ({d.redelivered} redelivered): ran {d.claimed}, skipped "
            f"{d.finished} finished, {d.held} held elsewhere, {d.stale} not due, "
            f"{d.unknown} unknown, {d.malformed} malformed; completed {self.stats.completed}, "
            f"retried {self.stats.retried}, dead {self.stats.dead}, lease lost "
            f"{self.stats.lease_lost}"
        )
