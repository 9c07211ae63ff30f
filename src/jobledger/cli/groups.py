"""``jobledger groups list|limits|pause|resume``: the groups (tenants) of a queue.

A job may carry a group (a tenant, a customer, a downstream host). Per queue, limits cap how many
of one group's jobs are leased at once and how fast one group's jobs start; a group can be paused
as a whole. See docs/groups.md for the concept, docs/operations.md for the runbook.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import click

from ..errors import ConfigError
from .base import open_ledger
from .params import (
    DURATION,
    Cell,
    default_actor,
    echo_json,
    exclusive,
    format_duration,
    format_time,
    iso_time,
    json_option,
    table,
    url_option,
)

if TYPE_CHECKING:
    from .._records import GroupLimits, GroupStatus

#: The longest pause the CLI (and the HTTP API) sets at once: a year. A group that must stay
#: off longer is paused again; ``resume`` lifts a pause at any time.
MAX_PAUSE = timedelta(days=365)
_TOO_LONG = f"a pause lasts at most {MAX_PAUSE.days} days; resume lifts it at any time"

#: ``--max-leased none`` lifts that one limit.
NONE = "none"


def describe_limits(limits: GroupLimits) -> str:
    """``at most 2 leased, 5/s (bursts of 10)`` — or ``no limits``."""
    if limits.unlimited:
        return "no limits"
    parts = []
    if limits.max_leased is not None:
        parts.append(f"at most {limits.max_leased} leased per group")
    if limits.rate is not None:
        default = "" if limits.burst is not None else ", the default"
        parts.append(
            f"{limits.rate:g} jobs/s per group (bursts of {limits.bucket_size:g}{default})"
        )
    return ", ".join(parts)


def _until(status: GroupStatus, now: datetime) -> Cell:
    if status.paused_until is None:
        return "-"
    left = (status.paused_until - now).total_seconds()
    return (f"{format_time(status.paused_until)} (in {format_duration(left)})", "bold yellow")


class _Limit(click.ParamType):  # type: ignore[type-arg]
    """A limit: a number, or ``none`` to lift it."""

    def __init__(self, kind: type[int] | type[float]):
        self.kind = kind
        self.name = "integer|none" if kind is int else "number|none"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None or isinstance(value, int | float):
            return value
        text = str(value).strip().lower()
        if text == NONE:
            return NONE
        try:
            return self.kind(text)
        except ValueError:
            what = "a whole number" if self.kind is int else "a number"
            self.fail(f"{value!r} is not {what} (or 'none' to lift the limit)", param, ctx)


class _Later(click.ParamType):  # type: ignore[type-arg]
    """A point in time to come: ISO 8601, UTC when it has no offset."""

    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, datetime):
            return value
        text = str(value).strip()
        when = iso_time(text)
        if when is None:
            self.fail(
                f"{text!r} is not a time; write an ISO 8601 time such as 2026-08-10T06:00:00Z "
                "(or use --for 30m)",
                param,
                ctx,
            )
        return when


@click.group()
def groups() -> None:
    """The groups (tenants) of a queue: their jobs, limits and pauses.

    A job carries a group when it is enqueued with group=... (or its task has a group rule).
    Claims go round the groups with due jobs, so one group's flood does not starve the others;
    per queue, `limits` caps each group's leased jobs and start rate; `pause` stops one group
    (a downstream answering 429) while the others go on. See docs/groups.md.

    \b
    jobledger groups list digests
    jobledger groups limits digests --max-leased 5 --rate 2
    jobledger groups pause digests acme --for 15m --reason "acme's API answers 429"
    jobledger groups resume digests acme
    """


@groups.command("list", short_help="Groups of a queue: pending, due, leased, paused until.")
@url_option
@click.argument("queue")
@json_option
def list_groups(url: str, queue: str, as_json: bool) -> None:
    """The groups of QUEUE that have pending or leased jobs, or a pause in force.

    \b
    pending      jobs waiting, due or not
    due          pending jobs whose run time has passed (claimable unless paused or limited)
    leased       jobs being run now (at most --max-leased of `limits`)
    paused until the group's jobs are not claimed before then, and why
    tokens       what the group's rate bucket holds now (- when the queue sets no rate)
    last served  when a claim last took one of the group's jobs

    Jobs without a group are not listed: see `jobledger status`.
    """
    ledger = open_ledger(url)
    now = datetime.now(UTC)
    limits = ledger.group_limits(queue)
    rows = ledger.groups(queue, now)
    if as_json:
        echo_json(
            {
                "queue": queue,
                "limits": limits.as_dict(queue),
                "groups": [g.as_dict() for g in rows],
            }
        )
        return
    title = f"groups of {queue} — {describe_limits(limits)}"
    if not rows:
        click.echo(f"{title}\nno group of queue {queue!r} has pending or leased jobs or a pause")
        return
    cap = limits.max_leased
    table(
        ["group", "pending", "due", "leased", "paused until", "reason", "tokens", "last served"],
        (
            [
                (g.name, "bold yellow" if g.paused_until else ""),
                str(g.pending),
                str(g.due),
                (
                    f"{g.leased}/{cap}" if cap is not None else str(g.leased),
                    "cyan" if cap is not None and g.leased >= cap else "",
                ),
                _until(g, now),
                g.paused_reason or "",
                "-" if g.tokens is None else f"{g.tokens:.1f}",
                "never"
                if g.served_at is None
                else f"{format_duration((now - g.served_at).total_seconds())} ago",
            ]
            for g in rows
        ),
        title=title,
        right=("pending", "due", "leased", "tokens"),
    )


@groups.command("limits", short_help="Show or set the per-group limits of a queue.")
@url_option
@click.argument("queue")
@click.option(
    "--max-leased",
    type=_Limit(int),
    default=None,
    help="At most this many of one group's jobs leased at once ('none' lifts it).",
)
@click.option(
    "--rate",
    type=_Limit(float),
    default=None,
    help="Jobs per second one group's jobs start at, on average ('none' lifts it).",
)
@click.option(
    "--burst",
    type=_Limit(float),
    default=None,
    help="Jobs a group may start at once after a quiet spell (default: one second's worth).",
)
@click.option("--clear", is_flag=True, help="Lift every limit of the queue's groups.")
@json_option
def limits(
    url: str,
    queue: str,
    max_leased: int | str | None,
    rate: float | str | None,
    burst: float | str | None,
    clear: bool,
    as_json: bool,
) -> None:
    """Show, or set, what each group of QUEUE may do.

    With no option, shows the limits. An option sets that limit and keeps the others ('none'
    lifts one); --clear lifts them all. Every claim enforces them (workers, the HTTP API's
    pull and push) from its next claim on, across processes and hosts.

    \b
    jobledger groups limits digests                      # show
    jobledger groups limits digests --max-leased 5       # at most 5 leased per tenant
    jobledger groups limits digests --rate 2 --burst 10  # 2 starts/s per tenant, bursts of 10
    jobledger groups limits digests --rate none          # lift the rate, keep --max-leased
    """
    changing = any(v is not None for v in (max_leased, rate, burst))
    if clear and changing:
        raise click.UsageError("--clear lifts every limit; give it alone")
    ledger = open_ledger(url)
    before = ledger.group_limits(queue)
    after = before
    if clear:
        after = ledger.set_group_limits(queue)
    elif changing:
        new_rate = before.rate if rate is None else _lifted(rate)
        new_burst = before.burst if burst is None else _lifted(burst)
        if new_rate is None and burst is None:
            new_burst = None  # a burst is the size of the rate's bucket: it goes with the rate
        new_max = before.max_leased if max_leased is None else _lifted(max_leased)
        after = ledger.set_group_limits(
            queue,
            max_leased=None if new_max is None else int(new_max),
            rate=new_rate,
            burst=new_burst,
        )
    if as_json:
        echo_json(after.as_dict(queue))
        return
    if clear or changing:
        click.echo(f"groups of {queue}: {describe_limits(after)} (was: {describe_limits(before)})")
    else:
        click.echo(f"groups of {queue}: {describe_limits(after)}")


def _lifted(value: int | float | str) -> float | None:
    return None if value == NONE else float(value)


@groups.command("pause", short_help="Pause one group of a queue for a while.")
@url_option
@click.argument("queue")
@click.argument("group")
@click.option(
    "--for",
    "duration",
    type=DURATION,
    default=None,
    help="How long: 30s, 15m, 2h, 1d (at most a year).",
)
@click.option(
    "--until", type=_Later(), default=None, help="Until this time (ISO 8601; UTC without offset)."
)
@click.option(
    "--reason",
    default=None,
    help="Why, shown beside the pause (default: 'paused by' JOBLEDGER_ACTOR, else login@host).",
)
@json_option
def pause(
    url: str,
    queue: str,
    group: str,
    duration: timedelta | None,
    until: datetime | None,
    reason: str | None,
    as_json: bool,
) -> None:
    """Claim none of GROUP's jobs in QUEUE for a while: the other groups go on.

    For a downstream that answers 429 or is down for one tenant. Jobs already leased finish;
    pending ones wait. A pause only ever extends: a shorter one than the group already has
    changes nothing. A handler can do the same with Retry(after=..., scope="group").

    \b
    jobledger groups pause digests acme --for 15m --reason "acme's API answers 429"
    jobledger groups pause digests acme --until 2026-08-10T06:00:00Z
    """
    exclusive(**{"--for": duration, "--until": until})
    if duration is None and until is None:
        raise click.UsageError("give --for DURATION or --until TIME, one of them")
    if duration is not None and duration > MAX_PAUSE:
        raise ConfigError(_TOO_LONG)
    now = datetime.now(UTC)
    target = until if until is not None else now + (duration or timedelta())
    if target <= now:
        raise ConfigError(
            f"--until {format_time(target)} is not in the future (now {format_time(now)} UTC)"
        )
    if target - now > MAX_PAUSE:
        raise ConfigError(_TOO_LONG)
    ledger = open_ledger(url)
    paused = ledger.pause_group(
        queue, group, until=target, reason=reason or f"paused by {default_actor()}", now=now
    )
    # The ledger keeps the longer of two pauses (SQLite stores times to the microsecond or so).
    longer = paused - target > timedelta(milliseconds=1)
    if as_json:
        echo_json({"queue": queue, "group": group, "paused_until": paused, "changed": not longer})
        return
    left = format_duration((paused - now).total_seconds())
    if longer:
        click.echo(
            f"group {group} of {queue} is already paused until {format_time(paused)} UTC "
            f"(in {left}), longer than asked: unchanged"
        )
        return
    click.echo(f"paused group {group} of {queue} until {format_time(paused)} UTC (in {left})")


@groups.command("resume", short_help="Lift one group's pause now.")
@url_option
@click.argument("queue")
@click.argument("group")
@json_option
def resume(url: str, queue: str, group: str, as_json: bool) -> None:
    """Lift GROUP's pause in QUEUE now: its due jobs are claimed again at the next claim."""
    ledger = open_ledger(url)
    resumed = ledger.resume_group(queue, group)
    if as_json:
        echo_json({"queue": queue, "group": group, "resumed": resumed})
        return
    if resumed:
        click.echo(f"resumed group {group} of {queue}")
    else:
        click.echo(f"group {group} of {queue} was not paused: nothing to do")
