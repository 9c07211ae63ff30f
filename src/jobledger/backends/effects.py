"""The effects role: a handler's record that a side effect happened for a key, fenced by its
lease, so that a retry after a crash can tell it already happened (docs/guarantees.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from .._records import Lease

__all__ = ["Effects"]


class Effects(Protocol):
    """Effects recorded by key (``backend.effects``)."""

    def record(
        self,
        queue: str,
        key: str,
        effect: str,
        lease: Lease,
        detail: dict[str, Any] | None = None,
        now: datetime | None = None,
        conn: Any = None,
    ) -> bool:
        """Record that ``effect`` happened for this key, fenced by the lease. Returns True when
        recorded now, False when it was already recorded. Raises ``LeaseLost`` when stale."""
        ...

    def get(self, queue: str, key: str, effect: str) -> dict[str, Any] | None:
        """The recorded effect (with its ``detail``), or None."""
        ...

    def all(self, queue: str, key: str) -> list[dict[str, Any]]:
        """Every effect recorded for a key, oldest first."""
        ...
