"""Pieces both dialects share: filters, conflict checks, the claim's turns, publish verdicts."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from .._records import (
    MAX_JOB_ID,
    Failure,
    InsertResult,
    JobFilter,
    JobState,
    NewJob,
    PublishItem,
    PublishStatus,
    QueueDepth,
    created_results,
)
from ..errors import KeyConflict

if TYPE_CHECKING:
    from .database import Database

#: Orders a caller may ask ``History.find`` for.
ORDERS = {
    "id": "id",
    "-id": "id DESC",
    "updated": "updated_at DESC, id DESC",
    "run_at": "run_at, id",
}


def insert_values(job: NewJob, run_at: float, now: float) -> dict[str, Any]:
    """The values of the ``job_insert`` statement on SQLite for one job (times as epoch seconds),
    and of ``job_insert_traced`` for one with a trace context."""
    values = {
        "queue": job.queue,
        "key": job.key,
        "task": job.task,
        "payload": job.payload_json,
        "priority": job.priority,
        "run_at": run_at,
        "max_attempts": job.max_attempts,
        "lease_seconds": float(job.lease_seconds),
        "now": now,
        "correlation_id": job.correlation_id,
        "group": job.group,
    }
    if job.trace_context is not None:
        values["trace_context"] = job.trace_context
    return values


def pause_reason(failure: Failure) -> str:
    """What a group paused by a failed attempt shows as its reason."""
    return f"job {failure.lease.job_id}: {failure.error_class}: {failure.message}"[:500]


class ClaimTurns:
    """Whose turn it is in a claim over queues with jobs both without and with a group.

    The side whose turn it is takes up to half the batch, the other side the rest, and the first
    side whatever the second left; turns alternate, so with one job per claim each side gets
    every other claim: neither a flood of grouped jobs nor one of ungrouped jobs starves the
    other. A side that had nothing when it was last asked goes first, for its half: while it
    still has nothing, that costs one cheap empty look, and the other side is asked once for
    the whole batch instead of twice for halves (each grouped claim finds its groups again).
    Shared by a backend's claiming threads: a lost update only changes who goes first once."""

    def __init__(self) -> None:
        self._turns = itertools.count()
        self._empty: str | None = None

    def claim(
        self,
        plain: Callable[[int], list[Any]],
        grouped: Callable[[int], list[Any]],
        limit: int,
    ) -> list[Any]:
        if self._empty is None:
            grouped_first = next(self._turns) % 2 == 1
        else:
            grouped_first = self._empty == "grouped"
        first, second = (grouped, plain) if grouped_first else (plain, grouped)
        share = (limit + 1) // 2
        head = first(share)
        asked_second = limit - len(head)
        tail = second(asked_second) if asked_second > 0 else []
        left = limit - len(head) - len(tail)
        more = first(left) if left > 0 and len(head) == share else []
        empty = [
            side
            for side, asked, got in (
                ("grouped" if grouped_first else "plain", share, len(head) + len(more)),
                ("plain" if grouped_first else "grouped", asked_second, len(tail)),
            )
            if asked > 0 and got == 0
        ]
        self._empty = empty[0] if len(empty) == 1 else None
        return head + tail + more


def filter_sql(where: JobFilter, db: Database) -> tuple[str, dict[str, Any]]:
    """The WHERE clause (without the keyword) and parameters for a ``JobFilter``, in the
    dialect of ``db`` (its placeholders, times and case-insensitive LIKE)."""
    param, to_db_time = db.param, db.to_db
    clauses: list[str] = []
    params: dict[str, Any] = {}
    if where.queue is not None:
        clauses.append(f"queue = {param('f_queue')}")
        params["f_queue"] = where.queue
    if where.states:
        names = []
        for i, state in enumerate(where.states):
            names.append(param(f"f_state{i}"))
            params[f"f_state{i}"] = JobState(state).value
        clauses.append(f"state IN ({', '.join(names)})")
    if where.task is not None:
        clauses.append(f"task = {param('f_task')}")
        params["f_task"] = where.task
    if where.key_prefix:
        clauses.append(f"substr(key, 1, {len(where.key_prefix)}) = {param('f_prefix')}")
        params["f_prefix"] = where.key_prefix
    if where.group is not None:
        clauses.append(f"group_name = {param('f_group')}")
        params["f_group"] = where.group
    if where.error_contains:
        clauses.append(db.ilike("last_error", param("f_error")))
        text = where.error_contains.lower()
        escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        params["f_error"] = f"%{escaped}%"
    if where.since is not None:
        clauses.append(f"updated_at >= {param('f_since')}")
        params["f_since"] = to_db_time(where.since)
    if where.until is not None:
        clauses.append(f"updated_at < {param('f_until')}")
        params["f_until"] = to_db_time(where.until)
    if where.ids is not None:
        names = []
        # An id beyond the range of ids names no job (and SQLite could not even bind it).
        for i, job_id in enumerate(j for j in map(int, where.ids) if 0 < j <= MAX_JOB_ID):
            names.append(param(f"f_id{i}"))
            params[f"f_id{i}"] = job_id
        clauses.append(f"id IN ({', '.join(names)})" if names else "1 = 0")
    if where.after_id is not None:
        clauses.append(f"id > {param('f_after')}")
        params["f_after"] = min(int(where.after_id), MAX_JOB_ID)
    return (" AND ".join(clauses) or "1 = 1"), params


