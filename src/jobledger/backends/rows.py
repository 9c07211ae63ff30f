"""Row mapping, written once: a row of a named query (the columns both dialects' SQL return, in
the same order) as a record, given the dialect's time converter (``to_time``: epoch seconds on
SQLite, ``timestamptz`` on PostgreSQL, to an aware UTC datetime) and, where a column holds
JSON, the dialect's decoder (text on SQLite, already decoded ``jsonb`` on PostgreSQL)."""

from __future__ import annotations

import json
import json.scanner
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, cast

from .._records import (
    ApiKey,
    Attempt,
    AttemptOutcome,
    CatchUp,
    ClaimedJob,
    Event,
    JobRow,
    JobState,
    LeaderLease,
    OutboxReason,
    OutboxRecord,
    QueueInfo,
    QueueSettings,
    Route,
    ScheduleRow,
    Subscription,
    SubscriptionState,
    TickRow,
    TickState,
    Tombstone,
)

__all__ = [
    "JOB_COLUMNS",
    "ToTime",
    "api_key",
    "attempt",
    "claimed_job",
    "effect",
    "event",
    "job_row",
    "leader_lease",
    "outbox_record",
    "queue_info",
    "route",
    "schedule",
    "subscription",
    "tick",
    "tombstone",
]

#: A dialect's time converter: a stored time (or NULL) as an aware UTC datetime (or None).
ToTime = Callable[[Any], datetime | None]
#: A dialect's JSON decoder: a stored JSON value (or NULL) as Python values (or None).
FromJson = Callable[[Any], Any]

#: The columns of ``job_row``, in order.
JOB_COLUMNS = (
    "id, queue, key, task, payload, state, priority, run_at, attempts, max_attempts, "
    "attempt_limit, lease_seconds, lease_until, lease_token, leased_by, created_at, updated_at, "
    "finished_at, last_error, last_error_class, last_traceback, correlation_id, group_name, "
    "CAST(result AS TEXT)"
)


def _at(to_time: ToTime, value: Any) -> datetime:
    """A time of a NOT NULL column."""
    return cast(datetime, to_time(value))


def claimed_job(row: Sequence[Any], to_time: ToTime) -> ClaimedJob:
    """A row of a claim's RETURNING list (id, queue, key, task, payload, attempts, lease_token,
    lease_until, lease_seconds, run_at, priority, correlation_id, attempt_limit, group_name,
    trace_context)."""
    payload = row[4]
    attempts = row[5]
    # Positional: keyword arguments cost more than the rest of the call, once per claimed job.
    return ClaimedJob(
        row[0],
        row[1],
        row[2],
        row[3],
        _decode(payload) if isinstance(payload, str) else payload,
        attempts,
        str(row[6]),
        to_time(row[7]),  # type: ignore[arg-type]
        float(row[8]),
        to_time(row[9]),  # type: ignore[arg-type]
        row[10],
        row[11],
        row[12] - attempts,
        row[13],
        row[14],
    )


_scan = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def _decode(text: str) -> Any:
    """A payload's JSON in one pass of the C scanner (the text ``encode_payload`` wrote has no
    surrounding whitespace); anything else as ``json.loads`` reads it, errors included."""
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


def job_row(row: Sequence[Any], to_time: ToTime) -> JobRow:
    """A row of ``JOB_COLUMNS`` (the result last, as JSON text)."""
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
        # Read as JSON text in both dialects (a jsonb string would come back decoded, and could
        # not be told from a text of JSON).
        result=None if row[23] is None else json.loads(row[23]),
    )


def attempt(row: Sequence[Any], to_time: ToTime) -> Attempt:
    """A row of ``attempt_list``: job_id, attempt, lease_token, worker, started_at, finished_at,
    outcome, error_class, error_message, traceback."""
    outcome = None if row[6] is None else AttemptOutcome(row[6])
    started, finished = _at(to_time, row[4]), to_time(row[5])
    return Attempt(row[0], row[1], str(row[2]), row[3], started, finished, outcome, *row[7:10])


def event(row: Sequence[Any], to_time: ToTime, from_json: FromJson) -> Event:
    """A row of ``event_list``: job_id, at, kind, actor, note, detail."""
    return Event(row[0], _at(to_time, row[1]), row[2], row[3], row[4], from_json(row[5]))


