"""The relay: publishes outbox records to a broker, in order, and marks them published only
after the broker confirmed them.

One loop, under a leader lease in the ledger (``relay:<name>``), so that two relays started by
mistake do not interleave: the second waits and takes over when the first stops or dies. Each
turn reads the due unpublished records in ``(available_at, id)`` order, publishes them as one
pipelined batch, waits for the broker's confirmations, and marks the confirmed prefix of the
batch published — fenced by the lease, in one transaction. A record is therefore marked only
after the broker has it; a relay that dies between the two publishes it again on restart (the
consumers skip the repeat). When part of a batch fails, only the records before the first
failure are marked, and the next turn starts again at that failure: what was confirmed is
never reordered, what was not is tried again in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from .._faults import fault_point
from .._ledger import Ledger
from .._records import Counts, OutboxRecord, positive_seconds, whole_number
from .._runtime.worker import default_worker_name
from ..backends.base import Backend
from ..errors import (
    BackendUnavailable,
    BrokerUnavailable,
    JobledgerError,
    LeadershipLost,
)
from ..maintenance.leader import LeaderElection
from .base import Publisher, describe, publisher_for
from .urls import BrokerURL

__all__ = ["Relay", "RelayStats"]

log = logging.getLogger("jobledger.relay")


@dataclass
class RelayStats(Counts):
    """What one relay did."""

    published: int = 0
    """Records the broker confirmed and the relay marked published."""
    duplicates: int = 0
    """Of those, how many the broker said it already had (JetStream's dedupe window)."""
    batches: int = 0
    failures: int = 0
    """Batches the broker refused or did not confirm in time (in whole or in part)."""
    leadership_lost: int = 0
    """Times the relay's lease was taken over before it could mark what it had published."""
    pruned: int = 0


class Relay:
    """Publishes a ledger's outbox to a broker (``jobledger relay --to URL``).

    - ``to``: the broker URL (``amqp://…``, ``nats://…``, ``redis://…``; see docs/transports.md).
    - ``queues``: publish only these queues' records (default: all).
    - ``name``: relays with the same name share one leader lease, so only one of them
      publishes at a time (default ``"default"``). Give relays of disjoint queue sets
      different names.
    - ``batch_size``: records per batch (default 100); ``poll_interval``: seconds between
      looks at the outbox when it is empty (default 0.2).
    - ``lease_seconds``: the leader lease (default 15): how long a relay that died blocks
      its successor.
    - ``keep_published``: published records older than this are pruned (default 1 day;
      None keeps them).
    - ``clock``: a function returning "now" for the ledger (tests); default the database's.
    """

    def __init__(
        self,
        ledger: Ledger | Backend,
        to: str | BrokerURL,
        *,
        queues: Sequence[str] | None = None,
        name: str = "default",
        holder: str | None = None,
        batch_size: int = 100,
        poll_interval: float = 0.2,
        lease_seconds: float = 15.0,
        keep_published: timedelta | None = timedelta(days=1),
        clock: Callable[[], datetime] | None = None,
        publisher: Publisher | None = None,
    ):
        whole_number(batch_size, 1, 10_000, "batch_size")
        positive_seconds(poll_interval, "poll_interval")
        positive_seconds(lease_seconds, "lease_seconds")
        self.backend: Backend = ledger.backend if isinstance(ledger, Ledger) else ledger
        self.url = to if isinstance(to, BrokerURL) else BrokerURL.parse(to)
        self.publisher = publisher or publisher_for(self.url)
        self.queues = list(queues) if queues else None
        self.name = name
        self.lease_name = f"relay:{name}"
        self.holder = holder or default_worker_name()
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.lease_seconds = lease_seconds
        self.keep_published = keep_published
        self.clock = clock
        self.stats = RelayStats()
        self._stopping = threading.Event()
        self._election = LeaderElection(
            lambda: self.backend.leader,
            self.lease_name,
            self.holder,
            lease_seconds,
            self._now,
            label=f"relay {name} ({self.holder})",
            what="the outbox",
        )
        self._connected = False
        self._next_prune = 0.0
        self._state = "idle"
        self._last_error: str | None = None

    def __repr__(self) -> str:
        return f"Relay(to={self.url.redacted!r}, name={self.name!r})"

    def _now(self) -> datetime | None:
        return self.clock() if self.clock is not None else None

    # -- control ---------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop after the current batch (safe from a signal handler or another thread)."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def run(self) -> RelayStats:
        """Publish until ``stop()``; waits as a standby while another relay holds the lease."""
        asyncio.run(self._run(drain=False))
        return self.stats

    def drain(self, timeout: float = 30.0) -> RelayStats:
        """Publish everything due now, then return — within ``timeout`` seconds, clean-up
        included. Raises ``BrokerUnavailable`` when it could not: another relay holds the lease,
        or the broker did not take everything (the message says what is left)."""
        started = time.monotonic()
        try:
            asyncio.run(asyncio.wait_for(self._run(drain=True), timeout))
        except TimeoutError:
            why = (
                f"another relay holds the lease {self.lease_name!r}"
                if self._state == "standby"
                else f"the broker at {self.url.redacted} did not take everything"
                + (f" ({self._last_error})" if self._last_error else "")
            )
            raise BrokerUnavailable(
                f"the relay did not publish everything due within {timeout:g} s: {why}; "
                f"published {self.stats.published}, {self._left()} "
                f"(gave up after {time.monotonic() - started:.1f} s)"
            ) from None
        return self.stats

    def _left(self) -> str:
        """What is still due, per queue, for a report (or why that cannot be said)."""
        try:
            stats = self.backend.outbox.stats(self._now())
        except JobledgerError as exc:
            return f"what is still due is unknown ({exc})"
        due = {
            s.queue: s.due for s in stats if s.due and (not self.queues or s.queue in self.queues)
        }
        if not due:
            return "nothing is still due"
        listed = ", ".join(f"{q} {n}" for q, n in sorted(due.items()))
        return f"{sum(due.values())} records still due ({listed})"

    # -- the loop --------------------------------------------------------------------------------

    async def _run(self, drain: bool) -> None:
        failures = 0
        log.info(
            "relay %s (%s) publishing to %s%s",
            self.name,
            self.holder,
            self.url.redacted,
            f" for queues {','.join(self.queues)}" if self.queues else "",
        )
        try:
            while not self._stopping.is_set():
                try:
                    state = self._state = await self._turn()
                    failures = 0
                except (BrokerUnavailable, BackendUnavailable) as exc:
                    failures += 1
                    self._last_error = str(exc)
                    self.stats.add(failures=1)
                    delay = min(5.0, 0.05 * 2 ** min(failures, 7)) * (0.5 + random.random() / 2)
                    log.warning("relay: %s; retrying in %.1f s", exc, delay)
                    await self._disconnect()
                    await self._sleep(delay)
                    continue
                if state == "busy":
                    continue
                if state == "standby":
                    await self._sleep(min(1.0, self.lease_seconds / 3))
                    continue
                if drain:
                    return
                await self._sleep(self.poll_interval)
        finally:
            # Bounded, so that a cancelled drain ends on time even when the broker or the
            # database hangs.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._disconnect()), 2.0)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.to_thread(self._election.release, self._now()), 2.0)
            log.info("relay %s stopped: %s", self.name, self.stats)

    async def _sleep(self, seconds: float) -> None:
        # Cancellable (a drain's timeout ends it at once) and quick to see stop().
        deadline = time.monotonic() + seconds
        while not self._stopping.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    async def _turn(self) -> str:
        """One batch: ``busy`` when there may be more to publish at once, ``idle`` when nothing
        is due, ``standby`` while another relay holds the lease."""
        if not await self._lead():
            return "standby"
        records = await asyncio.to_thread(
            self.backend.outbox.due, self.batch_size, self._now(), self.queues
        )
        await self._prune()
        if not records:
            return "idle"
        if not self._connected:
            await self.publisher.connect()
            self._connected = True
        outcome = await self.publisher.publish(records)
        confirmed = records[: outcome.confirmed]
        if confirmed:
            fault_point("relay.after_publish")
            await self._mark(confirmed, outcome.duplicates)
        self.stats.add(batches=1)
        if outcome.error is not None:
            raise BrokerUnavailable(
                f"{self.url.redacted} confirmed {outcome.confirmed} of {len(records)} records; "
                f"record {records[outcome.confirmed].id} failed: {describe(outcome.error)}"
            )
        return "busy" if len(records) == self.batch_size else "idle"

    async def _mark(self, records: list[OutboxRecord], duplicates: int) -> None:
        lease = self._election.lease
        assert lease is not None
        try:
            marked = await asyncio.to_thread(
                self.backend.outbox.mark, [r.id for r in records], lease, self._now()
            )
        except LeadershipLost:
            # Another relay took over while this one was publishing: it publishes these again,
            # and the consumers skip the repeats.
            self.stats.add(leadership_lost=1)
            log.warning(
                "relay %s lost its lease before marking %d records published; the new leader "
                "publishes them again",
                self.name,
                len(records),
            )
            self._election.lost()
            return
        # Counted as the mark found them: a record already marked (by a relay of another name
        # whose queues overlap this one's) is not this relay's to count.
        self.stats.add(published=marked, duplicates=min(duplicates, marked))
        log.debug(
            "published %d records (%d already known to the broker, %d marked already), last id %d",
            len(records),
            duplicates,
            len(records) - marked,
            records[-1].id,
        )

    # -- leadership ------------------------------------------------------------------------------

    async def _lead(self) -> bool:
        """Hold the relay's leader lease (``maintenance.leader``: renewed a third through,
        taken only when free or expired)."""
        was = self._election.lease
        lease = await asyncio.to_thread(self._election.hold, self._now())
        if was is not None and (lease is None or lease.token != was.token):
            self.stats.add(leadership_lost=1)
        return lease is not None

    async def _disconnect(self) -> None:
        if self._connected:
            self._connected = False
            await self.publisher.close()

    async def _prune(self) -> None:
        if self.keep_published is None or time.monotonic() < self._next_prune:
            return
        self._next_prune = time.monotonic() + 600
        cutoff = (self._now() or datetime.now(UTC)) - self.keep_published
        pruned = await asyncio.to_thread(self.backend.outbox.prune, cutoff)
        if pruned:
            self.stats.add(pruned=pruned)
            log.info("pruned %d outbox records published before %s", pruned, cutoff)
