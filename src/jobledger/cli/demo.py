"""``jobledger demo``: the weekly digest story, end to end, on a throw-away database."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from .params import console, echo_json, json_option

if TYPE_CHECKING:
    from ..testing.demo.story import DemoReport, Snapshot


@click.command()
@click.option(
    "--url",
    default=None,
    help="Run on this database instead of a throw-away SQLite file: postgresql://… (the demo "
    "works in a schema of its own and drops it) or a sqlite:/// path that does not exist yet. "
    "JOBLEDGER_URL is not read, so the demo never lands on your configured database by accident.",
)
@click.option(
    "--customers",
    type=click.IntRange(20, 100_000),
    default=200,
    show_default=True,
    help="Customers; every tenth has left, the rest are active.",
)
@click.option(
    "--workers",
    type=click.IntRange(2, 32),
    default=3,
    show_default=True,
    help="Worker processes (one of them is killed mid-run).",
)
@click.option("--keep", is_flag=True, help="Keep the demo's database (and worker logs) afterwards.")
@json_option
def demo(url: str | None, customers: int, workers: int, keep: bool, as_json: bool) -> None:
    """The weekly digest story, end to end, with no setup.

    Schedules one digest job per active customer for this week (key customer:week), schedules
    again (nothing new), starts worker processes against a fake e-mail provider on 127.0.0.1
    that honours Idempotency-Key, rate-limits some customers (429 + Retry-After), accepts one
    message and then times out, and refuses one customer for good. Mid-run one worker is killed
    with SIGKILL and restarted. The report shows what happened — and that no customer got a
    message twice. Exits 1 if the story did not come out as it must.
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from ..testing.demo.story import run_demo

    out = console()
    bar = Progress(
        TextColumn("[bold]digests[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        console=out,
        disable=as_json,
        transient=False,
    )
    task_id = None

    def show(snap: Snapshot) -> None:
        nonlocal task_id
        if task_id is None:
            task_id = bar.add_task("digests", total=snap.total, detail="")
        detail = (
            f"attempts {snap.attempts}, lease expiries {snap.lease_expiries}, kills {snap.kills}"
        )
        bar.update(task_id, completed=snap.finished, detail=detail)

    if not as_json:
        out.print(
            f"jobledger demo: {customers} customers, {workers} worker processes, a fake e-mail "
            "provider on 127.0.0.1 …"
        )
    with bar:
        report = run_demo(url, customers=customers, workers=workers, keep=keep, progress=show)
    if as_json:
        echo_json(report.as_dict())
    else:
        _print_report(report)
    if report.problems:
        sys.exit(1)


def _print_report(r: DemoReport) -> None:
    from rich.table import Table

    out = console()
    table = Table(title=f"weekly digest {r.week} — report", title_justify="left", show_header=False)
    table.add_column("what")
    table.add_column("count", justify="right")
    table.add_column("note")
    retries = ", ".join(f"{n} × {cls}" for cls, n in r.retries.items()) or "none"
    rows = [
        ("customers", r.customers, f"{r.active_customers} active (every tenth one has left)"),
        (
            "jobs scheduled",
            r.scheduled,
            "weekly-digest (Mon 06:00 Europe/Berlin): one per active customer, key customer:week",
        ),
        (
            "scheduled again",
            r.scheduled_again,
            "a second scheduler over the same tick: nothing new",
        ),
        ("jobs", r.jobs, ""),
        ("  done", r.done, ""),
        ("  dead", r.dead, "; ".join(f"{d['key']}: {d['error']}" for d in r.dead_jobs)),
        ("attempts", r.attempts, f"retries: {retries}"),
        (
            "lease expiries",
            r.lease_expiries,
            f"worker {r.killed_worker} SIGKILLed holding {r.killed_holding} lease(s); "
            f"restarted {r.restarts}×",
        ),
        ("effects recorded", r.effects_recorded, "one 'email' per done job"),
        ("messages the provider accepted", r.provider_accepted, ""),
        (
            "repeats absorbed by Idempotency-Key",
            r.provider_repeats_absorbed,
            "retries after a timeout or a crash, dropped by the provider",
        ),
        (
            "duplicate messages sent",
            r.provider_duplicate_sends,
            "what a customer would notice — must be 0",
        ),
        ("429s answered", r.provider_rate_limited, "retried after Retry-After"),
        ("refusals (400)", r.provider_refused, "permanent: the job is dead, for an operator"),
    ]
    for what, count, note in rows:
        table.add_row(what, str(count), note)
    out.print(table)
    out.print(f"database: {r.database}; {r.workers} workers; {r.seconds} s", markup=False)
    if r.problems:
        out.print("[bold red]the story did not come out as it must:[/]")
        for problem in r.problems:
            out.print(f"  - {problem}", markup=False)
    else:
        out.print(
            "[bold green]every active customer got exactly one digest[/], except the one the "
            "provider refuses: its job is dead, waiting for an operator."
        )
        if r.dead_jobs and r.kept:
            out.print(
                f"inspect it: jobledger show {r.dead_jobs[0]['key']} --url '{r.database}'",
                markup=False,
            )
        elif r.dead_jobs:
            out.print(
                "run with --keep to inspect it afterwards (jobledger show KEY, resolve, redrive)."
            )
