"""The grouped claim on PostgreSQL (docs/groups.md). Its statements are prepared (unless through a
pooler in transaction mode) with the batch size written in, and sent through libpq's prepared
call as the claim is (``prepared.py``): prepared again on each connection every
``REPLAN_EVERY`` runs, so that a generic plan made while the tables were nearly empty does not
stay where nothing analyzes them.

Queues without group limits (no leased limit, no rate) are claimed in **one statement**, its
own transaction, as the claim without groups is: ``group_claim_unlimited`` walks the groups'
rows in the order of their turns, least recently served first (every group with pending jobs
has a row: migration 012), through functions planned on the turn index (migration 017); keeps
the first ``limit`` with a due job; locks the row of each that no other claim holds (``FOR NO
KEY UPDATE SKIP LOCKED``: skipped, never waited for); leases up to each one's share of the
batch, one job per group per round; and writes their turns. With nothing to count under the
locks, no second snapshot is needed. When the shares fall short and a group had its whole
share, a second such statement takes the rest.

Every walk of the turns starts at the front this process last found (``TurnCursor``,
cursor.py: the first row of the walk, before which the turn index holds only the dead entries
that earlier serves left, which a held xmin keeps), and now and then at the start. Within each
group, both ways probe and pick from the group's floor (migration 020: the first pending job as
the walk that last served it found, written with its turn), past the dead entries of the jobs
claimed before it; a walk from the start, or a floor checked from the start more than
``LONGEST`` seconds of claim time ago, probes the group from its start.

Queues with limits, and a claim whose walk stopped short (many rows of groups without jobs
ahead), take **one short transaction of two statements** (``_claim_locked``):

1. ``group_candidates_turns`` walks and locks as above. When the walk stops short,
   ``group_candidates`` does the same from a skip scan of the grouped index, which finds every
   group with due jobs;
2. ``group_claim`` reads those groups again in a new snapshot, taken after the locks, so every
   claim that held one of them before has committed: the count of leased jobs and the bucket
   are exact, and no two claims spend the same group's slots or tokens. In the same statement
   it leases up to each group's allowance, one job per group per round, and writes each
   served group's bucket and its turn. It reads (and locks) each group's rows only for its
   share of the batch; when the shares fall short and a group had its whole share, a second
   ``group_claim`` in the same transaction takes the rest.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ..._records import claim_share
from .cursor import TurnCursor
from .database import PostgresDatabase, queue_params, turn_params
from .newjob import text_array
from .prepared import run_simple

__all__ = ["GROUPS_RECHECK_SECONDS", "WALK_IN_ORDER", "GroupedClaim", "walk_in_order"]

#: How long a worker trusts its last look at whether its queues have jobs with a group. Within
#: it, a claim over queues without groups costs no extra statement; a queue's first grouped job
#: waits at most this long for the grouped claim to notice it.
GROUPS_RECHECK_SECONDS = 0.5

_NEVER = datetime.min.replace(tzinfo=UTC)

#: Sent first in every grouped claim's transaction. The walk of the turns reads a queue's
#: groups' rows in turn order through ``jobledger_groups_turn`` and stops at its limit; while
#: nothing has analyzed the groups table (autovacuum off or not yet come round: the table is
#: filled by a trigger, from empty) the planner takes the queue for a few dozen rows and reads
#: every one of them, by bitmap or sequential scan, to sort them: 16 ms a claim of 10 at
#: 50,000 groups, against 2 with the walk (docs/benchmarks.md). No form of the query kept it
#: off that plan (a walk of one-row index probes was sorted the same way, per probe); these
#: two settings, for this transaction only, leave it the index. Every table a grouped claim
#: reads has the index it needs.
WALK_IN_ORDER = b"SET LOCAL enable_bitmapscan = off; SET LOCAL enable_seqscan = off"


def walk_in_order(conn: Any) -> None:
    """Plan the rest of this transaction (a grouped claim's) with ``WALK_IN_ORDER``."""
    run_simple(conn, WALK_IN_ORDER)


class GroupedClaim:
    """The grouped half of ``PostgresJobs.claim``: one short transaction of its own."""

    def __init__(self, db: PostgresDatabase):
        self._db = db
        self._seen: dict[tuple[str, ...], tuple[float, bool]] = {}
        self._seen_lock = threading.Lock()
        self._limited_at: dict[tuple[str, ...], float] = {}
        #: Where each queue's walk of the turns starts (cursor.py).
        self.turns = TurnCursor()

    def waiting(self, queues: Sequence[str]) -> bool:
        """Whether any of these queues has pending jobs with a group, as last seen at most
        ``GROUPS_RECHECK_SECONDS`` ago."""
        ident = tuple(queues)
        seen = self._seen.get(ident)
        clock = time.monotonic()
        if seen is not None and clock - seen[0] < GROUPS_RECHECK_SECONDS:
            return seen[1]
        waiting = bool(self._db.quick(self._db.sql["group_waiting"], {"queues": list(queues)}))
        with self._seen_lock:
            self._seen[ident] = (clock, waiting)
        return waiting

    def claim(
        self,
        queues: Sequence[str],
        worker: str,
        limit: int,
        now: datetime | None,
        lease_seconds: float | None,
        claim: str,
    ) -> list[Any]:
        """Up to ``limit`` due jobs with a group, round the groups (see ``Jobs.claim``), their
        tokens drawn from ``claim`` (``lease_set``). Queues without group limits are claimed in
        one statement (``group_claim_unlimited``); queues with limits, and a claim whose walk of
        the turns stopped short, in two (``_claim_locked``). Each walk starts where ``turns``
        says (``TurnCursor``)."""
        params = queue_params(queues) | {
            "now": now,
            "worker": worker,
            "lease_seconds": lease_seconds,
            "claim": claim,
        }
        taken: list[Any] = []
        for _ in range(2):  # a second round takes what the shares left, as group_claim's does
            if self._limited(queues):
                break
            asked = limit - len(taken)
            statement = self._db.prepared("group_claim_unlimited", asked, len(queues))
            walk_from = self.turns.walk_from(queues)
            started = time.perf_counter()
            rows = self._db.quick_prepared(statement, params | _turn_params(queues, walk_from))
            limited, more, share, front_queues, front_turns = rows[0][-5:]
            if limited:
                with self._seen_lock:
                    self._limited_at[tuple(queues)] = time.monotonic()
                break
            got = [r[:-5] for r in rows if r[0] is not None]
            self._walked(walk_from, time.perf_counter() - started, len(got))
            self.turns.advance(zip(front_queues or (), front_turns or (), strict=True), queues, now)
            taken += got
            if more and len(taken) < limit:
                break  # the walk stopped short: the two-statement claim finds every group
            if len(taken) == limit or not _had_whole_share(got, share, asked):
                return taken
            # The second round walks the turns again: the groups just served are now last.
        else:
            return taken
        return taken + self._claim_locked(queues, limit - len(taken), params, now)

    def _walked(self, walk_from: list[datetime | None] | None, seconds: float, got: int) -> None:
        if walk_from is None:
            self.turns.scanned_from_start(seconds, got)
        else:
            self.turns.claimed_after(seconds)

    def _limited(self, queues: Sequence[str]) -> bool:
        """Whether a queue of these had group limits at most ``GROUPS_RECHECK_SECONDS`` ago
        (then the claim goes the two-statement way without asking again)."""
        seen = self._limited_at.get(tuple(queues))
        return seen is not None and time.monotonic() - seen < GROUPS_RECHECK_SECONDS

    def _claim_locked(
        self, queues: Sequence[str], limit: int, params: dict[str, Any], now: datetime | None
    ) -> list[Any]:
        """The grouped claim in two statements, each group's slots and tokens counted in a
        snapshot taken after its lock (``params``: the claim's, as ``claim`` makes them)."""
        prepared = self._db.prepared
        with self._db.transaction() as c:
            walk_in_order(c)
            turns = prepared("group_candidates_turns", limit, len(queues))
            walk_from = self.turns.walk_from(queues)
            started = time.perf_counter()
            rows = turns.typed_rows(c, params | _turn_params(queues, walk_from))
            # Each group as (queue, name, turn, floor's run time, floor's id, exact).
            found = [r[:3] + r[6:9] for r in rows if r[1] is not None]
            more, kept = rows[0][3:5]
            self._walked(walk_from, time.perf_counter() - started, len(found))
            self.turns.advance({r[0]: r[5] for r in rows if r[5] is not None}.items(), queues, now)
            if more and kept < limit:
                # The walk of the groups' rows stopped short (many rows of groups without
                # jobs come first): find every group with due jobs, as the index has them.
                found = [
                    (*r, None, None, None)  # no floor: each group's jobs from the start
                    for r in prepared("group_candidates", limit, len(queues)).typed_rows(c, params)
                ]
            if not found:
                return []
            found.sort(key=lambda r: (r[2] is not None, r[2] or _NEVER, r[0], r[1]))
            groups = params | {
                "queues": text_array([r[0] for r in found]),
                "names": text_array([r[1] for r in found]),
                "floor_ats": _array_literal([r[3] for r in found]),
                "floor_ids": _array_literal([r[4] for r in found]),
                "exacts": _array_literal([r[5] for r in found]),
            }
            # Each group's share of the claim first (``claim_share``): no group's rows past its
            # share are locked.
            share = claim_share(limit, len(found))
            rows = prepared("group_claim", limit).typed_rows(c, groups | {"share": share})
            rest = limit - len(rows)
            if rest and _had_whole_share(rows, share, limit):
                # A group had its whole share and may have more: the rest as the claim would
                # have taken it (the groups' leases and buckets now count this claim's).
                rows += prepared("group_claim", rest).typed_rows(c, groups | {"share": rest})
            return rows


def _turn_params(queues: Sequence[str], walk_from: list[datetime | None] | None) -> dict[str, Any]:
    """The ``{turn_rows}`` of a walk of ``queues`` from ``walk_from`` (None: from the start)."""
    return turn_params(walk_from if walk_from is not None else [None] * len(queues))


def _array_literal(values: Sequence[datetime | int | bool | None]) -> str:
    """Times, ids or flags as one array literal (the statement's cast gives its type)."""
    return "{" + ",".join(_element(v) for v in values) + "}"


def _element(value: datetime | int | bool | None) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, datetime):
        return '"' + value.isoformat() + '"'
    if isinstance(value, bool):
        return "t" if value else "f"
    return str(int(value))


def _had_whole_share(rows: Sequence[Any], share: int | None, asked: int) -> bool:
    """Whether a claim of ``asked`` that read each group for ``share`` jobs (None: it found no
    group) took a whole share from some group (``rows`` are its jobs): that group may have more,
    which a claim that fell short takes in a second round."""
    if share is None or share >= asked:
        return False
    return share in Counter((r[1], r[13]) for r in rows).values()
