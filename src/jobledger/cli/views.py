"""Read commands: ``jobledger status``, ``jobledger jobs``, ``jobledger show``."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from .._ledger import JobHistory
from .._records import JobFilter, JobRow, JobState, QueueStats
from .base import cli, json_option, open_ledger, url_option
from .params import (
    DURATION,
    WHEN,
    console,
    echo_json,
    format_duration,
    format_time,
    queue_option,
)

STATES = [s.value for s in JobState]


def job_dict(job: JobRow, traceback: bool = True) -> dict[str, Any]:
    data = dataclasses.asdict(job)
    data["budget_left"] = job.budget_left
    if not traceback:
        data.pop("last_traceback")
    return data


def attempts_per_done(stats: QueueStats) -> float | None:
    done = stats.counts.get(JobState.DONE.value, 0)
    return stats.attempts.get(JobState.DONE.value, 0) / done if done else None


@cli.command()
@url_option
@click.option(
    "--late-after",
    type=DURATION,
    default="5m",
    show_default=True,
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
                        "dead": s.counts.get(JobState.DEAD.value, 0),
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
    out = console()
    if not stats:
        out.print(f"no jobs in {ledger.url.redacted}")
        return
    table = Table(title=f"jobledger status — {ledger.url.redacted}", title_justify="left")
    table.add_column("queue")
    for state in STATES:
        table.add_column(state, justify="right")
    table.add_column("oldest due", justify="right")
    table.add_column(f"late (>{format_duration(late_after.total_seconds())})", justify="right")
    table.add_column("expired 1h", justify="right")
    table.add_column("att/done", justify="right")
    for s in stats:
        ratio = attempts_per_done(s)
        dead = s.counts.get(JobState.DEAD.value, 0)
        table.add_row(
            s.queue,
            *[
                Text(str(s.counts.get(state, 0)), style="red" if state == "dead" and dead else "")
                for state in STATES
            ],
            format_duration(s.oldest_due_pending_seconds),
            Text(str(s.late_pending), style="yellow" if s.late_pending else ""),
            Text(
                str(s.lease_expiries_last_hour),
                style="yellow" if s.lease_expiries_last_hour else "",
            ),
            "-" if ratio is None else f"{ratio:.2f}",
        )
    out.print(table)


def filter_options(fn: Any) -> Any:
    """The selection options shared by ``jobs`` and ``redrive``."""
    options = [
        click.option("--queue", "-q", default=None, help="Only this queue."),
        click.option("--task", default=None, help="Only jobs of this task."),
        click.option("--key-prefix", default=None, help="Only keys starting with this."),
        click.option("--group", default=None, help="Only jobs of this group (a tenant)."),
        click.option(
            "--error", "error_contains", default=None, help="Only jobs whose last error has this."
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
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@cli.command()
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
@click.option(
    "--limit",
    type=click.IntRange(1, 100_000),
    default=50,
    show_default=True,
    help="At most this many.",
)
@click.option(
    "--order",
    type=click.Choice(["id", "-id", "updated", "run_at"]),
    default="updated",
    show_default=True,
    help="id (oldest first), -id (newest first), updated (last changed first), run_at.",
)
@json_option
def jobs(
    url: str,
    queue: str | None,
    task: str | None,
    key_prefix: str | None,
    group: str | None,
    error_contains: str | None,
    since: datetime | None,
    until: datetime | None,
    states: tuple[str, ...],
    limit: int,
    order: str,
    as_json: bool,
) -> None:
    """List jobs, filtered by queue, state, task, key prefix, group, error text and time range.

    Example: the dead digests of the last day whose error mentions a template:

        jobledger jobs -q digests -s dead --error template --since 1d
    """
    ledger = open_ledger(url)
    where = JobFilter(
        queue=queue,
        states=tuple(JobState(s) for s in states) or None,
        task=task,
        key_prefix=key_prefix,
        group=group,
        error_contains=error_contains,
        since=since,
        until=until,
        limit=limit + 1,
    )
    rows = ledger.jobs(where, order=order)
    more = len(rows) > limit
    rows = rows[:limit]
    if as_json:
        echo_json({"jobs": [job_dict(j, traceback=False) for j in rows], "more": more})
        return
    out = console()
    if not rows:
        out.print("no jobs match")
        return
    table = Table()
    for name in (
        "id",
        "queue",
        "key",
        "task",
        "state",
        "attempts",
        "run at",
        "updated",
        "last error",
    ):
        table.add_column(name, justify="right" if name in ("id", "attempts") else "left")
    for j in rows:
        table.add_row(
            str(j.id),
            j.queue,
            j.key,
            j.task,
            Text(j.state.value, style=_STATE_STYLE.get(j.state, "")),
            f"{j.attempts}/{j.attempt_limit}",
            format_time(j.run_at),
            format_time(j.updated_at),
            (j.last_error or "")[:80],
        )
    out.print(table)
    if more:
        out.print(f"showing the first {limit}; narrow the filters or raise --limit")


_STATE_STYLE = {
    JobState.DONE: "green",
    JobState.DEAD: "red",
    JobState.LEASED: "cyan",
    JobState.CANCELLED: "dim",
}


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
            error = f"{a.error_class}: {a.error_message}" if a.error_class else None
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
    if job.finished_at is not None and job.state is not JobState.PENDING:
        items.append(
            {"at": job.finished_at, "what": f"now {job.state.value}", "who": None, "detail": None}
        )
    items.sort(key=lambda item: item["at"])
    return items


@cli.command()
@url_option
@click.argument("job")
@queue_option
@click.option("--traceback", is_flag=True, help="Also print the last traceback.")
@json_option
def show(url: str, job: str, queue: str | None, traceback: bool, as_json: bool) -> None:
    """Show one job — by KEY or by ID — and its history as a timeline: each attempt (worker,
    start, outcome, error), operator actions (who, why) and recorded effects.

    A job that was pruned is reported with when it was pruned and until when its key stays taken.
    """
    ledger = open_ledger(url)
    row = ledger.find(job, queue)
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
    out = console()
    out.print(
        Text.assemble(
            (f"job {j.id} ", "bold"),
            f"{j.queue}/{j.key}  task {j.task}  ",
            (j.state.value, _STATE_STYLE.get(j.state, "bold")),
        )
    )
    lines = [
        ("attempts", f"{j.attempts} of {j.attempt_limit} allowed (budget left {j.budget_left})"),
        ("run at", format_time(j.run_at)),
        ("created", format_time(j.created_at)),
        ("finished", format_time(j.finished_at)),
        ("lease", f"until {format_time(j.lease_until)} by {j.leased_by}" if j.lease_until else "-"),
        ("priority", str(j.priority)),
        ("group", j.group or "-"),
        ("payload", _short(j.payload)),
        ("last error", f"{j.last_error_class}: {j.last_error}" if j.last_error else "-"),
        ("correlation", j.correlation_id or "-"),
    ]
    for name, value in lines:
        out.print(f"  {name:<12} {value}", markup=False)
    table = Table(title="timeline (UTC)", title_justify="left")
    for name in ("when", "what", "who", "detail"):
        table.add_column(name)
    for item in items:
        table.add_row(
            format_time(item["at"]), item["what"], item["who"] or "", (item["detail"] or "")[:120]
        )
    out.print(table)
    if traceback and j.last_traceback:
        out.print(j.last_traceback, markup=False)


def _short(payload: dict[str, Any], limit: int = 200) -> str:
    import json

    text = json.dumps(payload, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "…"
