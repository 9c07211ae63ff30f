"""Where this process's claims of each queue have got to: the claim that does not walk dead
index entries.

A claim takes the first due pending jobs in the order of the index ``jobledger_jobs_due``
(queue, priority DESC, run_at, id); claiming a job updates its row, and the row's old index
entry stays until vacuum removes it. While a long transaction elsewhere in the database holds
back the xmin horizon (an analytics query, a session idle in transaction) vacuum removes
nothing, and a scan from the start of the index visits the dead row of every job claimed since
that transaction began: measured, the claim grew from 474 to 4,324 buffers in 90 s at
300 jobs/s. So a claim scans from the last position it consumed (``job_claim_after``) and only
now and then from the start (``job_claim``), which finds what the position skips: a job that
another process placed ahead of it (a higher priority, a run time in the past, a released job)
and a job another transaction held locked when this process's scan passed it.

How often: a scan from the start at least every ``SPREAD`` times its own cost, and at most
``LONGEST`` seconds apart. On a healthy database it costs about a millisecond, so this process
looks from the start every few tens of milliseconds, as often as it claims; under a held xmin
it may cost a second, and a job placed ahead of the position by another process waits up to
``LONGEST`` seconds. A claim from the positions that finds nothing looks from the start at once
while that is cheap (under ``CHEAP`` per job it claimed, or within ``WORSE`` times what
the claim from the positions cost): on a healthy database an idle worker sees everything
another process placed ahead of it as soon as it claims.

What this process itself places ahead of its position (an enqueue, a retry, a release, a
rescue through the same backend) sends its next claim back to the start. So does a job of its
own that *becomes* due ahead of the position: a retry due later at the position's priority is
after the position when it is made, but the position drops to a lower priority once nothing of
its own is due, and a claim from it then never looks up. Each job this process makes pending
for a later run time is kept (its run time and priority, at most ``WATCHED`` a queue, the
earliest first), and the first claim whose ``now`` reaches its run time compares it with the
position then (``after``): ahead, that claim scans from the start. Jobs of other processes
that become due ahead of the position wait for the next scan from the start (at most
``LONGEST`` seconds), as those placed ahead of it do.

A burst worker (``--burst``: drain what is due, then return) ends only after a claim from the
start found nothing (``Jobs.rewind``).

The grouped claim's walk of the turns has the same trouble and the same remedy: ``TurnCursor``.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from ..._records import NewJob
from .database import position_params

__all__ = ["ClaimCursor", "ScanSchedule", "TurnCursor"]

#: A scan from the start is due again after this many times what the last one took.
SPREAD = 20.0
#: ... and at most this many seconds after the last one.
LONGEST = 10.0
#: A scan from the start that took less per job it claimed (seconds) is cheap: a claim from
#: the positions that finds nothing then looks from the start at once. A claim's own work is
#: about 30 µs per job; walking dead index entries costs per entry, whatever it claims.
CHEAP = 0.005
#: ... or less than this many times what the last claim from the positions took.
WORSE = 4.0
#: The priority of a queue without a position: above any integer, so that its scan starts at
#: the start of the queue (see ``job_claim_after``).
_BEFORE_ALL = 2**31
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_BEGINNING = datetime.min.replace(tzinfo=UTC)
#: Jobs due later kept per queue (``returned``): past this, the earliest half is kept and the
#: rest is found by the scans from the start (at most ``LONGEST`` seconds late).
WATCHED = 1024

Position = tuple[int, datetime, int]
#: A job of this process due later, as the cursor keeps it: (run time, priority, id).
_Later = tuple[datetime, int, int]


def _as_returned(
    jobs: Iterable[NewJob], now: datetime
) -> Iterator[tuple[str, int, datetime, int, str | None]]:
    """New jobs inserted at ``now`` as ``returned`` takes them: a run time None is ``now``, and
    the id, not known here, is 0."""
    return (
        (j.queue, j.priority, j.run_at if j.run_at is not None else now, 0, j.group) for j in jobs
    )


def _ahead(priority: int, run_at: datetime, job_id: int, position: Position) -> bool:
    """Whether a claim from ``position`` does not look at a job (it sees the same priority
    after the position, and every lower priority)."""
    return priority > position[0] or (
        priority == position[0] and (run_at, job_id) <= (position[1], position[2])
    )


class ScanSchedule:
    """When this process's next scan from the start is due, for claims that otherwise start
    from positions (``ClaimCursor``, ``TurnCursor``). Safe to share between threads: a lost
    update only moves a scan from the start, never skips one for longer than ``LONGEST``."""

    def __init__(self, clock: Any = time.monotonic):
        self._clock = clock
        self._from_start_at = 0.0
        self._from_start_cost = 0.0
        self._after_cost = 0.0
        self.last_from_start = True
        """Whether the last claim scanned from the start (False: from the positions only)."""
        self._lock = threading.Lock()

    def _from_start_due(self) -> bool:
        return bool(self._clock() >= self._from_start_at)

    def scanned_from_start(self, seconds: float, claimed: int) -> None:
        """A claim scanned from the start in ``seconds`` and took ``claimed`` jobs: the next
        such scan is due later."""
        self._from_start_cost = seconds / max(1, claimed)
        self.last_from_start = True
        self._from_start_at = self._clock() + min(LONGEST, SPREAD * seconds)

    def claimed_after(self, seconds: float) -> None:
        """A claim from the positions took ``seconds``."""
        self._after_cost = seconds
        self.last_from_start = False

    def found_nothing(self) -> bool:
        """A claim from the positions found nothing: True when it should look from the start
        at once, because that is cheap — under ``CHEAP`` per job it claimed, or under
        ``WORSE`` times what the claim from the positions cost (a loaded machine slows both;
        dead index entries only the scan from the start). A worker with nothing to do then
        finds at once what another process placed ahead of it, as a claim without a position
        would."""
        cost = self._from_start_cost
        return cost < CHEAP or cost < WORSE * self._after_cost

    def rewind(self) -> bool:
        """Scan from the start at the next claim (something may be ahead of a position).
        Whether the last claim did not (a burst worker then claims once more before it ends)."""
        self._from_start_at = 0.0
        return not self.last_from_start


class ClaimCursor(ScanSchedule):
    """The last position claimed in each queue by this process, and when the next scan from
    the start is due. Safe to share between threads: a position that goes backwards or a lost
    update only costs a scan from the start, never a job."""

    def __init__(self, clock: Any = time.monotonic):
        super().__init__(clock)
        self._at: dict[str, Position] = {}
        self._later: dict[str, list[_Later]] = {}
        """Each queue's jobs of this process due later (a heap, the earliest first)."""

    def after(self, queues: Sequence[str], now: datetime | None = None) -> dict[str, Any] | None:
        """The positions' parameters of ``job_claim_after`` for a claim of ``queues`` at
        ``now`` (None: the clock's time; with the queues' own, ``queue_params``), or None when
        this claim scans from the start: one is due, no queue has a position yet, or a job of
        this process became due ahead of a position."""
        became_due = self._later and self._became_due_ahead(queues, now)
        if became_due or self._from_start_due():
            return None
        at = self._at
        if not any(q in at for q in queues):
            return None
        return position_params([at.get(q, (_BEFORE_ALL, _EPOCH, 0)) for q in queues])

    def advance(self, claimed: Iterable[tuple[str, int, datetime, int]]) -> None:
        """Move each queue's position to the last job claimed in it: ``claimed`` holds each
        one's (queue, priority, run_at, id)."""
        self.advance_rows(claimed, 0, 1, 2, 3)

    def advance_rows(
        self, rows: Iterable[Sequence[Any]], queue: int, priority: int, run_at: int, job_id: int
    ) -> None:
        """``advance`` from claimed rows as they come (the columns' indexes given): one key per
        row and no tuple of its own, since the claim's hot path calls it for every batch."""
        rows = rows if isinstance(rows, list) else list(rows)
        if not rows:
            return

        def order(r: Sequence[Any]) -> tuple[int, datetime, int]:
            return (-r[priority], r[run_at], r[job_id])

        queues = {r[queue] for r in rows}
        if len(queues) == 1:
            chosen = {rows[0][queue]: max(rows, key=order)}
        else:
            chosen = {q: max((r for r in rows if r[queue] == q), key=order) for q in queues}
        last = {q: (r[priority], r[run_at], r[job_id]) for q, r in chosen.items()}
        with self._lock:
            self._at = {**self._at, **last}

    def returned(
        self,
        jobs: Iterable[tuple[str, int, datetime, int, str | None]],
        now: datetime | None = None,
    ) -> None:
        """Jobs this process made pending at ``now`` (None: the clock's time) — a retry, a
        release, a rescue, an insert — each as (queue, priority, run time, id, group): rewind if
        one is where a claim from its queue's position does not look — a higher priority, or
        the same one at or before the position, whatever its run time. One due later is kept
        too, for the claim whose ``now`` reaches its run time to compare with the position
        then (``after``): the position may have dropped below its priority by then. A grouped
        job is claimed another way (``grouped.py``)."""
        at = self._at
        moment = now if now is not None else datetime.now(UTC)
        rewind = False
        later: list[tuple[str, _Later]] = []
        for queue, priority, run_at, job_id, group in jobs:
            if group is not None:
                continue
            if run_at > moment:
                later.append((queue, (run_at, priority, job_id)))
            if not rewind:
                position = at.get(queue)
                rewind = position is not None and _ahead(priority, run_at, job_id, position)
        if rewind:
            self.rewind()
        if later:
            self._keep(later)

    def placed(self, jobs: Iterable[NewJob], now: datetime | None = None) -> None:
        """``jobs`` were inserted at ``now`` (None: the clock's time; a job's run time None:
        then): as ``returned``. A new job's id is not known here: at the position's own run
        time it counts as ahead (id 0). A job due at once needs no keeping: a claim from a
        position it is not ahead of reaches it before any job of a lower priority."""
        at = self._at
        jobs = jobs if isinstance(jobs, list) else list(jobs)
        if not at and all(j.run_at is None for j in jobs):
            return
        now = now if now is not None else datetime.now(UTC)
        self.returned(_as_returned(jobs, now), now)

    def _keep(self, later: list[tuple[str, _Later]]) -> None:
        with self._lock:
            heaps = self._later
            for queue, job in later:
                heap = heaps.setdefault(queue, [])
                heapq.heappush(heap, job)
                if len(heap) > WATCHED:
                    heaps[queue] = heapq.nsmallest(WATCHED // 2, heap)

    def _became_due_ahead(self, queues: Sequence[str], now: datetime | None) -> bool:
        """Take the kept jobs of ``queues`` due at ``now``: whether one is ahead of its
        queue's position (the claim then scans from the start)."""
        moment = now if now is not None else datetime.now(UTC)
        ahead = False
        with self._lock:
            for queue in queues:
                heap = self._later.get(queue)
                if not heap or heap[0][0] > moment:
                    continue
                position = self._at.get(queue)
                while heap and heap[0][0] <= moment:
                    run_at, priority, job_id = heapq.heappop(heap)
                    if position is not None and _ahead(priority, run_at, job_id, position):
                        ahead = True
                if not heap:
                    del self._later[queue]
        return ahead


class TurnCursor(ScanSchedule):
    """Where the front of each queue's turns was when this process's grouped claims last walked
    them, and when their next walk from the start is due (``grouped.py``).

    A grouped claim walks a queue's groups in the order of their turns (never served first,
    then least recently served) and writes the turn of each group it serves: the group's old
    entry in ``jobledger_groups_turn`` stays, dead, until vacuum removes it. Under a held xmin
    vacuum removes none, and a walk from the start visits every one. So a walk starts at the
    front its process last found (``jobledger_group_turns_from``): the turn of the first row
    that walk read at or after its own start, whatever that group's jobs. Every live row was
    at or after it then, and a row's turn only moves later (each serve writes the time of its
    claim), so the walk from the front reads the rows a walk from the start would, without the
    dead entries before them. Groups never served (no turn yet) are walked first either way. A
    claim at an explicit ``now`` writes that time as its groups' turns: a front past it moves
    back to it (``advance``). What a front can miss is a turn written by a claim whose
    transaction began before the front's turn was written and ended after the walk read it;
    the walks from the start, due as ``ClaimCursor``'s scans from the start are (at most
    ``LONGEST`` seconds apart), see those.

    Each group's probes start at its floor (migration 020): the run time and id of its first
    pending job, as the walk that last served it found — written by the claim, in the group's
    row. A walk from the start probes each group from the start of its jobs, and so does a walk
    whose time is ``LONGEST`` seconds past the floor's last such probe. What this process itself
    makes pending at a run time not after the latest time it claimed the queue at (a release,
    a job dated in the past) may be below a floor one of its claims wrote: the next walk starts
    from the start (``returned``)."""

    def __init__(self, clock: Any = time.monotonic):
        super().__init__(clock)
        self._at: dict[str, datetime] = {}
        self._claimed_at: dict[str, datetime] = {}
        """The latest time this process's grouped claims of each queue ran at: no floor they
        wrote is later."""

    def walk_from(self, queues: Sequence[str]) -> list[datetime | None] | None:
        """The least turn each queue's walk reads (None for a queue without a position), or
        None when this walk starts from the start: one is due, or no queue has a position."""
        if self._from_start_due():
            return None
        at = self._at
        if not any(q in at for q in queues):
            return None
        return [at.get(q) for q in queues]

    def advance(
        self, fronts: Iterable[tuple[str, datetime]], queues: Sequence[str], now: datetime | None
    ) -> None:
        """A walk of ``queues`` found each front in ``fronts`` (queue, turn). The claim wrote
        its groups' turns at ``now`` (None: the database's clock, later than any turn it read):
        a front past an explicit ``now`` moves back to it, so that the next walk sees them."""
        moment = now if now is not None else datetime.now(UTC)
        with self._lock:
            at = {**self._at, **dict(fronts)}
            if now is not None:
                for queue in queues:
                    if queue in at and at[queue] > now:
                        at[queue] = now
            self._at = at
            claimed = self._claimed_at
            if any(claimed.get(q, _BEGINNING) < moment for q in queues):
                self._claimed_at = {**claimed, **{q: moment for q in queues}}

    def returned(self, jobs: Iterable[tuple[str, int, datetime, int, str | None]]) -> None:
        """Jobs this process made pending, as ``ClaimCursor.returned`` has them (queue,
        priority, run time, id, group): a grouped one whose run time is not after the latest
        time this process claimed its queue at may be below its group's floor, so the next walk
        starts from the start. (Jobs made pending by other processes below a floor wait for a
        probe from the start: at most ``LONGEST`` seconds of the claims' time.)"""
        claimed = self._claimed_at
        if not claimed:
            return
        for queue, _, run_at, _, group in jobs:
            if group is not None and run_at <= claimed.get(queue, _BEGINNING):
                self.rewind()
                return

    def placed(self, jobs: Iterable[NewJob], now: datetime | None = None) -> None:
        """``jobs`` were inserted at ``now`` (None: the clock's time; a job's run time None:
        then): as ``returned``."""
        if not self._claimed_at:
            return
        self.returned(_as_returned(jobs, now if now is not None else datetime.now(UTC)))
