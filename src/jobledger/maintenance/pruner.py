"""The pruner: the housekeeping of the small tables, under one authority.

Every ``interval`` (default ten minutes) the pruner that holds the ``maintenance:pruner``
leader lease deletes per-minute rollups older than their keep (two days), dashboard sessions
past their expiry, tombstones past their horizon (their keys are free again), and the rows of
groups idle for a day (no jobs, no pause, not served since: a new group starts the same). Workers and
``jobledger serve`` each run one; the lease makes one of them do the work. Finished jobs are not
pruned here: that is the operator's ``jobledger prune`` (e.g. daily from cron), which decides
what to keep (docs/operations.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from .._records import Pruned
from ..errors import LeadershipLost
from .leader import LeaderElection
from .looper import Looper

if TYPE_CHECKING:
    from ..backends.base import Backend

__all__ = ["KEEP_IDLE_GROUPS", "KEEP_ROLLUPS", "Pruner"]

log = logging.getLogger("jobledger.maintenance")

KEEP_ROLLUPS = timedelta(days=2)
"""How long per-minute rollups are kept (the dashboard shows the last hour)."""

KEEP_IDLE_GROUPS = timedelta(days=1)
"""How long the row of a group with no jobs (its pause, rate bucket and turn) is kept."""


class Pruner(Looper):
    """Prunes the small tables of one ledger every ``interval`` seconds while it holds the
    pruner's leader lease (``holder`` names this process)."""

    kind = "pruner"

    def __init__(
        self,
        backend: Callable[[], Backend],
        holder: str,
        interval: float = 600.0,
        clock: Callable[[], datetime | None] = lambda: None,
    ):
        super().__init__(interval)
        self._backend = backend
        self._clock = clock
        self.election = LeaderElection(
            lambda: backend().leader,
            "maintenance:pruner",
            holder,
            max(30.0, 3 * interval),
            clock,
            label=f"pruner {holder}",
            what="housekeeping",
        )

    def run_once(self, now: datetime | None = None) -> Pruned | None:
        """Prune once; None when another process holds the pruner's lease."""
        if self.election.hold(now) is None:
            return None
        backend = self._backend()
        clock = now or self._clock()
        cutoff = (clock or datetime.now(UTC)) - KEEP_ROLLUPS
        try:
            pruned = Pruned(
                rollups=backend.stats.minutes_prune(cutoff),
                sessions=backend.api.session_prune(clock),
                tombstones=backend.history.prune_tombstones(clock),
                groups=backend.groups.prune_idle(KEEP_IDLE_GROUPS.total_seconds(), clock),
            )
        except LeadershipLost:
            self.election.lost()
            return None
        if pruned.rollups or pruned.sessions or pruned.tombstones or pruned.groups:
            log.info(
                "pruned %d rollup rows, %d expired sessions, %d expired tombstones, %d idle groups",
                pruned.rollups,
                pruned.sessions,
                pruned.tombstones,
                pruned.groups,
            )
        return pruned

    def stopped(self) -> None:
        self.election.release()
