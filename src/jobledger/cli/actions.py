"""Operator actions: ``redrive``, ``resolve``, ``cancel``, ``enqueue``, ``prune``.

Each one records who acted and why in the job's history (``--actor``, ``--reason``/``--note``).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from .._ledger import DEFAULT_KEEP_KEYS
from .._records import JobFilter, JobState
from .base import cli, json_option, open_ledger, url_option
from .params import (
    DURATION,
    JSON_OBJECT,
    WHEN,
    actor_option,
    console,
    echo_json,
    format_duration,
    queue_option,
)
from .views import filter_options, job_dict

_SHOWN = 20


@cli.command()
@url_option
@click.argument("jobs", nargs=-1)
@filter_options
@click.option(
    "--cancelled",
    "include_cancelled",
    is_flag=True,
    help="Also redrive cancelled jobs (default: dead jobs only).",
)
@click.option("--all", "everything", is_flag=True, help="Redrive every dead job (no filter).")
@click.option(
    "--limit", type=click.IntRange(1), default=None, help="At most this many (a canary batch)."
)
@click.option("--dry-run", is_flag=True, help="Show what would move; move nothing.")
@actor_option
@click.option("--reason", required=True, help="Why; recorded in each job's history.")
@click.option(
    "--rate",
    type=click.FloatRange(0),
    default=20.0,
    show_default=True,
    help="Jobs per second, so a big dead-letter set does not stampede the downstream (0: no limit).",
)
@click.option(
    "--budget",
    type=click.IntRange(1, 1000),
    default=None,
    help="Attempts each job gets (default: its task's max_attempts).",
)
@json_option
def redrive(
    url: str,
    jobs: tuple[str, ...],
    queue: str | None,
    task: str | None,
    key_prefix: str | None,
    group: str | None,
    error_contains: str | None,
    since: datetime | None,
    until: datetime | None,
    include_cancelled: bool,
    everything: bool,
    limit: int | None,
    dry_run: bool,
    actor: str,
    reason: str,
    rate: float,
    budget: int | None,
    as_json: bool,
) -> None:
    """Put dead jobs back to pending with a fresh retry budget, keeping their history.

    Select them by JOBS (ids or keys) and/or the filters; --all selects every dead job. A
    redriven job keeps its key and recorded effects, so an effect that already happened is not
    repeated. Try --dry-run first, then a --limit canary, then the rest.

    \b
    jobledger redrive -q digests --error "HTTP 503" --since 6h --dry-run --reason "provider outage"
    jobledger redrive -q digests --error "HTTP 503" --since 6h --reason "provider outage" --rate 5
    """
    has_filter = any(
        v is not None for v in (queue, task, key_prefix, group, error_contains, since, until)
    )
    if not (jobs or has_filter or everything):
        raise click.UsageError(
            "name the jobs (ids or keys), give a filter (--queue, --task, --error, …), "
            "or pass --all to redrive every dead job"
        )
    ledger = open_ledger(url)
    ids = [ledger.find(ref, queue).id for ref in jobs] if jobs else None
    states = (JobState.DEAD, JobState.CANCELLED) if include_cancelled else (JobState.DEAD,)
    where = JobFilter(
        queue=queue,
        states=states,
        task=task,
        key_prefix=key_prefix,
        group=group,
        error_contains=error_contains,
        since=since,
        until=until,
        limit=limit,
    )
    matched = ledger.jobs(dataclasses.replace(where, ids=tuple(ids) if ids else None))
    by_id = {j.id: j for j in matched}
    if dry_run or not matched:
        result_ids, skipped = [j.id for j in matched], []
    else:
        with _progress(as_json or len(matched) <= _SHOWN, "redriving") as progress:
            task_id = progress.add_task("redrive", total=len(matched))
            result = ledger.redrive(
                actor=actor,
                reason=reason,
                ids=list(by_id),
                where=JobFilter(states=states),
                rate=rate or None,
                budget=budget,
                progress=lambda done, total: progress.update(task_id, completed=done),
            )
        result_ids, skipped = result.ids, result.skipped
    if as_json:
        echo_json(
            {
                "dry_run": dry_run,
                "moved" if not dry_run else "would_move": result_ids,
                "skipped": skipped,
                "jobs": [job_dict(by_id[i], traceback=False) for i in result_ids],
            }
        )
        return
    out = console()
    verb = "would move" if dry_run else "moved"
    out.print(
        f"{verb} {len(result_ids)} job(s) back to pending"
        + ("" if dry_run else f" (actor {actor}, reason: {reason})"),
        markup=False,
    )
    if skipped:
        out.print(f"skipped {len(skipped)} that were no longer dead: {skipped[:_SHOWN]}")
    if result_ids:
        table = Table()
        for name in ("id", "queue", "key", "task", "attempts", "last error"):
            table.add_column(name)
        for job_id in result_ids[:_SHOWN]:
            j = by_id[job_id]
            table.add_row(
                str(j.id), j.queue, j.key, j.task, str(j.attempts), (j.last_error or "")[:80]
            )
        out.print(table)
        if len(result_ids) > _SHOWN:
            out.print(f"… and {len(result_ids) - _SHOWN} more (--json lists them all)")


def _progress(quiet: bool, what: str) -> Progress:
    return Progress(
        TextColumn(what),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console(),
        disable=quiet,
        transient=True,
    )


@cli.command()
@url_option
@click.argument("job")
@click.option(
    "--done", "state", flag_value="done", help="The outside world shows it happened: mark done."
)
@click.option(
    "--pending", "state", flag_value="pending", help="Run it again, with a fresh retry budget."
)
@click.option("--note", required=True, help="What you checked and found; recorded.")
@actor_option
@queue_option
@json_option
def resolve(
    url: str, job: str, state: str | None, note: str, actor: str, queue: str | None, as_json: bool
) -> None:
    """Repair one dead or pending job — by KEY or ID — after checking the outside world.

    --done: the effect did happen (the provider shows the message sent), so the job must not
    run again. --pending: it did not, run it again now. Recorded with --actor and --note.
    """
    if state is None:
        raise click.UsageError("say what the job becomes: --done or --pending")
    ledger = open_ledger(url)
    row = ledger.resolve(job, actor=actor, note=note, state=state, queue=queue)
    if as_json:
        echo_json({"job": job_dict(row, traceback=False)})
        return
    click.echo(f"job {row.id} ({row.queue}/{row.key}) is now {row.state.value}; note recorded")


@cli.command()
@url_option
@click.argument("job")
@click.option("--reason", required=True, help="Why; recorded in the job's history.")
@actor_option
@queue_option
@json_option
def cancel(url: str, job: str, reason: str, actor: str, queue: str | None, as_json: bool) -> None:
    """Withdraw one pending job — by KEY or ID — so that it never runs.

    Only pending jobs can be cancelled. A mistaken cancel is undone with
    `jobledger redrive JOB --cancelled --reason …`.
    """
    ledger = open_ledger(url)
    row = ledger.cancel(job, actor=actor, reason=reason, queue=queue)
    if as_json:
        echo_json({"job": job_dict(row, traceback=False)})
        return
    click.echo(f"job {row.id} ({row.queue}/{row.key}) is cancelled")


@cli.command()
@url_option
@click.argument("task")
@click.option("--key", required=True, help="The job's business identity, e.g. 4187:2026-W33.")
@click.option(
    "--payload",
    type=JSON_OBJECT,
    default="{}",
    show_default=True,
    help="The job's arguments as a JSON object.",
)
@click.option(
    "--queue", "-q", default="default", show_default=True, help="The queue the task's workers read."
)
@click.option("--delay", type=DURATION, default=None, help="Run this long from now (e.g. 10m).")
@click.option("--run-at", type=WHEN, default=None, help="Run at this time (ISO 8601).")
@click.option(
    "--priority", type=click.IntRange(-(2**31) + 1, 2**31 - 1), default=0, show_default=True
)
@json_option
def enqueue(
    url: str,
    task: str,
    key: str,
    payload: dict[str, Any],
    queue: str,
    delay: timedelta | None,
    run_at: datetime | None,
    priority: int,
    as_json: bool,
) -> None:
    """Enqueue one job of TASK (by name; the task need not be importable here).

    As from code: a key that already exists creates nothing and names the existing job; the
    same key with another payload is refused. The job gets the default budget (10 attempts) and
    lease (60 s): workers renew leases while a handler runs.
    """
    if delay is not None and run_at is not None:
        raise click.UsageError("give --delay or --run-at, not both")
    ledger = open_ledger(url)
    [result] = ledger.enqueue_many(
        task,
        [
            {
                "payload": payload,
                "key": key,
                "delay": delay.total_seconds() if delay else None,
                "run_at": run_at,
                "priority": priority,
            }
        ],
        queue=queue,
    )
    if as_json:
        echo_json(dataclasses.asdict(result) | {"queue": queue, "key": key})
        return
    if result.created:
        click.echo(f"created job {result.id} ({queue}/{key})")
    elif result.pruned:
        click.echo(
            f"nothing created: key {key!r} belongs to job {result.id}, which finished and was "
            "pruned; the key stays taken until its horizon passes"
        )
    else:
        click.echo(f"nothing created: job {result.id} already has key {key!r} in queue {queue!r}")


@cli.command()
@url_option
@click.option(
    "--older-than",
    type=DURATION,
    required=True,
    help="Prune jobs that finished longer ago than this (e.g. 30d).",
)
@click.option(
    "--keep-keys",
    type=DURATION,
    default=f"{DEFAULT_KEEP_KEYS.days}d",
    show_default=True,
    help="How long after a pruned job finished its key keeps blocking duplicates (0: free at once).",
)
@click.option(
    "--include-dead",
    is_flag=True,
    help="Also prune dead jobs (by default they wait for an operator).",
)
@click.option("--queue", "-q", default=None, help="Only this queue.")
@click.option(
    "--batch",
    type=click.IntRange(1, 10_000),
    default=1000,
    show_default=True,
    help="Jobs per transaction.",
)
@click.option("--dry-run", is_flag=True, help="Count what would be pruned; delete nothing.")
@json_option
def prune(
    url: str,
    older_than: timedelta,
    keep_keys: timedelta,
    include_dead: bool,
    queue: str | None,
    batch: int,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Delete finished jobs with their attempts, events and effects, in batches.

    Done and cancelled jobs go; dead ones only with --include-dead. The key of each pruned job
    keeps blocking duplicates for --keep-keys after the job finished: an enqueue of it creates
    nothing. Tombstones past their horizon are deleted too, and (without --queue) schedule ticks
    older than --older-than. Each batch is a short transaction over the oldest jobs by id, so
    prune can run beside busy workers (e.g. daily from cron).
    """
    ledger = open_ledger(url)
    keep = keep_keys.total_seconds() or None
    with _progress(as_json or dry_run, "pruning") as progress:
        task_id = progress.add_task("prune", total=None)
        result = ledger.prune(
            older_than,
            include_dead=include_dead,
            keep_keys=keep,
            queue=queue,
            batch=batch,
            dry_run=dry_run,
            progress=lambda r: progress.update(task_id, completed=r.jobs),
        )
    if as_json:
        echo_json(dataclasses.asdict(result) | {"dry_run": dry_run})
        return
    age = format_duration(older_than.total_seconds())
    states = ", ".join(f"{n} {s}" for s, n in sorted(result.by_state.items())) or "none"
    if dry_run:
        click.echo(f"would prune {result.jobs} job(s) finished more than {age} ago ({states})")
        return
    click.echo(
        f"pruned {result.jobs} job(s) finished more than {age} ago ({states}) with "
        f"{result.attempts} attempts, {result.events} events and {result.effects} effects; "
        f"{result.tombstones} key(s) kept taken"
        + (f" for {format_duration(keep)} after finishing" if keep else "")
        + f"; {result.expired_tombstones} expired tombstone(s) removed"
        + (f"; {result.ticks} schedule tick(s) older than {age} removed" if result.ticks else "")
    )
