"""The groups role: the limits of a queue's groups, their pauses, and the operator's view of
them (docs/groups.md). The grouped claim itself is part of ``Jobs.claim``."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from .._records import GroupLimits, GroupStatus

__all__ = ["Groups"]


class Groups(Protocol):
    """Group limits, pauses and status (``backend.groups``)."""

    def limits_put(self, queue: str, limits: GroupLimits, now: datetime | None = None) -> None:
        """Set the limits of every group of a queue (no limits at all removes the row)."""
        ...

    def limits_get(self, queue: str) -> GroupLimits:
        """The limits of the groups of a queue; no limits when none were set."""
        ...

    def all(self, queue: str, now: datetime | None = None) -> list[GroupStatus]:
        """Groups of a queue with pending or leased jobs, or paused, by name. Counts are read
        through the grouped partial indexes."""
        ...

    def pause(
        self, queue: str, name: str, until: datetime, reason: str, now: datetime | None = None
    ) -> datetime:
        """Pause a group until ``until`` unless it is paused longer already; return its pause."""
        ...

    def resume(self, queue: str, name: str, now: datetime | None = None) -> bool:
        """Lift a group's pause; False when it had none in force."""
        ...