def tombstone(row: Sequence[Any], to_time: ToTime) -> Tombstone:
    """A row of ``tombstone_find``: queue, key, job_id, task, state, finished_at, pruned_at,
    expires_at."""
    times = (to_time(row[5]), _at(to_time, row[6]), _at(to_time, row[7]))
    return Tombstone(row[0], row[1], row[2], row[3], JobState(row[4]), *times)


def effect(row: Sequence[Any], to_time: ToTime, from_json: FromJson) -> dict[str, Any]:
    """A row of ``effect_get`` and ``effect_list``."""
    names = ("queue", "key", "effect", "job_id", "attempt")
    return dict(zip(names, row, strict=False)) | {
        "recorded_at": to_time(row[5]),
        "detail": from_json(row[6]),
    }


def leader_lease(row: Sequence[Any], to_time: ToTime) -> LeaderLease:
    """A row of the leader queries: name, holder, token, term, lease_until, acquired_at,
    renewed_at, and the clock the statement used."""
    return LeaderLease(row[0], row[1], str(row[2]), row[3], *(_at(to_time, t) for t in row[4:8]))


def schedule(row: Sequence[Any], to_time: ToTime) -> ScheduleRow:
    """A row of ``schedule_list``: name, cohort, cron, time_zone, catch_up, max_catch_up,
    grace_seconds, target, key_template, fan_out, cursor_at, skipped_ticks, paused,
    pause_changed_at, pause_changed_by, pause_note, declared_at, created_at."""
    name, cohort, cron, zone, catch_up, most, grace, target, template, fan_out = row[:10]
    return ScheduleRow(
        name, cohort, cron, zone, CatchUp(catch_up), most, float(grace), target, template,
        bool(fan_out), _at(to_time, row[10]), row[11], bool(row[12]), to_time(row[13]),
        row[14], row[15], _at(to_time, row[16]), _at(to_time, row[17]),
    )  # fmt: skip


def tick(row: Sequence[Any], to_time: ToTime) -> TickRow:
    """A row of the tick queries: schedule, tick_time, state, leader, term, runs, jobs_created,
    jobs_existing, conflicts, started_at, finished_at, error."""
    name, tick_time, state, leader, term, runs, created, existing, conflicts = row[:9]
    return TickRow(
        name, _at(to_time, tick_time), TickState(state), leader, term, runs, created,
        existing, conflicts, _at(to_time, row[9]), to_time(row[10]), row[11],
    )  # fmt: skip


def outbox_record(row: Sequence[Any], to_time: ToTime) -> OutboxRecord:
    """A row of ``outbox_due`` and ``outbox_list``: id, job_id, queue, key, reason,
    available_at, created_at, published_at, superseded_at."""
    times = (_at(to_time, row[5]), _at(to_time, row[6]), to_time(row[7]), to_time(row[8]))
    return OutboxRecord(row[0], row[1], row[2], row[3], OutboxReason(row[4]), *times)


def route(row: Sequence[Any], to_time: ToTime) -> Route:
    """A row of ``route_list``: queue, routed_at, routed_by, note."""
    return Route(row[0], _at(to_time, row[1]), row[2], row[3])


def queue_info(row: Sequence[Any], to_time: ToTime) -> QueueInfo:
    """A row of ``queue_select``: the settings' fields in order, created_at, updated_at, then
    timeout_seconds (added by migration 009)."""
    name, task, attempts, lease, base, cap, retention, require_key = row[:8]
    settings = QueueSettings(
        name, task, attempts, lease, base, cap, retention, bool(require_key), row[10]
    )
    return QueueInfo(settings, _at(to_time, row[8]), _at(to_time, row[9]))


def api_key(row: Sequence[Any], to_time: ToTime) -> ApiKey:
    """A row of ``apikey_select`` and ``session_get``: id, name, scopes, rate_per_second,
    burst, created_at, revoked_at."""
    return ApiKey(
        id=row[0],
        name=row[1],
        scopes=tuple(row[2].split()),
        rate_per_second=row[3],
        burst=row[4],
        created_at=to_time(row[5]),
        revoked_at=to_time(row[6]),
    )


#: The columns of ``subscription_select`` that are times.
_SUBSCRIPTION_TIMES = (11, 13, 14, 15, 16, 17, 18)


def subscription(row: Sequence[Any], to_time: ToTime) -> Subscription:
    """A row of ``subscription_select`` (the dataclass's fields, in order)."""
    values = list(row)
    for i in _SUBSCRIPTION_TIMES:
        values[i] = to_time(values[i])
    values[8] = SubscriptionState(values[8])
    return Subscription(*values)
