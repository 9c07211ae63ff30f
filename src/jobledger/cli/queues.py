"""``jobledger queues create|list``: declared queues for the HTTP API."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import click

from .._records.queues import MIN_LEASE_SECONDS
from .base import open_ledger
from .params import DURATION, echo_json, json_flag, json_option, listing, url_option

if TYPE_CHECKING:
    from .._records import QueueInfo

# jobledger._records.DEFAULT_RETENTION_SECONDS, in days (a test checks it).
_RETENTION_DAYS = 30


def queue_json(info: QueueInfo) -> dict[str, object]:
    return info.as_dict()


@click.group()
def queues() -> None:
    """Declared queues: what jobs published over HTTP get (attempts, lease, backoff, retention).

    A queue must be declared before anything is published to it over HTTP. Declaring it again
    replaces its settings; jobs already in it keep theirs.
    """


@queues.command("create")
@url_option
@click.argument("name")
@click.option("--task", default="", help="Task name stored in published jobs (default: NAME).")
@click.option(
    "--max-attempts",
    type=int,
    default=10,
    show_default=True,
    help="Deliveries per message (lease expiries included) before it is dead.",
)
@click.option(
    "--lease-seconds",
    type=click.FloatRange(min=MIN_LEASE_SECONDS),
    default=60.0,
    show_default=True,
    help="How long a received message stays leased unless extended (at least 1 s, as over "
    "HTTP: a lease must outlive a receive and its ack).",
)
@click.option(
    "--backoff-base",
    type=float,
    default=2.0,
    show_default=True,
    help="Seconds; a nack without a delay waits up to base * 2^(attempt-1), full jitter.",
)
@click.option(
    "--backoff-cap",
    type=float,
    default=3600.0,
    show_default=True,
    help="Seconds; the longest such wait.",
)
@click.option(
    "--retention",
    type=DURATION,
    default=f"{_RETENTION_DAYS}d",
    show_default=True,
    help="How long finished jobs are kept and Idempotency-Keys replayed (at least 24h).",
)
@click.option(
    "--require-key/--no-require-key",
    default=False,
    show_default=True,
    help="Refuse publishes without an Idempotency-Key.",
)
@click.option(
    "--timeout",
    type=DURATION,
    default=None,
    help="The longest an attempt may run in a Python worker (e.g. 30s, 5m) for tasks that set "
    "no timeout of their own and for jobs published over HTTP; past it the attempt is "
    "timed_out and retried. Default: no bound.",
)
@json_flag(help="Print the queue as JSON.")
def create(
    url: str, retention: timedelta, timeout: timedelta | None, as_json: bool, **fields: Any
) -> None:
    """Declare queue NAME (or replace its settings)."""
    from .._records import QueueSettings

    # The other options are named as the settings' fields: name, task, max_attempts,
    # lease_seconds, backoff_base, backoff_cap, require_key.
    settings = QueueSettings(
        retention_seconds=retention.total_seconds(),
        timeout_seconds=None if timeout is None else timeout.total_seconds(),
        **fields,
    )
    info, created = open_ledger(url).queue_settings.declare(settings)
    if as_json:
        echo_json({"created": created, **queue_json(info)})
        return
    click.echo(f"{'declared' if created else 'updated'} queue {info.name}")


@queues.command("list")
@url_option
@json_option
def list_queues(url: str, as_json: bool) -> None:
    """List declared queues and their settings."""
    listing(
        open_ledger(url).queue_settings.list(),
        as_json,
        queue_json,
        ["name", "task", "attempts", "lease s", "backoff s", "retention", "key required"],
        _row,
        empty="no declared queues (jobledger queues create NAME)",
    )


def _row(info: QueueInfo) -> list[str]:
    s = info.settings
    return [
        s.name,
        s.task,
        str(s.max_attempts),
        f"{s.lease_seconds:g}",
        f"{s.backoff_base:g}..{s.backoff_cap:g}",
        f"{s.retention_seconds / 86400:g}d",
        "yes" if s.require_key else "no",
    ]
