"""The columns of a new job on PostgreSQL, listed once for every statement that inserts jobs.

The single enqueue binds them as scalars (``{new_values}``), the batch enqueue, the checked
path and publishing as one array literal per column (``{new_arrays}``); ``{new_columns}`` and
``{new_select}`` name them in the insert. Adding a column to what an enqueue writes is one line
in ``NEW_JOB_COLUMNS`` (and the field on ``NewJob``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from ..._records import NewJob

__all__ = ["NEW_JOB_COLUMNS", "NEW_JOB_SQL", "new_job_arrays", "new_job_values"]


def _text(value: str | None) -> str:
    """A string as an element of an array literal."""
    if value is None:
        return "NULL"
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _time(value: datetime | None) -> str:
    return "NULL" if value is None else '"' + value.isoformat() + '"'


class _Column(NamedTuple):
    """A column that an enqueue writes as the new job gives it."""

    name: str
    """In jobledger_jobs, and the name of its query parameter."""
    type: str
    attr: str
    """The ``NewJob`` field that holds the value."""
    literal: Callable[[Any], str]
    """The value as an element of an array literal."""
    select: str = ""
    """What the insert writes, when not the value as given."""


#: The columns of a new job, one line each. Every insert of jobs (the single and the batch
#: enqueue, the checked path, publishing) is built from this list: a new column is one more line.
#: ``attempt_limit``, ``created_at`` and ``updated_at`` are derived in the SQL.
NEW_JOB_COLUMNS = (
    _Column("queue", "text", "queue", _text),
    _Column("key", "text", "key", _text),
    _Column("task", "text", "task", _text),
    _Column("payload", "jsonb", "payload_json", _text),
    _Column("priority", "int", "priority", lambda v: str(int(v))),
    _Column("run_at", "timestamptz", "run_at", _time, select="COALESCE(run_at, {now})"),
    _Column("max_attempts", "int", "max_attempts", lambda v: str(int(v))),
    _Column("lease_seconds", "float8", "lease_seconds", lambda v: repr(float(v))),
    _Column("correlation_id", "text", "correlation_id", _text),
    _Column("group_name", "text", "group", _text),
    _Column("trace_context", "text", "trace_context", _text),
)

NEW_JOB_SQL = {
    "new_columns": ", ".join(c.name for c in NEW_JOB_COLUMNS),
    "new_arrays": ", ".join(f"%({c.name})s::{c.type}[]" for c in NEW_JOB_COLUMNS),
    "new_values": ", ".join(f"%({c.name})s::{c.type} AS {c.name}" for c in NEW_JOB_COLUMNS),
    "new_select": ", ".join(c.select or c.name for c in NEW_JOB_COLUMNS),
}


def new_job_arrays(jobs: Sequence[NewJob]) -> dict[str, str]:
    """The columns of a batch as array literals (``{new_arrays}``): building one string per
    column costs far less than binding each element of a list.

    A column that is NULL for the whole batch (the trace context without OpenTelemetry, the
    group of jobs without one, …) is sent as an empty array: ``unnest`` pads the shorter arrays
    with NULLs, so it costs the batch one ``{}`` instead of a NULL per job."""
    arrays = {}
    for c in NEW_JOB_COLUMNS:
        values = [getattr(j, c.attr) for j in jobs]
        arrays[c.name] = "{}" if values.count(None) == len(values) else _array(values, c.literal)
    return arrays


def _array(values: list[Any], literal: Callable[[Any], str]) -> str:
    """One column as an array literal, built in as few Python steps as possible: most columns
    of a batch hold one value (queue, task, priority, …), and text columns are escaped in one
    pass over the joined column rather than element by element."""
    first = values[0]
    if values.count(first) == len(values):
        return "{" + ",".join([literal(first)] * len(values)) + "}"
    if literal is _text and None not in values:
        # NUL separates the elements: PostgreSQL text cannot hold it, so no value has one
        # (checked: a value that did would shift every element after it).
        joined = "\x00".join(values)
        if joined.count("\x00") == len(values) - 1:
            escaped = joined.replace("\\", "\\\\").replace('"', '\\"')
            return '{"' + escaped.replace("\x00", '","') + '"}'
    return "{" + ",".join([literal(v) for v in values]) + "}"


def new_job_values(job: NewJob) -> dict[str, Any]:
    """The columns of one job as scalar parameters (``{new_values}``)."""
    return {c.name: getattr(job, c.attr) for c in NEW_JOB_COLUMNS}
