"""``jobledger relay``, ``jobledger consume`` and ``jobledger outbox`` (route, unroute, status,
list, republish, prune): delivery through a message broker."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ..brokers.consumer import BrokerConsumer
from ..brokers.outbox import Outbox, record_dict, route_dict, stats_dict
from ..brokers.relay import Relay
from ..brokers.urls import BrokerURL
from .base import cli, json_option, load_app, open_ledger, split_csv, url_option
from .logs import setup_logging
from .schedules import _default_actor

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(value: str) -> float:
    match = _DURATION.match(value)
    if not match:
        raise click.BadParameter(f"{value!r} is not a duration such as 30s, 15m, 6h or 7d")
    return float(match[1]) * _UNITS[match[2]]


def _broker_url(value: str) -> BrokerURL:
    return BrokerURL.parse(value)  # a ConfigError becomes one line on stderr


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))


@contextmanager
def _signals_stop(stop: Callable[[int], None]) -> Iterator[None]:
    """SIGTERM and SIGINT call ``stop(times_received)`` while the block runs."""
    received = []

    def on_signal(signum: int, frame: object) -> None:
        received.append(signum)
        stop(len(received))

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


_log_level = click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
)


@cli.command()
@click.option(
    "--to",
    "to",
    required=True,
    help="Broker URL: amqp://user:pass@host:5672/vhost, nats://host:4222 or redis://host:6379/0 "
    "(options such as ?prefix= in docs/transports.md).",
)
@url_option
@click.option(
    "-q",
    "--queues",
    multiple=True,
    help="Publish only these queues' records (comma-separated or repeated). Default: all.",
)
@click.option(
    "--name",
    default="default",
    show_default=True,
    help="Relays with one name share a leader lease: one publishes, the others stand by.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1, 10_000),
    default=100,
    show_default=True,
    help="Records per batch.",
)
@click.option(
    "--poll-interval",
    type=click.FloatRange(0.001),
    default=0.2,
    show_default=True,
    help="Seconds between looks at an empty outbox.",
)
@click.option(
    "--lease-seconds",
    type=click.FloatRange(0.1),
    default=15.0,
    show_default=True,
    help="The relay's leader lease: a standby takes over this long after the leader dies.",
)
@click.option(
    "--keep-published",
    default="1d",
    show_default=True,
    help="Prune records published longer ago than this (e.g. 6h, 7d; 0 keeps them).",
)
@click.option("--once", is_flag=True, help="Publish what is due now, then exit.")
@click.option(
    "--timeout",
    type=click.FloatRange(0.1),
    default=30.0,
    show_default=True,
    help="With --once: the longest it keeps trying (the broker down, another relay leading), "
    "clean-up included; then it exits 2 and says what is still due.",
)
@_log_level
def relay(
    to: str,
    url: str,
    queues: tuple[str, ...],
    name: str,
    batch_size: int,
    poll_interval: float,
    lease_seconds: float,
    keep_published: str,
    once: bool,
    timeout: float,
    log_level: str,
) -> None:
    """Publish the ledger's outbox to a broker, in order, marking each record published only
    after the broker confirmed it (publisher confirms on RabbitMQ, JetStream acknowledgements,
    the XADD reply on Redis).

    Runs until SIGTERM or Ctrl-C. With --once (e.g. from cron) it publishes what is due
    now and exits 0, or after --timeout seconds exits 2 with one line saying why (the broker,
    or another relay holding the lease) and how many records are still due, per queue. A relay
    killed between the broker's confirmation and the mark publishes those records again when
    it restarts; consumers skip the repeats. Only one relay of a --name publishes at a time.
    """
    setup_logging(log_level)
    keep = _duration(keep_published)
    ledger = open_ledger(url)
    runner = Relay(
        ledger,
        _broker_url(to),
        queues=split_csv(queues) or None,
        name=name,
        batch_size=batch_size,
        poll_interval=poll_interval,
        lease_seconds=lease_seconds,
        keep_published=timedelta(seconds=keep) if keep > 0 else None,
    )
    with _signals_stop(lambda _: runner.stop()):
        stats = runner.drain(timeout=timeout) if once else runner.run()
    ledger.close()
    click.echo(
        f"relay done: published {stats.published} ({stats.duplicates} already at the broker), "
        f"{stats.failures} failed batches, lease lost {stats.leadership_lost} times",
        err=True,
    )


@cli.command()
@click.argument("app")
@click.option(
    "--from",
    "source",
    required=True,
    help="Broker URL, the same as the relay's --to.",
)
@click.option(
    "--url", envvar="JOBLEDGER_URL", default=None, help="Override the ledger's database URL."
)
@click.option(
    "-q",
    "--queues",
    multiple=True,
    help="Queues to consume (comma-separated or repeated). Default: every queue of the app's "
    "tasks; each must be routed (jobledger outbox route).",
)
@click.option(
    "-c",
    "--concurrency",
    type=click.IntRange(1, 1000),
    default=4,
    show_default=True,
    help="Jobs run at once (and messages held unacknowledged).",
)
@click.option(
    "--grace",
    type=click.FloatRange(0),
    default=30.0,
    show_default=True,
    help="Seconds running jobs get to finish after SIGTERM/SIGINT.",
)
@click.option(
    "--rescue-interval",
    type=click.FloatRange(0.01),
    default=None,
    help="Seconds between scans for expired leases.",
)
@click.option(
    "--no-scheduler",
    is_flag=True,
    help="Do not run the app's schedules in this consumer (by default it takes part in "
    "scheduling, like a worker).",
)
@_log_level
def consume(
    app: str,
    source: str,
    url: str | None,
    queues: tuple[str, ...],
    concurrency: int,
    grace: float,
    rescue_interval: float | None,
    no_scheduler: bool,
    log_level: str,
) -> None:
    """Run the task handlers of APP (MODULE:LEDGER) for the messages of a broker.

    For each message the consumer claims the job by its key in the ledger (under a lease and a
    token, as a polling worker would), runs the handler, writes the outcome, and only then
    acknowledges the message. A message for a job that is already done, dead or cancelled is
    acknowledged without running anything, so redeliveries and repeats are harmless. SIGTERM or
    Ctrl-C stops taking messages and lets running jobs finish within --grace seconds.
    """
    setup_logging(log_level)
    parsed = _broker_url(source)
    ledger = load_app(app, url)
    if no_scheduler:
        ledger.schedules.run_in_workers = False
    consumer = BrokerConsumer(
        ledger,
        parsed,
        split_csv(queues) or None,
        concurrency=concurrency,
        grace_seconds=grace,
        rescue_interval=rescue_interval,
    )
    # The first signal stops taking messages and lets running jobs finish; a second stops
    # waiting for them.
    with _signals_stop(lambda times: consumer.stop(graceful=times == 1)):
        consumer.run()
    ledger.close()
    click.echo(f"consumer done: {consumer.summary()}", err=True)


# -- jobledger outbox ----------------------------------------------------------------------------


@cli.group()
def outbox() -> None:
    """Route queues to a broker, and see what the relay still owes it.

    A routed queue's jobs get an outbox record whenever they become pending (enqueue, retry,
    rescue, redrive), written in the same transaction; `jobledger relay` publishes the records
    and `jobledger consume` runs the jobs. See docs/transports.md.
    """


@outbox.command()
@click.argument("queue")
@click.option("--actor", default=_default_actor, help="Who routes it (default: user@host).")
@click.option("--note", default=None, help="Why; kept with the route.")
@url_option
def route(queue: str, actor: str, note: str | None, url: str) -> None:
    """Deliver the jobs of QUEUE through a broker from now on.

    Jobs already pending in QUEUE get an outbox record at once. Polling workers can still claim
    the queue's jobs (the ledger fences them against consumers), which is how a queue moves from
    polling to a broker without a stop.
    """
    ledger = open_ledger(url, write=True)
    result = Outbox(ledger).route(queue, actor=actor, note=note)
    ledger.close()
    if result.created:
        click.echo(f"routed {queue} to the broker; {result.backfilled} pending job(s) queued")
    else:
        click.echo(f"{queue} was already routed (by {result.route.routed_by}); nothing changed")


@outbox.command()
@click.argument("queue")
@url_option
def unroute(queue: str, url: str) -> None:
    """Stop delivering QUEUE through a broker. Records not yet published are discarded; its
    pending jobs are left to polling workers."""
    ledger = open_ledger(url, write=True)
    discarded = Outbox(ledger).unroute(queue)
    ledger.close()
    click.echo(f"unrouted {queue}; discarded {discarded} unpublished record(s)")


@outbox.command()
@url_option
@json_option
def status(url: str, as_json: bool) -> None:
    """Show the routed queues and, per queue, the records not yet published, how many are due,
    and how long the oldest due one has waited (the relay's lag)."""
    ledger = open_ledger(url)
    box = Outbox(ledger)
    routes, stats = box.routes(), box.status()
    ledger.close()
    if as_json:
        _echo_json(
            {"routes": [route_dict(r) for r in routes], "outbox": [stats_dict(s) for s in stats]}
        )
        return
    console = Console()
    if not routes:
        console.print("no queue is routed to a broker (jobledger outbox route QUEUE)")
    by_queue = {s.queue: s for s in stats}
    table = Table(title="outbox", title_justify="left")
    for column in ("queue", "routed", "unpublished", "due", "oldest due", "last published"):
        table.add_column(column)
    for queue in sorted({r.queue for r in routes} | set(by_queue)):
        s = by_queue.get(queue)
        routed = next((r for r in routes if r.queue == queue), None)
        table.add_row(
            queue,
            f"by {routed.routed_by}" if routed else "no (leftover records)",
            str(s.unpublished if s else 0),
            str(s.due if s else 0),
            "—" if s is None or s.oldest_due_seconds is None else f"{s.oldest_due_seconds:.1f} s",
            "—" if s is None or s.last_published_at is None else _stamp(s.last_published_at),
        )
    if routes or stats:
        console.print(table)


def _stamp(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


@outbox.command("list")
@click.option("--queue", default=None, help="Only this queue's records.")
@click.option("--job", "job_ref", default=None, help="Only this job's records (id or key).")
@click.option("--unpublished", is_flag=True, help="Only records not yet published.")
@click.option(
    "-n",
    "--limit",
    type=click.IntRange(1, 100_000),
    default=50,
    show_default=True,
    help="Records, newest first.",
)
@url_option
@json_option
def list_(
    queue: str | None, job_ref: str | None, unpublished: bool, limit: int, url: str, as_json: bool
) -> None:
    """List outbox records, newest first: why each was written (enqueue, retry, redrive, …),
    when it is due, and when it was published."""
    ledger = open_ledger(url)
    job_id = ledger.find(job_ref, queue).id if job_ref is not None else None
    records = Outbox(ledger).records(
        job_id=job_id, queue=queue, unpublished=unpublished, limit=limit
    )
    ledger.close()
    if as_json:
        _echo_json([record_dict(r) for r in records])
        return
    table = Table(title="outbox records", title_justify="left")
    for column in ("id", "queue", "key", "job", "reason", "due", "published"):
        table.add_column(column, overflow="fold")
    for r in records:
        table.add_row(
            str(r.id),
            r.queue,
            r.key,
            str(r.job_id),
            r.reason.value,
            _stamp(r.available_at),
            "—" if r.published_at is None else _stamp(r.published_at),
        )
    Console().print(table if records else "no outbox records")


@outbox.command()
@click.argument("queue")
@click.option(
    "--due-for",
    default="5m",
    show_default=True,
    help="Only jobs due for longer than this (e.g. 30s, 10m, 1h).",
)
@url_option
def republish(queue: str, due_for: str, url: str) -> None:
    """Publish again the pending jobs of QUEUE due for longer than --due-for that have no
    unpublished record: after the broker lost messages (a Redis restarted without an
    append-only file, a queue purged by hand). Consumers skip any delivered twice."""
    ledger = open_ledger(url, write=True)
    written = Outbox(ledger).republish(queue, due_for=_duration(due_for))
    ledger.close()
    click.echo(f"wrote {written} record(s) for {queue}; the relay publishes them")


@outbox.command()
@click.option(
    "--older-than",
    default="1d",
    show_default=True,
    help="Delete records published longer ago than this (e.g. 6h, 7d).",
)
@url_option
def prune(older_than: str, url: str) -> None:
    """Delete published outbox records older than --older-than (the relay does this itself,
    see its --keep-published)."""
    ledger = open_ledger(url, write=True)
    pruned = Outbox(ledger).prune(timedelta(seconds=_duration(older_than)))
    ledger.close()
    click.echo(f"pruned {pruned} published record(s)")
