"""The PostgreSQL side of groups (008): limits, pauses, the operator's view, and the grouped claim.

Mixed into ``PostgresBackend``. A grouped claim is one short transaction of four statements:

1. ``group_candidates`` finds the groups with due jobs (a skip scan of the grouped index),
   least recently served first, and takes a transaction-scoped advisory lock on each of the
   first ``limit`` that no other claim holds (``pg_try_advisory_xact_lock``: skipped, never
   waited for);
2. ``group_state`` reads those groups again in a new snapshot, taken after the locks, so every
   claim that held one of them before has committed: the count of leased jobs and the bucket
   are exact, and no two claims spend the same group's slots or tokens;
3. ``group_claim`` leases up to each group's allowance, one job per group per round;
4. ``group_served`` writes each served group's bucket and its turn.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg

from .._records import (
    GroupLimits,
    GroupState,
    GroupStatus,
    allowance,
    group_status,
    tokens_now,
)
from .common import utc as _utc

#: How long a worker trusts its last look at whether its queues have jobs with a group. Within
#: it, a claim over queues without groups costs no extra statement; a queue's first grouped job
#: waits at most this long for the grouped claim to notice it.
GROUPS_RECHECK_SECONDS = 0.5

_NEVER = datetime.min.replace(tzinfo=UTC)


class PostgresGroups:
    """Groups for ``PostgresBackend``."""

    if TYPE_CHECKING:
        _sql: dict[str, str]
        schema: str
        _tx: Callable[..., AbstractContextManager[psycopg.Connection[Any]]]
        _run: Callable[..., list[Any]]

        def _statement(self, name: str, limit: int) -> str: ...
        def _quick(self, text: str, params: dict[str, Any]) -> list[Any]: ...

    _groups_seen: dict[tuple[str, ...], tuple[float, bool]]
    _groups_seen_lock: threading.Lock

    @property
    def _lock_space(self) -> int:
        """The first key of the groups' advisory locks: one per schema, as a signed int4."""
        return zlib.crc32(f"jobledger_groups:{self.schema}".encode()) - 2**31

    # -- the claim ---------------------------------------------------------------------------------

    def _groups_waiting(self, queues: Sequence[str]) -> bool:
        ident = tuple(queues)
        seen = self._groups_seen.get(ident)
        clock = time.monotonic()
        if seen is not None and clock - seen[0] < GROUPS_RECHECK_SECONDS:
            return seen[1]
        waiting = bool(self._quick(self._sql["group_waiting"], {"queues": list(queues)}))
        with self._groups_seen_lock:
            self._groups_seen[ident] = (clock, waiting)
        return waiting

    def _claim_grouped(
        self,
        queues: Sequence[str],
        worker: str,
        limit: int,
        now: datetime | None,
        lease_seconds: float | None,
    ) -> list[Any]:
        """Up to ``limit`` due jobs with a group, round the groups (see ``job_claim``)."""
        with self._tx() as c:
            found = c.execute(
                self._statement("group_candidates", limit),
                {"queues": list(queues), "now": now, "lock_space": self._lock_space},
            ).fetchall()
            if not found:
                return []
            found.sort(key=lambda r: (r[2] is not None, r[2] or _NEVER, r[0], r[1]))
            rows = c.execute(
                self._sql["group_state"],
                {"queues": [r[0] for r in found], "names": [r[1] for r in found], "now": now},
            ).fetchall()
            current = {(r[0], r[1]): r for r in rows}
            clock = _utc(rows[0][9])
            assert clock is not None
            plans: list[tuple[GroupState, int]] = []
            for queue, name, _ in found:
                r = current[(queue, name)]
                if r[5] is not None and r[5] > clock:
                    continue  # paused since the first statement's snapshot
                limits = GroupLimits(r[6], r[7], r[8])
                state = GroupState(queue, name, r[2], r[3], _utc(r[4]), limits)
                take = allowance(state, clock, limit)
                if take > 0:
                    plans.append((state, take))
            if not plans:
                return []
            claimed = c.execute(
                self._statement("group_claim", limit),
                {
                    "queues": [s.queue for s, _ in plans],
                    "names": [s.name for s, _ in plans],
                    "take": [take for _, take in plans],
                    "ord": list(range(len(plans))),
                    "worker": worker,
                    "now": now,
                    "lease_seconds": lease_seconds,
                },
            ).fetchall()
            taken = Counter((r[1], r[13]) for r in claimed)
            served = [s for s, _ in plans if taken[(s.queue, s.name)]]
            if served:
                c.execute(
                    self._sql["group_served"],
                    {
                        "queues": [s.queue for s in served],
                        "names": [s.name for s in served],
                        "tokens": [
                            None
                            if s.limits.rate is None
                            else tokens_now(s.limits, s.tokens, s.refilled_at, clock)
                            - taken[(s.queue, s.name)]
                            for s in served
                        ],
                        "at": clock,
                    },
                )
            return claimed

    # -- limits, pauses, the operator's view ---------------------------------------------------

    def group_limits_put(
        self, queue: str, limits: GroupLimits, now: datetime | None = None
    ) -> None:
        if limits.unlimited:
            self._run("group_limits_delete", {"queue": queue})
            return
        self._run(
            "group_limits_put",
            {
                "queue": queue,
                "max_leased": limits.max_leased,
                "rate": limits.rate,
                "burst": limits.burst,
                "now": now,
            },
        )

    def group_limits_get(self, queue: str) -> GroupLimits:
        rows = self._run("group_limits_get", {"queue": queue})
        return GroupLimits() if not rows else GroupLimits(rows[0][0], rows[0][1], rows[0][2])

    def group_list(self, queue: str, now: datetime | None = None) -> list[GroupStatus]:
        limits = self.group_limits_get(queue)
        rows = self._run("group_list", {"queue": queue, "now": now})
        return [group_status(queue, r, limits, r[9], _utc) for r in rows]

    def group_pause(
        self, queue: str, name: str, until: datetime, reason: str, now: datetime | None = None
    ) -> datetime:
        rows = self._run(
            "group_pause", {"queue": queue, "name": name, "until": until, "reason": reason}
        )
        paused = _utc(rows[0][0])
        assert paused is not None
        return paused

    def group_resume(self, queue: str, name: str, now: datetime | None = None) -> bool:
        return bool(self._run("group_resume", {"queue": queue, "name": name, "now": now}))
