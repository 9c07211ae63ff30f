"""The leader role: named leases that make one process the single authority for a singleton
(the scheduler of a cohort, the broker relay). A lease has a token and a term; every write a
leader makes is fenced by it."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from .._records import LeaderLease

__all__ = ["Leader"]


class Leader(Protocol):
    """Leader leases (``backend.leader``)."""

    def acquire(
        self, name: str, holder: str, ttl: float, now: datetime | None = None
    ) -> LeaderLease | None:
        """Take the lease ``name`` if nobody holds it or its lease expired: a new token, the
        term plus one. None while another holder's lease is valid."""
        ...

    def renew(
        self, lease: LeaderLease, ttl: float, now: datetime | None = None
    ) -> LeaderLease | None:
        """Extend a lease still held under its token; None when it expired or was taken."""
        ...

    def release(self, lease: LeaderLease, now: datetime | None = None) -> bool:
        """End a lease held under its token now, so another holder can take it at once."""
        ...

    def leases(self, now: datetime | None = None) -> list[LeaderLease]:
        """Every leader lease, valid or expired, with the clock the read used as ``now``."""
        ...

    def fence(self, lease: LeaderLease, now: datetime | None = None, conn: Any = None) -> None:
        """Raise ``LeadershipLost`` unless ``lease`` is still held. With ``conn`` (a transaction
        of this backend), hold the lease row until that transaction ends, so that no takeover
        commits before the writes fenced by it."""
        ...
