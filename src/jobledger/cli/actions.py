"""Operator actions: ``redrive``, ``resolve``, ``cancel``, ``enqueue``, ``prune``.

Each one records who acted and why in the job's history (``--actor``, ``--reason``/``--note``).
"""

from __future__ import annotations

import dataclasses
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import click

from .._signals import relayed_signals
from .base import JobRef, job_option, jobs_option, open_ledger
from .params import (
    DURATION,
    JSON_OBJECT,
    WHEN,
    actor_option,
    echo_json,
    exclusive,
    format_duration,
    json_option,
    recorded_actor,
    setting,
    table,
    to_terminal,
    url_option,
)
from .views import filter_options, job_dict, job_filter

if TYPE_CHECKING:
    from rich.progress import Progress

    from .._records import JobRow

_SHOWN = 20

# jobledger._ledger.DEFAULT_KEEP_KEYS, in days (a test checks it): written here so that the
# option costs no import of the ledger.
_KEEP_KEYS_DAYS = 365


@click.command()
@url_option
@jobs_option
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
@recorded_actor("each job's history")
@click.option("--reason", required=True, help="Why; recorded in each job's history.")
@setting(
    "--rate",
    click.FloatRange(0),
    20.0,
    help="Jobs per second, so a big dead-letter set does not stampede the downstream (0: no "
    "limit). Ctrl-C stops it between two batches and says how many moved.",
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
    jobs: list[JobRef],
    selection: dict[str, Any],
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

    Select them by JOBS (keys or ids; --id N and --key K say which) and/or the filters; --all
    selects every dead job, and takes no other selection. A redriven job keeps its key and
    recorded effects, so an effect that already happened is not repeated. Try --dry-run first,
    then a --limit canary, then the rest.

    \b
    jobledger redrive -q digests --error "HTTP 503" --since 6h --dry-run --reason "provider outage"
    jobledger redrive -q digests --error "HTTP 503" --since 6h --reason "provider outage" --rate 5
    """
    filtered = any(v is not None for v in selection.values())
    if everything and (jobs or filtered):
        raise click.UsageError(
            "--all selects every dead job; give it without jobs or filters (--queue, …)"
        )
    if not (jobs or everything or filtered):
        raise click.UsageError(
            "name the jobs (keys or ids), give a filter (--queue, --task, --error, …), "
            "or pass --all to redrive every dead job"
        )
    from .._records import JobState, operator_text

    # Checked here too: with nothing selected (or a dry run) the ledger is never asked, and a
    # dry run should refuse what the real run will.
    operator_text(actor, "actor"), operator_text(reason, "reason")
    ledger = open_ledger(url)
    queue = selection["queue"]
    ids = [JobRef(j.ref, j.job_id, j.key, queue).find(ledger).id for j in jobs]
    states = (JobState.DEAD, JobState.CANCELLED) if include_cancelled else (JobState.DEAD,)
    where = job_filter(selection, states=states, limit=limit, ids=tuple(ids) if ids else None)
    matched = ledger.jobs(where)
    by_id = {j.id: j for j in matched}
    if dry_run or not matched:
        result_ids, skipped, left = [j.id for j in matched], [], []
    else:
        quiet = as_json or len(matched) <= _SHOWN
        with _progress(quiet, "redriving", len(matched)) as (bar, task_id), _ctrl_c() as stop:
            result = ledger.redrive(
                actor=actor,
                reason=reason,
                ids=list(by_id),
                where=job_filter({}, states=states),
                rate=rate or None,
                budget=budget,
                progress=lambda done, total: bar.update(task_id, completed=done),
                stop=stop,
            )
        result_ids, skipped, left = result.ids, result.skipped, result.left
    if as_json:
        echo_json(
            {
                "dry_run": dry_run,
                "moved" if not dry_run else "would_move": result_ids,
                "skipped": skipped,
                "jobs": [job_dict(by_id[i], traceback=False) for i in result_ids],
            }
            | ({"interrupted": True, "left": left} if left else {})
        )
        if left:
            raise SystemExit(130)
        return
    if left:
        click.echo(
            f"interrupted: moved {len(result_ids)} of {len(matched)} job(s) back to pending "
            f"before it stopped; {len(left)} not reached are still as they were",
            err=True,
        )
    verb = "would move" if dry_run else "moved"
    click.echo(
        f"{verb} {len(result_ids)} job(s) back to pending"
        + ("" if dry_run else f" (actor {actor}, reason: {reason})")
    )
    if skipped:
        click.echo(f"skipped {len(skipped)} that were no longer dead: {skipped[:_SHOWN]}")
    if result_ids:
        table(
            ["id", "queue", "key", "task", "attempts", "last error"],
            (
                [str(j.id), j.queue, j.key, j.task, str(j.attempts), (j.last_error or "")[:80]]
                for j in (by_id[i] for i in result_ids[:_SHOWN])
            ),
        )
        if len(result_ids) > _SHOWN:
            click.echo(f"… and {len(result_ids) - _SHOWN} more (--json lists them all)")
    if left:
        raise SystemExit(130)


@contextmanager
def _ctrl_c() -> Iterator[threading.Event]:
    """An event that Ctrl-C (SIGINT) sets while the block runs, so that the work inside stops
    at its next safe point; a second Ctrl-C interrupts at once."""
    stop = threading.Event()
    with relayed_signals(lambda signum, count: stop.set(), [signal.SIGINT], interrupt_after=1):
        yield stop


@contextmanager
def _progress(quiet: bool, what: str, total: int | None = None) -> Iterator[tuple[Any, Any]]:
    """A progress bar on a terminal (and not ``quiet``); ``(bar, task)`` to update."""
    if quiet or not to_terminal():
        yield _NoBar(), None
        return
    bar = _bar(what)
    with bar:
        yield bar, bar.add_task(what, total=total)


def _bar(what: str) -> Progress:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    from .params import console

    return Progress(
        TextColumn(what),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console(),
        transient=True,
    )


class _NoBar:
    def update(self, task: Any, **fields: Any) -> None:
        pass


def _changed(row: JobRow, as_json: bool, what: str) -> None:
    """What an operator's action made of one job: the row as JSON, or one line."""
    if as_json:
        echo_json({"job": job_dict(row, traceback=False)})
    else:
        click.echo(f"job {row.id} ({row.queue}/{row.key}) {what}")


@click.command()
@url_option
@job_option
@click.option("--done", is_flag=True, help="The outside world shows it happened: mark done.")
@click.option("--pending", is_flag=True, help="Run it again, with a fresh retry budget.")
@click.option("--note", required=True, help="What you checked and found; recorded.")
@actor_option
@json_option
def resolve(
    url: str,
    job: JobRef,
    done: bool,
    pending: bool,
    note: str,
    actor: str,
    as_json: bool,
) -> None:
    """Repair one dead or pending job — by KEY or ID, or --id N / --key K — after checking the
    outside world.

    --done: the effect did happen (the provider shows the message sent), so the job must not
    run again. --pending: it did not, run it again now. One of the two; recorded with --actor
    and --note.
    """
    exclusive(**{"--done": done, "--pending": pending})
    if not (done or pending):
        raise click.UsageError("say what the job becomes: --done or --pending")
    ledger = open_ledger(url)
    target = job.find(ledger)
    state = "done" if done else "pending"
    row = ledger.resolve(target.id, actor=actor, note=note, state=state)
    _changed(row, as_json, f"is now {row.state.value}; note recorded")


@click.command()
@url_option
@job_option
@click.option("--reason", required=True, help="Why; recorded in the job's history.")
@actor_option
@json_option
def cancel(
    url: str,
    job: JobRef,
    reason: str,
    actor: str,
    as_json: bool,
) -> None:
    """Withdraw one pending job — by KEY or ID, or --id N / --key K — so that it never runs.

    Only pending jobs can be cancelled. A mistaken cancel is undone with
    `jobledger redrive JOB --cancelled --reason …`.
    """
    ledger = open_ledger(url)
    target = job.find(ledger)
    _changed(ledger.cancel(target.id, actor=actor, reason=reason), as_json, "is cancelled")


@click.command()
@url_option
@click.argument("task")
@click.option("--key", required=True, help="The job's business identity, e.g. 4187:2026-W33.")
@setting("--payload", JSON_OBJECT, "{}", help="The job's arguments as a JSON object.")
@click.option(
    "--queue", "-q", default="default", show_default=True, help="The queue the task's workers read."
)
@click.option("--delay", type=DURATION, default=None, help="Run this long from now (e.g. 10m).")
@click.option("--run-at", type=WHEN, default=None, help="Run at this time (ISO 8601).")
@click.option(
    "--priority",
    type=click.IntRange(-(2**31) + 1, 2**31 - 1),
    default=0,
    show_default=True,
    help="Among the queue's due jobs, a higher priority is claimed first.",
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
    exclusive(**{"--delay": delay, "--run-at": run_at})
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


@click.command()
@url_option
@click.option(
    "--older-than",
    type=DURATION,
    required=True,
    help="Prune jobs that finished longer ago than this (e.g. 30d).",
)
@setting(
    "--keep-keys",
    DURATION,
    f"{_KEEP_KEYS_DAYS}d",
    help="How long after a pruned job finished its key keeps blocking duplicates (0: free at once).",
)
@click.option(
    "--include-dead",
    is_flag=True,
    help="Also prune dead jobs (by default they wait for an operator).",
)
@click.option("--queue", "-q", default=None, help="Only this queue.")
@setting("--batch", click.IntRange(1, 10_000), 1000, help="Jobs per transaction.")
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
    with _progress(as_json or dry_run, "pruning") as (bar, task_id):
        result = ledger.prune(
            older_than,
            include_dead=include_dead,
            keep_keys=keep,
            queue=queue,
            batch=batch,
            dry_run=dry_run,
            progress=lambda r: bar.update(task_id, completed=r.jobs),
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
