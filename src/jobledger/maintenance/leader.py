"""Leader election: one named authority at a time, held as a lease in the ledger.

Every singleton — the scheduler of each cohort, the broker relay, the pruner — takes its
authority the same way, through ``LeaderElection``:

- **keep**: the holder renews its lease once a third of it has passed; a renewal that finds the
  token gone (the lease expired and was taken) ends the leadership (``LeadershipLost``);
- **take**: a standby first *reads* the lease and tries to take it only when it is free or
  expired — a read takes no lock that the leader's fenced writes would wait for (nor, on
  SQLite, the write lock), so standbys polling every pass cost the leader nothing;
- **term**: every new holder gets a new token and the term plus one;
- **fence**: every write made with the authority names the lease (``fence(conn)`` in the same
  transaction, or a write that takes the lease, like ``outbox.mark``): a lease that moved makes
  the write fail with ``LeadershipLost`` and change nothing, and on PostgreSQL the lease row is
  held until the fenced transaction ends, so no takeover commits in between;
- **resign**: a holder that stops releases its lease, so a standby takes over at its next look
  instead of after the lease runs out.

Time: with an explicit clock (tests) renewals are paced by it; otherwise by the process's
monotonic clock, while the database's clock (the lease's ``now``) decides what is valid.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from .._records import LeaderLease, positive_seconds
from ..errors import BackendUnavailable, LeadershipLost

if TYPE_CHECKING:
    from ..backends.leader import Leader

__all__ = ["LeaderElection"]

log = logging.getLogger("jobledger.leader")


class LeaderElection:
    """Holds (or waits for) the leader lease ``name`` for ``holder``.

    ``store`` returns the ledger's leader storage; ``clock`` gives an explicit time for the
    database (None: its own clock).
    """

    def __init__(
        self,
        store: Callable[[], Leader],
        name: str,
        holder: str,
        lease_seconds: float,
        clock: Callable[[], datetime | None] = lambda: None,
        *,
        label: str | None = None,
        what: str | None = None,
    ):
        positive_seconds(lease_seconds, "lease_seconds")
        self._store = store
        self.name = name
        self.holder = holder
        self.lease_seconds = float(lease_seconds)
        self._clock = clock
        self._label = label or holder
        self._what = what or repr(name)
        self.lease: LeaderLease | None = None
        self._renewed_mono = 0.0

    def __repr__(self) -> str:
        state = f"term {self.lease.term}" if self.lease is not None else "standby"
        return f"<LeaderElection {self.name} {self.holder} {state}>"

    @property
    def leading(self) -> bool:
        """True while this holder believes it holds the lease (until a renewal says otherwise)."""
        return self.lease is not None

    # -- time -------------------------------------------------------------------------------------

    def _now(self, now: datetime | None) -> datetime | None:
        return now if now is not None else self._clock()

    def since_renewal(self, now: datetime | None = None) -> float:
        """Seconds since the lease was last taken or renewed."""
        explicit = self._now(now)
        if explicit is not None and self.lease is not None:
            return (explicit - self.lease.renewed_at).total_seconds()
        return time.monotonic() - self._renewed_mono

    def database_now(self, now: datetime | None = None) -> datetime:
        """The time to decide by: explicit, or the database's clock as of the lease's last
        statement plus the time that has passed here since."""
        explicit = self._now(now)
        if explicit is not None:
            return explicit
        if self.lease is None:
            raise LeadershipLost(self.name, self.holder, "read the time")
        return self.lease.now + timedelta(seconds=time.monotonic() - self._renewed_mono)

    # -- holding ----------------------------------------------------------------------------------

    def hold(self, now: datetime | None = None) -> LeaderLease | None:
        """The lease if this holder has it (renewed when due) or can take it now; None while
        another holder's lease is valid."""
        if self.lease is not None:
            try:
                return self.keep(now)
            except LeadershipLost:
                pass
        store = self._store()
        current = next((x for x in store.leases(self._now(now)) if x.name == self.name), None)
        if current is not None and current.valid:
            return None
        acquired = store.acquire(self.name, self.holder, self.lease_seconds, self._now(now))
        if acquired is None:
            return None
        self._took(acquired)
        log.info(
            "%s now leads %s (term %d, lease %.0f s)",
            self._label,
            self._what,
            acquired.term,
            self.lease_seconds,
        )
        return acquired

    def keep(self, now: datetime | None = None) -> LeaderLease:
        """The held lease, renewed if a third of it has passed; ``LeadershipLost`` if it is
        gone (it expired and another holder took it, or it was released)."""
        lease = self.lease
        if lease is None:
            raise LeadershipLost(self.name, self.holder, "renew")
        if self.since_renewal(now) < self.lease_seconds / 3:
            return lease
        renewed = self._store().renew(lease, self.lease_seconds, self._now(now))
        if renewed is None:
            self.lost()
            raise LeadershipLost(self.name, self.holder, "renew")
        self._took(renewed)
        return renewed

    def fence(self, conn: Any, now: datetime | None = None) -> LeaderLease:
        """Check, inside the transaction ``conn``, that the lease is still held, and keep it
        held until that transaction ends; ``LeadershipLost`` otherwise."""
        lease = self.keep(now)
        self._store().fence(lease, self._now(now), conn=conn)
        return lease

    def lost(self) -> None:
        """Forget the lease (a fenced write or a renewal found it gone)."""
        if self.lease is not None:
            log.warning("%s lost the lead of %s", self._label, self._what)
        self.lease = None

    def release(self, now: datetime | None = None) -> None:
        """Give the lease up now, so a standby takes over at its next look."""
        lease, self.lease = self.lease, None
        if lease is None:
            return
        try:
            self._store().release(lease, self._now(now))
        except BackendUnavailable as exc:
            log.warning("could not release %r (it will expire): %s", self.name, exc)

    def _took(self, lease: LeaderLease) -> None:
        self.lease = lease
        self._renewed_mono = time.monotonic()
