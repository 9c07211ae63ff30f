"""Read commands: ``jobledger status``, ``jobledger jobs``, ``jobledger show``."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click

from .base import JobRef, job_option, open_ledger
from .params import (
    DURATION,
    WHEN,
    Cell,
    echo_json,
    format_duration,
    format_time,
    json_option,
    options,
    setting,
    table,
    url_option,
)

if TYPE_CHECKING:
    from .._ledger import JobHistory
    from .._records import JobFilter, JobRow, QueueStats

F = TypeVar("F", bound=Callable[..., Any])

# The job states, in the order of jobledger._records.JobState (a test checks it).
STATES = ["pending", "leased", "done", "dead", "cancelled"]

_STATE_STYLE = {"done": "green", "dead": "red", "leased": "cyan", "cancelled": "dim"}


def job_dict(job: JobRow, traceback: bool = True) -> dict[str, Any]:
    data = dataclasses.asdict(job)
    data["budget_left"] = job.budget_left
    if not traceback:
        data.pop("last_traceback")
    return data


def attempts_per_done(stats: QueueStats) -> float | None:
    done = stats.counts.get("done", 0)
    return stats.attempts.get("done", 0) / done if done else None


def error_text(error_class: str | None, message: str | None) -> str:
    """``Class: message``, the class once even when the message starts with it."""
    if not message:
        return error_class or "-"
    if not error_class or message.startswith(f"{error_class}:") or message == error_class:
        return message
    return f"{error_class}: {message}"


@click.command()
@url_option
@setting(
    "--late-after",
    DURATION,
    "5m",
    help="Objective: a pending job due longer ago than this counts as late.",
)
@click.option("--queue", "-q", "queues", multiple=True, help="Only these queues (repeatable).")
@json_option
def status(url: str, late_after: timedelta, queues: tuple[str, ...], as_json: bool) -> None:
    """Per queue: jobs by state, the age of the oldest due pending job, late jobs, lease
    expiries of the last hour, and attempts per completed job.

    \b
    oldest due   how long the oldest pending job whose run time has passed has waited
    late         pending jobs due longer ago than --late-after (the objective)
    expired 1h   leases that expired in the last hour (crashed or stalled workers)
    att/done     attempts made by the done jobs, per done job (1.00 = no retries)

    See docs/operations.md for what to alert on.
    """
    ledger = open_ledger(url)
    stats = ledger.stats(late_after_seconds=late_after.total_seconds())
    if queues:
        stats = [s for s in stats if s.queue in queues]
    if as_json:
        echo_json(
            {
                "url": ledger.url.redacted,
                "late_after_seconds": late_after.total_seconds(),
                "queues": [
                    {
                        "queue": s.queue,
                        "counts": {state: s.counts.get(state, 0) for state in STATES},
                        "dead": s.counts.get("dead", 0),
                        "oldest_due_pending_seconds": s.oldest_due_pending_seconds,
                        "late_pending": s.late_pending,
                        "lease_expiries_last_hour": s.lease_expiries_last_hour,
                        "attempts_per_done_job": attempts_per_done(s),
                    }
                    for s in stats
                ],
            }
        )
        return
    late = f"late (>{format_duration(late_after.total_seconds())})"
    columns = ["queue", *STATES, "oldest due", late, "expired 1h", "att/done"]
    rows = []
    for s in stats:
        ratio = attempts_per_done(s)
        rows.append(
            [
                s.queue,
                *[
                    _count(s.counts.get(state, 0), "red" if state == "dead" else "")
                    for state in STATES
                ],
                format_duration(s.oldest_due_pending_seconds),
                _count(s.late_pending, "yellow"),
                _count(s.lease_expiries_last_hour, "yellow"),
                "-" if ratio is None else f"{ratio:.2f}",
            ]
        )
    table(
        columns,
        rows,
        title=f"jobledger status — {ledger.url.redacted}",
        right=columns[1:],
        empty=f"no jobs in {ledger.url.redacted}",
    )


def _count(n: int, style: str) -> Cell:
    return (str(n), style) if n and style else str(n)


_filters = options(
    click.option("--queue", "-q", default=None, help="Only this queue."),
    click.option("--task", default=None, help="Only jobs of this task."),
    click.option("--key-prefix", default=None, help="Only keys starting with this."),
    click.option("--group", default=None, help="Only jobs of this group (a tenant)."),
    click.option(
        "--error",
        "error_contains",
        default=None,
        help="Only jobs whose last error contains this text, the case of any letter ignored.",
    ),
    click.option(
        "--since",
        type=WHEN,
        default=None,
        help="Only jobs last changed at or after this time (ISO 8601, or e.g. 2h for 2 hours ago).",
    ),
    click.option(
        "--until", type=WHEN, default=None, help="Only jobs last changed before this time."
    ),
)
_FILTERS = ("queue", "task", "key_prefix", "group", "error_contains", "since", "until")


def filter_options(fn: F) -> F:
    """The selection options shared by ``jobs`` and ``redrive``: the command gets
    ``selection``, a dict of the ``JobFilter`` fields given (None for the others)."""

    @functools.wraps(fn)
    def command(*args: Any, **kw: Any) -> Any:
        chosen = {name: kw.pop(name) for name in _FILTERS}
        return fn(*args, selection=chosen, **kw)

    return cast(F, _filters(command))


def job_filter(selection: dict[str, Any], **more: Any) -> JobFilter:
    """A ``JobFilter`` from the ``filter_options`` a command was given (and ``more``)."""
    from .._records import JobFilter

    return JobFilter(**selection, **more)


@click.command()
@url_option
@filter_options
@click.option(
    "--state",
    "-s",
    "states",
    multiple=True,
    type=click.Choice(STATES),
    help="Only jobs in this state (repeatable).",
)
@setting("--limit", click.IntRange(1, 100_000), 50, help="At most this many.")
@setting(
    "--order",
    click.Choice(["id", "-id", "updated", "run_at"]),
    "updated",
    help="id (oldest first), -id (newest first), updated (last changed first), run_at.",
)
@json_option
def jobs(
    url: str,
    selection: dict[str, Any],
    states: tuple[str, ...],
    limit: int,
    order: str,
    as_json: bool,
) -> None:
    """List jobs, filtered by queue, state, task, key prefix, group, error text and time range.

    Example: the dead digests of the last day whose error mentions a template:

        jobledger jobs -q digests -s dead --error template --since 1d
    """
    from .._records import JobState

    ledger = open_ledger(url)
    where = job_filter(
        selection,
        states=tuple(JobState(s) for s in states) or None,
        limit=limit + 1,
    )
    rows = ledger.jobs(where, order=order)
    more = len(rows) > limit
    rows = rows[:limit]
    if as_json:
        echo_json({"jobs": [job_dict(j, traceback=False) for j in rows], "more": more})
        return
    columns = ["id", "queue", "key", "task", "state", "attempts", "run at", "updated", "last error"]
    table(
        columns,
        (
            [
                str(j.id),
                j.queue,
                j.key,
                j.task,
                (j.state.value, _STATE_STYLE.get(j.state.value, "")),
                f"{j.attempts}/{j.attempt_limit}",
                format_time(j.run_at),
                format_time(j.updated_at),
                (j.last_error or "")[:80],
            ]
            for j in rows
        ),
        right=("id", "attempts"),
        empty="no jobs match",
    )
    if more:
        click.echo(f"showing the first {limit}; narrow the filters or raise --limit")


def timeline(history: JobHistory) -> list[dict[str, Any]]:
    """Everything that happened to a job, oldest first: enqueue, each attempt's start and end,
    operator events, recorded effects."""
    job = history.job
    items: list[dict[str, Any]] = [
        {"at": job.created_at, "what": "enqueued", "who": None, "detail": f"key {job.key}"}
    ]
    for a in history.attempts:
        items.append(
            {
                "at": a.started_at,
                "what": f"attempt {a.attempt} claimed",
                "who": a.worker,
                "detail": None,
            }
        )
        if a.finished_at is not None:
            error = error_text(a.error_class, a.error_message) if a.error_class else None
            items.append(
                {
                    "at": a.finished_at,
                    "what": f"attempt {a.attempt} {a.outcome.value if a.outcome else 'ended'}",
                    "who": a.worker,
                    "detail": error,
                }
            )
    for e in history.events:
        items.append({"at": e.at, "what": e.kind, "who": e.actor, "detail": e.note})
    for f in history.effects:
        items.append(
            {
                "at": f["recorded_at"],
                "what": f"effect {f['effect']} recorded",
                "who": f"attempt {f['attempt']}",
                "detail": None if f["detail"] is None else str(f["detail"]),
            }
        )
    if job.finished_at is not None and job.state.value != "pending":
        items.append(
            {"at": job.finished_at, "what": f"now {job.state.value}", "who": None, "detail": None}
        )
    items.sort(key=lambda item: item["at"])
    return items


@click.command()
@url_option
@job_option
@click.option("--traceback", is_flag=True, help="Also print the last traceback.")
@json_option
def show(url: str, job: JobRef, traceback: bool, as_json: bool) -> None:
    """Show one job — by KEY or ID, or --id N / --key K — and its history as a timeline: each
    attempt (worker, start, outcome, error), operator actions (who, why), recorded effects.
    A done job's result (what its handler returned) is shown cut at 200 characters; --json
    has it whole.

    A bare JOB of digits that is one job's id and another's key is refused: say which with
    --id or --key. A job that was pruned is reported with when it was pruned and until when
    its key stays taken.
    """
    ledger = open_ledger(url)
    row = job.find(ledger)
    history = ledger.history(row.id)
    items = timeline(history)
    if as_json:
        echo_json(
            {
                "job": job_dict(history.job),
                "attempts": [dataclasses.asdict(a) for a in history.attempts],
                "events": [dataclasses.asdict(e) for e in history.events],
                "effects": history.effects,
                "timeline": items,
            }
        )
        return
    j = history.job
    click.echo(f"job {j.id} {j.queue}/{j.key}  task {j.task}  {j.state.value}")
    lines = [
        ("attempts", f"{j.attempts} of {j.attempt_limit} allowed (budget left {j.budget_left})"),
        ("run at", format_time(j.run_at)),
        ("created", format_time(j.created_at)),
        ("finished", format_time(j.finished_at)),
        ("lease", f"until {format_time(j.lease_until)} by {j.leased_by}" if j.lease_until else "-"),
        ("priority", str(j.priority)),
        ("group", j.group or "-"),
        ("payload", _short(j.payload)),
        ("result", _short(j.result) if j.state.value == "done" else "-"),
        ("last error", error_text(j.last_error_class, j.last_error) if j.last_error else "-"),
        ("correlation", j.correlation_id or "-"),
    ]
    for name, value in lines:
        click.echo(f"  {name:<12} {value}")
    table(
        ["when", "what", "who", "detail"],
        (
            [format_time(i["at"]), i["what"], i["who"] or "", (i["detail"] or "")[:120]]
            for i in items
        ),
        title="timeline (UTC)",
    )
    if traceback and j.last_traceback:
        click.echo(j.last_traceback)


def _short(value: Any, limit: int = 200) -> str:
    """JSON on one line, cut at ``limit`` characters (``--json`` has all of it)."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "…"
