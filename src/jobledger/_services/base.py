"""What every service needs of the ledger: its backend, opened (and migrated) on first use.

Services sit below the ledger, so they take this small protocol rather than importing it; the
``Ledger`` satisfies it and hands itself to each service it offers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..backends.base import Backend

__all__ = ["LedgerStorage", "Service"]


class LedgerStorage(Protocol):
    """The ledger as its services see it."""

    @property
    def backend(self) -> Backend: ...


class Service:
    """A service over the ledger's storage. The backend is looked up on each use, so building
    a service opens nothing."""

    def __init__(self, ledger: LedgerStorage):
        self._ledger = ledger

    @property
    def _backend(self) -> Backend:
        return self._ledger.backend
