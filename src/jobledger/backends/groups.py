"""The groups role: the limits of a queue's groups, their pauses, and the operator's view of
them (docs/groups.md). The grouped claim itself is part of ``Jobs.claim``.

Written once for both dialects (migration 008): limits, pauses and the operator's view.
The grouped claim is each dialect's own (``sqlite/grouped.py``, ``postgres/grouped.py``).
"""

from __future__ import annotations

from datetime import datetime

from .._records import GroupLimits, GroupStatus, group_status
from .database import Database

__all__ = ["Groups"]


class Groups:
    """Group limits, pauses and status (``backend.groups``)."""

    def __init__(self, db: Database):
        self._db = db

    def limits_put(self, queue: str, limits: GroupLimits, now: datetime | None = None) -> None:
        """Set the limits of every group of a queue (no limits at all removes the row)."""
        if limits.unlimited:
            self._db.count("group_limits_delete", {"queue": queue})
            return
        params = {
            "queue": queue,
            "max_leased": limits.max_leased,
            "rate": limits.rate,
            "burst": limits.burst,
            "now": self._db.clock(now),
        }
        self._db.count("group_limits_put", params)

    def limits_get(self, queue: str) -> GroupLimits:
        """The limits of the groups of a queue; no limits when none were set."""
        rows = self._db.read("group_limits_get", {"queue": queue})
        return GroupLimits() if not rows else GroupLimits(rows[0][0], rows[0][1], rows[0][2])

    def all(self, queue: str, now: datetime | None = None) -> list[GroupStatus]:
        """Groups of a queue with pending or leased jobs, or paused, by name. Counts are read
        through the grouped partial indexes."""
        limits = self.limits_get(queue)
        rows = self._db.read("group_list", {"queue": queue, "now": self._db.clock(now)})
        to_time = self._db.to_time
        return [group_status(queue, r, limits, to_time(r[9]), to_time) for r in rows]  # type: ignore[arg-type]

    def pause(
        self, queue: str, name: str, until: datetime, reason: str, now: datetime | None = None
    ) -> datetime:
        """Pause a group until ``until`` unless it is paused longer already; return its pause."""
        params = {"queue": queue, "name": name, "until": self._db.to_db(until), "reason": reason}
        [(paused,)] = self._db.run("group_pause", params)
        return self._db.to_time(paused)  # type: ignore[return-value]

    def resume(self, queue: str, name: str, now: datetime | None = None) -> bool:
        """Lift a group's pause; False when it had none in force."""
        params = {"queue": queue, "name": name, "now": self._db.clock(now)}
        return self._db.count("group_resume", params) > 0

    def prune_idle(self, keep: float, now: datetime | None = None, limit: int = 1000) -> int:
        """Delete up to ``limit`` rows of groups idle for ``keep`` seconds (no pending or
        leased job, no pause in force, neither served nor refilled since); return how many.
        A group that gets jobs again starts as a new one would, which is what its row said."""
        params = {"now": self._db.clock(now), "keep": float(keep)}
        with self._db.transaction() as c:
            pruned = self._db.count("group_prune_idle", params, conn=c, limit=max(1, int(limit)))
            if pruned:
                # Every group with pending jobs keeps a row (the claim walks them): one whose
                # job arrived while the prune looked is given its row back.
                self._db.count("group_rows_restore", {}, conn=c)
        return pruned
