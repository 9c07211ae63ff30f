"""``jobledger schedules`` (list, ticks, pause, resume) and ``jobledger scheduler``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from .._signals import relayed_signals
from ..errors import ConfigError
from .base import load_app, open_ledger
from .params import (
    app_url_option,
    echo_json,
    json_option,
    log_options,
    migrate_option,
    poll_interval,
    recorded_actor,
    table,
    url_option,
)

if TYPE_CHECKING:
    from .._records import LeaderLease
    from ..scheduling.schedule import ScheduleStatus


def _when(value: datetime | None, now: datetime) -> str:
    if value is None:
        return "—"
    seconds = (value - now).total_seconds()
    if abs(seconds) < 60:
        rel = "now"
    elif abs(seconds) < 3600:
        rel = f"{abs(seconds) / 60:.0f} min"
    elif abs(seconds) < 86400:
        rel = f"{abs(seconds) / 3600:.1f} h"
    else:
        rel = f"{abs(seconds) / 86400:.1f} d"
    if rel != "now":
        rel = f"in {rel}" if seconds > 0 else f"{rel} ago"
    return f"{_stamp(value)} ({rel})"


def _stamp(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%MZ")


@click.group(invoke_without_command=True)
@url_option
@json_option
@click.pass_context
def schedules(ctx: click.Context, url: str, as_json: bool) -> None:
    """List the cron schedules in the ledger, with their next and last tick and their leader.

    Each schedule shows its cron expression and time zone, what a tick enqueues, its next tick
    (in the past when the scheduler is behind), its last tick with the jobs it created, and
    whether it is paused. The leader of each cohort is the one scheduler that ticks it. A
    schedule its cohort's leader did not declare (removed or renamed in the code) is marked.

    Subcommands: ticks (jobs per tick), pause, resume.
    """
    ctx.ensure_object(dict)
    ctx.obj["url"] = url
    if ctx.invoked_subcommand is not None:
        return
    from ..scheduling.schedule import leader_dict

    ledger = open_ledger(url)
    statuses = ledger.schedules.status()
    leaders = ledger.schedules.leaders()
    if as_json:
        echo_json(
            {
                "schedules": [s.to_dict() for s in statuses],
                "leaders": [leader_dict(lease) for lease in leaders],
            }
        )
        return
    _print_status(statuses, leaders)


def _print_status(statuses: list[ScheduleStatus], leaders: list[LeaderLease]) -> None:
    now = leaders[0].now if leaders else datetime.now(UTC)
    rows = []
    for status in statuses:
        row, last = status.row, status.last_tick
        state = "paused" if row.paused else "active"
        if status.leader is not None and status.leader.valid and not status.declared_by_leader:
            state += ", not declared by the leader"
        if last is not None and last.error:
            state += f", last tick failing: {last.error[:80]}"
        rows.append(
            [
                row.name,
                f"{row.cron}\n{row.time_zone}",
                row.target.removeprefix("task ") + (", per entity" if row.fan_out else ""),
                _when(status.next_tick, now),
                "—"
                if last is None
                else f"{_stamp(last.tick_time)} {last.state.value}\n{last.jobs_created} created",
                state,
            ]
        )
    table(
        ["name", "cron, zone", "enqueues", "next tick", "last tick, jobs", "state"],
        rows,
        title="schedules",
        empty="no schedules in this ledger (a scheduler records them when it leads)",
    )
    if not leaders:
        click.echo("leader: none yet (no scheduler has run)")
    for lease in leaders:
        cohort = lease.name.removeprefix("scheduler:")
        if lease.valid:
            click.echo(
                f"cohort {cohort}: led by {lease.holder} (term {lease.term}) since "
                f"{_when(lease.acquired_at, now)}, lease until {_when(lease.until, now)}"
            )
        else:
            click.echo(
                f"cohort {cohort}: NO LEADER — the lease of {lease.holder} (term {lease.term}) "
                f"expired {_when(lease.until, now)}"
            )


def _url(ctx: click.Context, url: str) -> str:
    """The subcommand's --url if given, else the group's (``schedules --url U pause X``)."""
    source = ctx.get_parameter_source("url")
    if source in (click.core.ParameterSource.DEFAULT, None) and ctx.obj and ctx.obj.get("url"):
        return str(ctx.obj["url"])
    return url


@schedules.command()
@click.argument("name", required=False)
@click.option(
    "-n", "--limit", type=click.IntRange(1, 10_000), default=20, show_default=True, help="Ticks."
)
@url_option
@json_option
@click.pass_context
def ticks(ctx: click.Context, name: str | None, limit: int, url: str, as_json: bool) -> None:
    """Show the recorded ticks of schedule NAME (or of all schedules), most recent first.

    Each tick says when it fired, which scheduler ran it (and in which lease term), how many
    times it was started (more than once when a scheduler died half-way), and how many jobs it
    created, found existing (keys already enqueued), or found with a different payload.
    """
    from ..scheduling.schedule import tick_dict

    rows = open_ledger(_url(ctx, url)).schedules.ticks(name, limit)
    if as_json:
        echo_json([tick_dict(t) for t in rows])
        return
    columns = ["tick", "state", "leader (term)", "runs", "created", "existed", "note"]
    table(
        columns if name else ["schedule", *columns],
        (
            [
                *([] if name else [t.schedule]),
                _stamp(t.tick_time),
                t.state.value,
                f"{t.leader} ({t.term})",
                str(t.runs),
                str(t.jobs_created),
                str(t.jobs_existing),
                t.error or (f"{t.conflicts} key(s) with another payload" if t.conflicts else ""),
            ]
            for t in rows
        ),
        title=f"ticks of {name}" if name else "ticks",
        right=("runs", "created", "existed"),
        empty="no ticks recorded",
    )


_note = click.option("--note", default=None, help="Why; shown with the schedule.")


@schedules.command()
@click.argument("name")
@recorded_actor("the schedule")
@_note
@url_option
@click.pass_context
def pause(ctx: click.Context, name: str, actor: str, note: str | None, url: str) -> None:
    """Pause schedule NAME: it makes no ticks until resumed. A tick already running finishes."""
    row = open_ledger(_url(ctx, url)).schedules.pause(name, actor=actor, note=note)
    click.echo(f"paused {row.name} (by {row.pause_changed_by})")


@schedules.command()
@click.argument("name")
@click.option(
    "--skip-missed",
    is_flag=True,
    help="Skip the ticks missed while paused and carry on from now (default: the schedule's "
    "catch-up policy decides).",
)
@recorded_actor("the schedule")
@_note
@url_option
@click.pass_context
def resume(
    ctx: click.Context, name: str, skip_missed: bool, actor: str, note: str | None, url: str
) -> None:
    """Resume paused schedule NAME. Ticks it missed meanwhile are caught up by its catch-up
    policy (skip, latest, all), or skipped with --skip-missed."""
    book = open_ledger(_url(ctx, url)).schedules
    before = book.row(name)
    row = book.resume(name, actor=actor, note=note, skip_missed=skip_missed)
    skipped = row.skipped_ticks - before.skipped_ticks
    extra = f"; skipped {skipped} missed tick(s)" if skip_missed else ""
    click.echo(f"resumed {row.name}{extra}")


@click.command()
@click.argument("app")
@app_url_option
@click.option(
    "--cohort",
    "cohorts",
    multiple=True,
    help="Run only these cohorts (repeatable). Default: every cohort APP declares.",
)
@click.option(
    "--lease-seconds",
    type=click.FloatRange(0.001),
    default=None,
    help="The leader lease: another scheduler takes over this long after the leader dies "
    "(default: the app's ledger.schedules.lease_seconds, 30).",
)
@poll_interval("Seconds between passes (default 1): a tick runs at most this late.")
@migrate_option
@log_options
def scheduler(
    app: str,
    url: str | None,
    cohorts: tuple[str, ...],
    lease_seconds: float | None,
    poll_interval: float | None,
    migrate: bool,
    log_level: str,
    log_format: str,
) -> None:
    """Run the schedules of APP (MODULE:LEDGER) without running jobs.

    Takes the leader lease of each cohort when it is free, renews it while alive, and records
    the due ticks of the cohorts it leads; stands by otherwise, ready to take over when the
    leader's lease expires. Workers do the same unless started with --no-scheduler; run this
    when the scheduling authority should live apart from the workers. SIGTERM or Ctrl-C stops
    after the current batch and releases the lease so another scheduler takes over at once.
    """
    from .logs import setup_logging

    setup_logging(log_level, log_format)
    ledger = load_app(app, url, migrate=migrate)
    if not len(ledger.schedules):
        raise ConfigError(f"{app} declares no schedules (use @ledger.schedule)")
    runner = ledger.scheduler(
        cohorts=list(cohorts) or None, lease_seconds=lease_seconds, poll_interval=poll_interval
    )

    with relayed_signals(lambda signum, count: runner.stop()):
        runner.run()
