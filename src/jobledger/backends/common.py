"""Pieces both backends share: column lists, row mapping, filters, conflict checks."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from .._records import (
    ClaimedJob,
    Failure,
    InsertResult,
    JobFilter,
    JobRow,
    JobState,
    NewJob,
    PublishItem,
    PublishStatus,
    QueueDepth,
    Subscription,
    SubscriptionState,
)
from ..errors import KeyConflict

JOB_COLUMNS = (
    "id, queue, key, task, payload, state, priority, run_at, attempts, max_attempts, "
    "attempt_limit, lease_seconds, lease_until, lease_token, leased_by, created_at, updated_at, "
    "finished_at, last_error, last_error_class, last_traceback, correlation_id, group_name"
)

#: Orders a caller may ask ``History.find`` for.
ORDERS = {
    "id": "id",
    "-id": "id DESC",
    "updated": "updated_at DESC, id DESC",
    "run_at": "run_at, id",
}


def claimed_job(row: Sequence[Any], to_time: Callable[[Any], datetime | None]) -> ClaimedJob:
    """A row of a claim's RETURNING list (id, queue, key, task, payload, attempts, lease_token,
    lease_until, lease_seconds, run_at, priority, correlation_id, attempt_limit, group_name)."""
    payload = row[4]
    return ClaimedJob(
        id=row[0],
        queue=row[1],
        key=row[2],
        task=row[3],
        payload=json.loads(payload) if isinstance(payload, str) else payload,
        attempt=row[5],
        lease_token=str(row[6]),
        lease_until=to_time(row[7]),  # type: ignore[arg-type]
        lease_seconds=float(row[8]),
        run_at=to_time(row[9]),  # type: ignore[arg-type]
        priority=row[10],
        correlation_id=row[11],
        budget_left=row[12] - row[5],
        group=row[13],
    )


def insert_values(job: NewJob, run_at: float, now: float) -> dict[str, Any]:
    """The values of the ``job_insert`` statement on SQLite for one job (times as epoch seconds)."""
    return {
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


def pause_reason(failure: Failure) -> str:
    """What a group paused by a failed attempt shows as its reason."""
    return f"job {failure.lease.job_id}: {failure.error_class}: {failure.message}"[:500]


def claim_in_turns(
    plain: Callable[[int], list[Any]],
    grouped: Callable[[int], list[Any]],
    limit: int,
    grouped_first: bool,
) -> list[Any]:
    """One claim over queues with jobs both without and with a group: the side whose turn it
    is takes up to half the batch, the other side the rest, and the first side whatever the
    second left. The caller alternates ``grouped_first``, so with one job per claim each side
    gets every other claim: neither a flood of grouped jobs nor one of ungrouped jobs starves
    the other."""
    first, second = (grouped, plain) if grouped_first else (plain, grouped)
    share = (limit + 1) // 2
    head = first(share)
    tail = second(limit - len(head)) if len(head) < limit else []
    left = limit - len(head) - len(tail)
    more = first(left) if left > 0 and len(head) == share else []
    return head + tail + more


def job_row(row: Sequence[Any], to_time: Callable[[Any], datetime | None]) -> JobRow:
    payload = row[4]
    if isinstance(payload, str):
        payload = json.loads(payload)
    return JobRow(
        id=row[0],
        queue=row[1],
        key=row[2],
        task=row[3],
        payload=payload,
        state=JobState(row[5]),
        priority=row[6],
        run_at=to_time(row[7]),  # type: ignore[arg-type]
        attempts=row[8],
        max_attempts=row[9],
        attempt_limit=row[10],
        lease_seconds=float(row[11]),
        lease_until=to_time(row[12]),
        lease_token=None if row[13] is None else str(row[13]),
        leased_by=row[14],
        created_at=to_time(row[15]),  # type: ignore[arg-type]
        updated_at=to_time(row[16]),  # type: ignore[arg-type]
        finished_at=to_time(row[17]),
        last_error=row[18],
        last_error_class=row[19],
        last_traceback=row[20],
        correlation_id=row[21],
        group=row[22],
    )


def filter_sql(
    where: JobFilter,
    param: Callable[[str], str],
    to_db_time: Callable[[datetime], Any],
    like: str = "LIKE",
) -> tuple[str, dict[str, Any]]:
    """The WHERE clause (without the keyword) and parameters for a ``JobFilter``.

    ``param(name)`` renders a placeholder in the dialect's style.
    """
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
        clauses.append(f"last_error {like} {param('f_error')} ESCAPE '\\'")
        escaped = where.error_contains.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        params["f_error"] = f"%{escaped}%"
    if where.since is not None:
        clauses.append(f"updated_at >= {param('f_since')}")
        params["f_since"] = to_db_time(where.since)
    if where.until is not None:
        clauses.append(f"updated_at < {param('f_until')}")
        params["f_until"] = to_db_time(where.until)
    if where.ids is not None:
        names = []
        for i, job_id in enumerate(where.ids):
            names.append(param(f"f_id{i}"))
            params[f"f_id{i}"] = int(job_id)
        clauses.append(f"id IN ({', '.join(names)})" if names else "1 = 0")
    if where.after_id is not None:
        clauses.append(f"id > {param('f_after')}")
        params["f_after"] = int(where.after_id)
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
            job_id, task, same_payload = pruned[ident]
            same = task == job.task and same_payload(job)
            if not same:
                conflicts.append(job.key)
                conflict_queue = conflict_queue or job.queue
            results.append(InsertResult(job_id, False, conflict=not same, pruned=True))
            continue
        payload = json.loads(job.payload_json)
        if ident in first:
            other = first[ident]
            same = other.task == job.task and json.loads(other.payload_json) == payload
            job_id = created[ident]
        else:
            job_id, task, stored = existing[ident]
            if isinstance(stored, str):
                stored = json.loads(stored)
            same = task == job.task and stored == payload
        if not same:
            conflicts.append(job.key)
            conflict_queue = conflict_queue or job.queue
        results.append(InsertResult(job_id, False, conflict=not same))
    if conflicts and on_conflict == "raise":
        raise KeyConflict(conflict_queue, conflicts, [r.id for r in results if r.conflict])
    return results


def publish_compare(
    item: PublishItem, stored_payload: Any, fingerprint: str | None
) -> PublishStatus:
    """Is publishing ``item`` onto an existing job a replay or a conflict? By the fingerprint of
    the request that made the job, or — for a job not published over HTTP (enqueued from Python,
    or its request record is gone) — by its payload alone."""
    if fingerprint is not None:
        return "replayed" if fingerprint == item.fingerprint else "conflict"
    if isinstance(stored_payload, str):
        stored_payload = json.loads(stored_payload)
    return "replayed" if stored_payload == json.loads(item.job.payload_json) else "conflict"


def queue_depths_from_rows(rows: Iterable[Sequence[Any]]) -> list[QueueDepth]:
    """``(queue, state, n, m, oldest_due_run_at, clock)`` rows → one ``QueueDepth`` per queue."""
    fields: dict[str, dict[str, Any]] = {}
    for queue, state, n, m, first, clock in rows:
        entry = fields.setdefault(queue, {"queue": queue})
        if state == "pending":
            entry["pending"] = int(n)
            entry["due"] = int(m or 0)
            if first is not None:
                entry["oldest_due_pending_seconds"] = max(0.0, _seconds(clock) - _seconds(first))
        elif state == "leased":
            entry["leased"] = int(n)
            entry["expired_leases"] = int(m or 0)
        else:
            entry["dead"] = int(n)
    return [QueueDepth(**fields[q]) for q in sorted(fields)]


def _seconds(value: datetime | float) -> float:
    return value if isinstance(value, float | int) else value.timestamp()


#: The columns of ``subscription_select`` that are times.
_SUBSCRIPTION_TIMES = (11, 13, 14, 15, 16, 17, 18)


def subscription_row(row: Sequence[Any], to_time: Callable[[Any], Any]) -> Subscription:
    """A row of ``subscription_select`` (the dataclass's fields, in order) as a record."""
    values = list(row)
    for i in _SUBSCRIPTION_TIMES:
        values[i] = to_time(values[i])
    values[8] = SubscriptionState(values[8])
    return Subscription(*values)
