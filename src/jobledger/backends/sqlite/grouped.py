"""The grouped claim on SQLite: jobs with a group, taken round the groups (docs/groups.md).

SQLite has one writer, so the grouped claim needs no lock of its own: it runs inside the
claim's ``BEGIN IMMEDIATE`` transaction, where no other claim can count a group's leases or
spend its tokens at the same time.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from ..._records import GroupLimits, GroupState, allowance, claim_share, tokens_now
from .database import SqliteDatabase, to_time

__all__ = ["GroupedClaim"]


def _served_key(served_at: float | None, queue: str, name: str) -> tuple[bool, float, str, str]:
    """The order of a round: never served first, then least recently served."""
    return (served_at is not None, served_at or 0.0, queue, name)


class GroupedClaim:
    """The grouped half of ``SqliteJobs.claim``, run on the claim's write transaction."""

    def __init__(self, db: SqliteDatabase):
        self.sql = db.sql

    def waiting(self, c: sqlite3.Connection, queues: Sequence[str]) -> bool:
        """Whether any of these queues has pending jobs with a group."""
        names = ", ".join(f":q{i}" for i in range(len(queues))) or "NULL"
        text = self.sql["group_waiting"].replace("{queues}", names)
        return c.execute(text, {f"q{i}": q for i, q in enumerate(queues)}).fetchone() is not None

    def _limits(self, c: sqlite3.Connection, queue: str) -> GroupLimits:
        row = c.execute(self.sql["group_limits_get"], {"queue": queue}).fetchone()
        return GroupLimits() if row is None else GroupLimits(row[0], row[1], row[2])

    def _candidates(
        self, c: sqlite3.Connection, queue: str, clock: float, limit: int
    ) -> Iterator[tuple[str, float | None, float | None, float | None]]:
        """The groups of ``queue`` with due jobs, in the order of their turns, as read: from
        the groups' rows, or from the index when that walk stops short (see the statements)."""
        scan = 4 * limit + 64
        seen = set()
        # Read as the claim asks (it stops once it has as many groups as it can serve); the
        # statement is closed when the claim stops asking.
        turns = c.execute(
            self.sql["group_candidates_turns"], {"queue": queue, "now": clock, "scan": scan}
        )
        try:
            for row in turns:
                seen.add(row[0])
                yield row
        finally:
            turns.close()
        # Only when the claim wants more than those (it stops reading once it has enough).
        params = {"queue": queue, "scan": scan}
        if c.execute(self.sql["group_rows_beyond"], params).fetchone()[0]:
            for row in c.execute(
                self.sql["group_candidates"], {"queue": queue, "now": clock}
            ).fetchall():
                if row[0] not in seen:
                    yield row

    def claim(
        self,
        c: sqlite3.Connection,
        queues: Sequence[str],
        worker: str,
        limit: int,
        clock: float,
        lease_seconds: float | None,
    ) -> list[Any]:
        """Up to ``limit`` due jobs with a group, round the groups (see ``Jobs.claim``)."""
        now = to_time(clock)
        assert now is not None
        plans: list[tuple[tuple[bool, float, str, str], GroupState, int]] = []
        for queue in queues:
            limits = self._limits(c, queue)
            viable = 0
            for name, served_at, tokens, refilled_at in self._candidates(c, queue, clock, limit):
                leased = 0
                if limits.max_leased is not None:
                    leased = c.execute(
                        self.sql["group_leased"],
                        {"queue": queue, "name": name, "cap": limits.max_leased},
                    ).fetchone()[0]
                state = GroupState(queue, name, leased, tokens, to_time(refilled_at), limits)
                take = allowance(state, now, limit)
                if take > 0:
                    plans.append((_served_key(served_at, queue, name), state, take))
                    viable += 1
                    if viable == limit:
                        break
        plans.sort(key=lambda p: p[0])
        del plans[limit:]
        if not plans:
            return []
        picks = self._picks(c, plans, limit, clock)
        if not picks:
            return []
        picks.sort()
        chosen = ",".join(str(job_id) for _, _, job_id in picks[:limit])  # ids we just read
        rows = c.execute(
            self.sql["job_lease_ids"].replace("{ids}", chosen),
            {"now": clock, "lease_seconds": lease_seconds, "worker": worker},
        ).fetchall()
        taken = Counter((r[1], r[13]) for r in rows)
        c.executemany(
            self.sql["group_served"],
            [
                {
                    "queue": state.queue,
                    "name": state.name,
                    "tokens": None
                    if state.limits.rate is None
                    else tokens_now(state.limits, state.tokens, state.refilled_at, now)
                    - taken[(state.queue, state.name)],
                    "now": clock,
                }
                for _, state, _ in plans
                if taken[(state.queue, state.name)]
            ],
        )
        return rows

    def _picks(
        self,
        c: sqlite3.Connection,
        plans: list[tuple[tuple[bool, float, str, str], GroupState, int]],
        limit: int,
        clock: float,
    ) -> list[tuple[int, int, int]]:
        """The due jobs the claim chooses from, as (rank in its group, the group's turn, id):
        one job per group per round, so the claim takes the first ``limit`` in that order.

        Each group is read for its share of the claim first (``claim_share``). Only when that
        gives fewer than ``limit`` are the groups that had their whole share read again for all
        their allowance. The choice is the same as reading every group's allowance at once;
        with 500 groups and claims of 500, one row of each group is read, not all its due jobs."""
        share = claim_share(limit, len(plans))
        read = [self._due(c, state, min(take, share), clock) for _, state, take in plans]
        if sum(len(ids) for ids in read) < limit:
            for i, (_, state, take) in enumerate(plans):
                if len(read[i]) == share < take:
                    read[i] = self._due(c, state, take, clock)
        return [
            (rank, order, row[0]) for order, ids in enumerate(read) for rank, row in enumerate(ids)
        ]

    def _due(self, c: sqlite3.Connection, state: GroupState, n: int, clock: float) -> list[Any]:
        """A group's next ``n`` due jobs' ids, in claim order."""
        return c.execute(
            self.sql["group_due_jobs"],
            {"queue": state.queue, "name": state.name, "now": clock, "n": n},
        ).fetchall()