def resolve_inserts(
    jobs: Sequence[NewJob],
    created: dict[tuple[str, str], int],
    existing: dict[tuple[str, str], tuple[int, str, Any]],
    on_conflict: str,
    pruned: dict[tuple[str, str], tuple[int, str, Callable[[NewJob], bool]]] | None = None,
) -> list[InsertResult]:
    """Match each requested job to what the insert did, and find key conflicts.

    ``created`` maps (queue, key) to the id of a row this insert created; ``existing`` maps the
    others to (id, task, payload) of the row already there; ``pruned`` maps keys blocked by a
    tombstone to (pruned job id, task, a test that a new job's payload is the pruned one's).
    Within one batch the first job with a key creates it; later ones with the same key are
    duplicates of it.
    """
    if len(created) == len(jobs):
        # Every job created (so no key was named twice): each result is its own job's.
        return created_results([created[(job.queue, job.key)] for job in jobs])
    pruned = pruned or {}
    results: list[InsertResult] = []
    first: dict[tuple[str, str], NewJob] = {}
    conflicts: list[str] = []
    conflict_queue = ""
    for job in jobs:
        ident = (job.queue, job.key)
        if ident in created and ident not in first:
            first[ident] = job
            results.append(InsertResult(created[ident], True))
            continue
        if ident in pruned:
            job_id, task, is_same = pruned[ident]
            same = task == job.task and is_same(job)
            if not same:
                conflicts.append(job.key)
                conflict_queue = conflict_queue or job.queue
            results.append(InsertResult(job_id, False, conflict=not same, pruned=True))
            continue
        if ident in first:
            other = first[ident]
            same = other.task == job.task and same_payload(other.payload_json, job.payload_json)
            job_id = created[ident]
        else:
            job_id, task, stored = existing[ident]
            same = task == job.task and same_payload(stored, job.payload_json)
        if not same:
            conflicts.append(job.key)
            conflict_queue = conflict_queue or job.queue
        results.append(InsertResult(job_id, False, conflict=not same))
    if conflicts and on_conflict == "raise":
        raise KeyConflict(conflict_queue, conflicts, [r.id for r in results if r.conflict])
    return results


def publish_compare(
    item: PublishItem, stored_task: str, stored_payload: Any, fingerprint: str | None
) -> PublishStatus:
    """Is publishing ``item`` onto an existing job a replay or a conflict? A job of another task
    is a conflict, as for an enqueue and for a pruned job's tombstone. Else by the fingerprint
    of the request that made the job, or — for a job not published over HTTP (enqueued from
    Python, or its request record is gone) — by its payload alone."""
    if stored_task != item.job.task:
        return "conflict"
    if fingerprint is not None:
        return "replayed" if fingerprint == item.fingerprint else "conflict"
    return "replayed" if same_payload(stored_payload, item.job.payload_json) else "conflict"


def same_payload(stored: str | bytes, payload_json: str) -> bool:
    """Is the payload a job holds (its JSON text as the database gives it back) the one of
    ``payload_json``? Numbers are compared by their decimal value, as JSON writes them:
    PostgreSQL's ``jsonb`` keeps ``1e+300`` as the number 10^300 and gives it back in those
    digits, which is another number as a Python float (the float nearest 1e+300 is not
    10^300), and ``0.30000000000000004`` back as a float that is no ``Decimal`` of it. Read
    both as decimals, they are the same, as they are on SQLite, which keeps the text."""
    return bool(
        json.loads(stored, parse_float=Decimal) == json.loads(payload_json, parse_float=Decimal)
    )


def queue_depths_from_rows(rows: Iterable[Sequence[Any]]) -> list[QueueDepth]:
    """``(queue, state, n, m, oldest_due_run_at, clock)`` rows → one ``QueueDepth`` per queue."""
    fields: dict[str, dict[str, Any]] = {}
    for queue, state, n, m, first, clock in rows:
        entry = fields.setdefault(queue, {"queue": queue})
        if state == "pending":
            entry["pending"] = int(n)
            entry["due"] = int(m or 0)
            if first is not None:
                entry["oldest_due_pending_seconds"] = max(0.0, seconds(clock) - seconds(first))
        elif state == "leased":
            entry["leased"] = int(n)
            entry["expired_leases"] = int(m or 0)
        else:
            entry["dead"] = int(n)
    return [QueueDepth(**fields[q]) for q in sorted(fields)]


def seconds(value: datetime | float) -> float:
    """A time (epoch seconds, or a datetime) as epoch seconds."""
    return value if isinstance(value, float | int) else value.timestamp()
