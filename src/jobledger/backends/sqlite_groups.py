"""The SQLite side of groups (008): limits, pauses, the operator's view, and the grouped claim.

Mixed into ``SqliteBackend``. SQLite has one writer, so the grouped claim needs no lock of its
own: it runs inside the claim's ``BEGIN IMMEDIATE`` transaction, where no other claim can count
a group's leases or spend its tokens at the same time.
"""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .._records import (
    GroupLimits,
    GroupState,
    GroupStatus,
    allowance,
    group_status,
    tokens_now,
)
from .common import from_epoch as _dt


def _ts(value: datetime | None) -> float:
    return time.time() if value is None else value.timestamp()


def _served_key(served_at: float | None, queue: str, name: str) -> tuple[bool, float, str, str]:
    """The order of a round: never served first, then least recently served."""
    return (served_at is not None, served_at or 0.0, queue, name)


class SqliteGroups:
    """Groups for ``SqliteBackend``."""

    if TYPE_CHECKING:
        _sql: dict[str, str]

        def _write(self, conn: Any = None) -> AbstractContextManager[sqlite3.Connection]: ...
        def _read(self, text: str, params: Any = ()) -> list[Any]: ...

    # -- the claim ---------------------------------------------------------------------------------

    def _groups_waiting(self, c: sqlite3.Connection, queues: Sequence[str]) -> bool:
        names = ", ".join(f":q{i}" for i in range(len(queues))) or "NULL"
        text = self._sql["group_waiting"].replace("{queues}", names)
        return c.execute(text, {f"q{i}": q for i, q in enumerate(queues)}).fetchone() is not None

    def _group_limits(self, c: sqlite3.Connection, queue: str) -> GroupLimits:
        row = c.execute(self._sql["group_limits_get"], {"queue": queue}).fetchone()
        return GroupLimits() if row is None else GroupLimits(row[0], row[1], row[2])

    def _claim_grouped(
        self,
        c: sqlite3.Connection,
        queues: Sequence[str],
        worker: str,
        limit: int,
        clock: float,
        lease_seconds: float | None,
    ) -> list[Any]:
        """Up to ``limit`` due jobs with a group, round the groups (see ``job_claim``)."""
        now = _dt(clock)
        assert now is not None
        plans: list[tuple[tuple[bool, float, str, str], GroupState, int]] = []
        for queue in queues:
            limits = self._group_limits(c, queue)
            viable = 0
            for name, served_at, tokens, refilled_at in c.execute(
                self._sql["group_candidates"], {"queue": queue, "now": clock}
            ).fetchall():
                leased = 0
                if limits.max_leased is not None:
                    leased = c.execute(
                        self._sql["group_leased"],
                        {"queue": queue, "name": name, "cap": limits.max_leased},
                    ).fetchone()[0]
                state = GroupState(queue, name, leased, tokens, _dt(refilled_at), limits)
                take = allowance(state, now, limit)
                if take > 0:
                    plans.append((_served_key(served_at, queue, name), state, take))
                    viable += 1
                    if viable == limit:
                        break
        plans.sort(key=lambda p: p[0])
        del plans[limit:]
        picks: list[tuple[int, int, int]] = []
        for order, (_, state, take) in enumerate(plans):
            ids = c.execute(
                self._sql["group_due_jobs"],
                {"queue": state.queue, "name": state.name, "now": clock, "n": take},
            ).fetchall()
            picks.extend((rank, order, row[0]) for rank, row in enumerate(ids))
        if not picks:
            return []
        picks.sort()
        chosen = ",".join(str(job_id) for _, _, job_id in picks[:limit])  # ids we just read
        rows = c.execute(
            self._sql["job_lease_ids"].replace("{ids}", chosen),
            {"now": clock, "lease_seconds": lease_seconds, "worker": worker},
        ).fetchall()
        taken = Counter((r[1], r[13]) for r in rows)
        for _, state, _ in plans:
            n = taken[(state.queue, state.name)]
            if n:
                left = None
                if state.limits.rate is not None:
                    left = tokens_now(state.limits, state.tokens, state.refilled_at, now) - n
                c.execute(
                    self._sql["group_served"],
                    {"queue": state.queue, "name": state.name, "tokens": left, "now": clock},
                )
        return rows

    # -- limits, pauses, the operator's view ---------------------------------------------------

    def group_limits_put(
        self, queue: str, limits: GroupLimits, now: datetime | None = None
    ) -> None:
        with self._write() as c:
            if limits.unlimited:
                c.execute(self._sql["group_limits_delete"], {"queue": queue})
                return
            c.execute(
                self._sql["group_limits_put"],
                {
                    "queue": queue,
                    "max_leased": limits.max_leased,
                    "rate": limits.rate,
                    "burst": limits.burst,
                    "now": _ts(now),
                },
            )

    def group_limits_get(self, queue: str) -> GroupLimits:
        rows = self._read(self._sql["group_limits_get"], {"queue": queue})
        return GroupLimits() if not rows else GroupLimits(rows[0][0], rows[0][1], rows[0][2])

    def group_list(self, queue: str, now: datetime | None = None) -> list[GroupStatus]:
        clock = _ts(now)
        at = _dt(clock)
        assert at is not None
        limits = self.group_limits_get(queue)
        rows = self._read(self._sql["group_list"], {"queue": queue, "now": clock})
        return [group_status(queue, r, limits, at, _dt) for r in rows]

    def group_pause(
        self, queue: str, name: str, until: datetime, reason: str, now: datetime | None = None
    ) -> datetime:
        with self._write() as c:
            row = c.execute(
                self._sql["group_pause"],
                {"queue": queue, "name": name, "until": _ts(until), "reason": reason},
            ).fetchone()
        paused = _dt(row[0])
        assert paused is not None
        return paused

    def group_resume(self, queue: str, name: str, now: datetime | None = None) -> bool:
        with self._write() as c:
            cur = c.execute(
                self._sql["group_resume"], {"queue": queue, "name": name, "now": _ts(now)}
            )
            return cur.rowcount > 0
