"""The columns of a new job on PostgreSQL, listed once for every statement that inserts jobs.

The single enqueue binds them as scalars (``{new_values}``), a small batch, the checked path
and publishing as one array literal per column (``{new_arrays}``), a large batch as the rows of
a ``COPY`` in text format, sent in pieces (``new_job_copy_pieces``); ``{new_columns}`` and
``{new_select}`` name them in the insert. Adding a column to what an enqueue writes is one line
in ``NEW_JOB_COLUMNS`` (and the field on ``NewJob``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from operator import attrgetter
from typing import Any, NamedTuple

from ..._records import NewJob

__all__ = [
    "COPY_PIECE",
    "NEW_JOB_COLUMNS",
    "NEW_JOB_SQL",
    "new_job_arrays",
    "new_job_copy",
    "new_job_copy_pieces",
    "new_job_values",
    "text_array",
]


def _text(value: str | None) -> str:
    """A string as an element of an array literal."""
    if value is None:
        return "NULL"
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _time(value: datetime | None) -> str:
    return "NULL" if value is None else '"' + value.isoformat() + '"'


def _number(value: Any) -> str:
    return str(int(value))


def _float(value: Any) -> str:
    return repr(float(value))


#: What ``COPY … FROM STDIN`` in text format reads specially in a value: the escape character,
#: the column delimiter and the two line ends. Nothing else needs escaping.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
_COPY_SPECIAL = ("\\", "\t", "\n", "\r")


class _Column(NamedTuple):
    """A column that an enqueue writes as the new job gives it."""

    name: str
    """In jobledger_jobs, and the name of its query parameter."""
    type: str
    attr: str
    """The ``NewJob`` field that holds the value."""
    literal: Callable[[Any], str]
    """The value as an element of an array literal."""
    copy: Callable[[Any], str] | None = None
    """The value (not None) as a field of a ``COPY`` row, before escaping; None: a text
    column, written as it is and escaped."""
    select: str = ""
    """What the insert writes, when not the value as given (``COALESCE(run_at, {now})``: the
    ``COPY`` writes the batch's clock for a None)."""


#: The columns of a new job, one line each. Every insert of jobs (the single and the batch
#: enqueue, the checked path, publishing) is built from this list: a new column is one more line.
#: ``attempt_limit``, ``created_at`` and ``updated_at`` are derived in the SQL.
NEW_JOB_COLUMNS = (
    _Column("queue", "text", "queue", _text),
    _Column("key", "text", "key", _text),
    _Column("task", "text", "task", _text),
    _Column("payload", "jsonb", "payload_json", _text),
    _Column("priority", "int", "priority", _number, _number),
    _Column(
        "run_at", "timestamptz", "run_at", _time, datetime.isoformat, "COALESCE(run_at, {now})"
    ),
    _Column("max_attempts", "int", "max_attempts", _number, _number),
    _Column("lease_seconds", "float8", "lease_seconds", _float, _float),
    _Column("correlation_id", "text", "correlation_id", _text),
    _Column("group_name", "text", "group", _text),
    _Column("trace_context", "text", "trace_context", _text),
)

#: A new job's values in the order of ``NEW_JOB_COLUMNS``, as a tuple: one C call per job.
_VALUES = attrgetter(*(c.attr for c in NEW_JOB_COLUMNS))

NEW_JOB_SQL = {
    "new_columns": ", ".join(c.name for c in NEW_JOB_COLUMNS),
    "copy_columns": "id, "
    + ", ".join(c.name for c in NEW_JOB_COLUMNS)
    + ", attempt_limit, created_at, updated_at",
    "copy_columns_on_server_clock": "id, "
    + ", ".join(c.name for c in NEW_JOB_COLUMNS)
    + ", attempt_limit",
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
    for c, values in zip(NEW_JOB_COLUMNS, _columns(jobs), strict=True):
        arrays[c.name] = "{}" if values.count(None) == len(values) else _array(values, c.literal)
    return arrays


def _columns(jobs: Sequence[NewJob]) -> list[Sequence[Any]]:
    """The batch column by column, in the order of ``NEW_JOB_COLUMNS``: each job's values
    in one call (``attrgetter``), then one transpose (``zip``), rather than a Python step for
    every field of every job."""
    if not jobs:
        return [()] * len(NEW_JOB_COLUMNS)
    return list(zip(*map(_VALUES, jobs), strict=True))


def _array(values: Sequence[Any], literal: Callable[[Any], str]) -> str:
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


def text_array(values: Sequence[str | None]) -> str:
    """Strings as one array literal (as a text column of ``new_job_arrays``)."""
    return _array(values, _text)


def new_job_values(job: NewJob) -> dict[str, Any]:
    """The columns of one job as scalar parameters (``{new_values}``)."""
    return {c.name: getattr(job, c.attr) for c in NEW_JOB_COLUMNS}


#: Jobs a piece of a ``COPY`` holds (``new_job_copy_pieces``): the server reads one piece while
#: the next is built.
COPY_PIECE = 200


def new_job_copy_pieces(
    jobs: Sequence[NewJob], ids: Sequence[str], clock: datetime, with_times: bool = True
) -> Iterator[str]:
    """``new_job_copy`` of ``COPY_PIECE`` jobs at a time, each piece built when it is asked
    for: a ``COPY`` sends each as soon as it is made, so the server inserts the rows of one
    while the client builds the next, instead of waiting for the whole batch."""
    for first in range(0, len(jobs), COPY_PIECE):
        last = first + COPY_PIECE
        yield new_job_copy(jobs[first:last], ids[first:last], clock, with_times)


def new_job_copy(
    jobs: Sequence[NewJob], ids: Sequence[str], clock: datetime, with_times: bool = True
) -> str:
    """The rows of a ``COPY`` of ``jobs`` (its columns are ``{copy_columns}``: the id, taken
    from the jobs' sequence beforehand, the new job's columns, then what the insert statements
    derive in SQL — the attempt limit, the created and updated times) in text format: tab-separated
    fields, ``\\N`` for NULL, a backslash, tab, newline or carriage return in a value escaped.
    ``ids`` are the jobs' ids (as text), ``clock`` the insert's time: the due time of a job
    without one and every job's created and updated time, as the insert statements write them.
    Without ``with_times``, the rows of ``{copy_columns_on_server_clock}``: no created and
    updated times, which the table's defaults give (``clock`` is then the database's clock).

    Each column is rendered as one list (a value the batch shares once), then the rows are
    joined: a few Python steps per job rather than one per field."""
    n = len(jobs)
    when = clock.isoformat()
    fields = {
        c.name: _copy_column(values, c.copy, when if c.select else None)
        for c, values in zip(NEW_JOB_COLUMNS, _columns(jobs), strict=True)
    }
    columns = [list(ids), *fields.values(), fields["max_attempts"]]
    if with_times:
        times = [when] * n
        columns += [times, times]
    return "\n".join(map("\t".join, zip(*columns, strict=True))) + "\n"


def _copy_column(
    values: Sequence[Any], render: Callable[[Any], str] | None, default: str | None
) -> list[str]:
    """One column's fields: None as ``default`` (a column the insert would fill) or NULL."""
    n = len(values)
    first = values[0]
    if values.count(first) == n:
        return [_copy_field(first, render, default)] * n
    if render is None and None not in values:
        # One pass over the joined column (NUL cannot be in a PostgreSQL text, so it separates
        # the values; checked, as in ``_array``).
        joined = "\x00".join(values)
        if joined.count("\x00") == n - 1:
            if any(ch in joined for ch in _COPY_SPECIAL):
                joined = joined.translate(_COPY_ESCAPES)
            return joined.split("\x00")
    return [_copy_field(v, render, default) for v in values]


def _copy_field(value: Any, render: Callable[[Any], str] | None, default: str | None) -> str:
    if value is None:
        return "\\N" if default is None else default
    return value.translate(_COPY_ESCAPES) if render is None else render(value)
