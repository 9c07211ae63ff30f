"""``jobledger relay``, ``jobledger consume`` and ``jobledger outbox`` (route, unroute, status,
list, republish, prune): delivery through a message broker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import click

from .._signals import relayed_signals
from .base import JobRef, load_app, open_ledger
from .params import (
    DURATION,
    app_url_option,
    concurrency,
    echo_json,
    grace_option,
    json_option,
    log_level_option,
    migrate_option,
    no_scheduler,
    recorded_actor,
    rescue_interval_option,
    setting,
    split_csv,
    table,
    url_option,
)


def _stamp(value: datetime | None) -> str:
    return "—" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


@click.command()
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
@setting("--batch-size", click.IntRange(1, 10_000), 100, help="Records per batch.")
@setting(
    "--poll-interval",
    click.FloatRange(0.001),
    0.2,
    help="Seconds between looks at an empty outbox.",
)
@setting(
    "--lease-seconds",
    click.FloatRange(0.1),
    15.0,
    help="The relay's leader lease: a standby takes over this long after the leader dies.",
)
@setting(
    "--keep-published",
    DURATION,
    "1d",
    help="Prune records published longer ago than this (e.g. 6h, 7d; 0 keeps them).",
)
@click.option("--once", is_flag=True, help="Publish what is due now, then exit.")
@setting(
    "--timeout",
    click.FloatRange(0.1),
    30.0,
    help="With --once: the longest it keeps trying (the broker down, another relay leading), "
    "clean-up included; then it exits 2 and says what is still due.",
)
@migrate_option
@log_level_option
def relay(
    to: str,
    url: str,
    queues: tuple[str, ...],
    name: str,
    batch_size: int,
    poll_interval: float,
    lease_seconds: float,
    keep_published: timedelta,
    once: bool,
    timeout: float,
    migrate: bool,
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
    from ..brokers.relay import Relay
    from ..brokers.urls import BrokerURL
    from .logs import setup_logging

    setup_logging(log_level)
    broker = BrokerURL.parse(to)  # a ConfigError becomes one line on stderr
    ledger = open_ledger(url, migrate=migrate)
    runner = Relay(
        ledger,
        broker,
        queues=split_csv(queues) or None,
        name=name,
        batch_size=batch_size,
        poll_interval=poll_interval,
        lease_seconds=lease_seconds,
        keep_published=keep_published or None,
    )
    with relayed_signals(lambda signum, count: runner.stop()):
        stats = runner.drain(timeout=timeout) if once else runner.run()
    click.echo(
        f"relay done: published {stats.published} ({stats.duplicates} already at the broker), "
        f"{stats.failures} failed batches, lease lost {stats.leadership_lost} times",
        err=True,
    )


@click.command()
@click.argument("app")
@click.option("--from", "source", required=True, help="Broker URL, the same as the relay's --to.")
@app_url_option
@click.option(
    "-q",
    "--queues",
    multiple=True,
    help="Queues to consume (comma-separated or repeated). Default: every queue of the app's "
    "tasks; each must be routed (jobledger outbox route).",
)
@concurrency(" (and messages held unacknowledged)")
@grace_option
@rescue_interval_option
@no_scheduler("consumer")
@migrate_option
@log_level_option
def consume(
    app: str,
    source: str,
    url: str | None,
    queues: tuple[str, ...],
    concurrency: int,
    grace: float,
    rescue_interval: float | None,
    no_scheduler: bool,
    migrate: bool,
    log_level: str,
) -> None:
    """Run the task handlers of APP (MODULE:LEDGER) for the messages of a broker.

    For each message the consumer claims the job by its key in the ledger (under a lease and a
    token, as a polling worker would), runs the handler, writes the outcome, and only then
    acknowledges the message. A message for a job that is already done, dead or cancelled is
    acknowledged without running anything, so redeliveries and repeats are harmless. SIGTERM or
    Ctrl-C stops taking messages and lets running jobs finish within --grace seconds.
    """
    from ..brokers.consumer import BrokerConsumer
    from ..brokers.urls import BrokerURL
    from .logs import setup_logging

    setup_logging(log_level)
    parsed = BrokerURL.parse(source)
    ledger = load_app(app, url, migrate=migrate)
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
    with relayed_signals(lambda signum, count: consumer.stop(graceful=count == 1)):
        consumer.run()
    click.echo(f"consumer done: {consumer.summary()}", err=True)


# -- jobledger outbox ----------------------------------------------------------------------------


@click.group()
def outbox() -> None:
    """Route queues to a broker, and see what the relay still owes it.

    A routed queue's jobs get an outbox record whenever they become pending (enqueue, retry,
    rescue, redrive), written in the same transaction; `jobledger relay` publishes the records
    and `jobledger consume` runs the jobs. See docs/transports.md.
    """


def _outbox(url: str):  # type: ignore[no-untyped-def]
    from ..brokers.outbox import Outbox

    return Outbox(open_ledger(url))


@outbox.command()
@click.argument("queue")
@recorded_actor("the route")
@click.option("--note", default=None, help="Why; kept with the route.")
@url_option
def route(queue: str, actor: str, note: str | None, url: str) -> None:
    """Deliver the jobs of QUEUE through a broker from now on.

    Jobs already pending in QUEUE get an outbox record at once. Polling workers can still claim
    the queue's jobs (the ledger fences them against consumers), which is how a queue moves from
    polling to a broker without a stop.
    """
    result = _outbox(url).route(queue, actor=actor, note=note)
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
    discarded = _outbox(url).unroute(queue)
    click.echo(f"unrouted {queue}; discarded {discarded} unpublished record(s)")


@outbox.command()
@url_option
@json_option
def status(url: str, as_json: bool) -> None:
    """Show the routed queues and, per queue, the records not yet published, how many are due,
    and how long the oldest due one has waited (the relay's lag)."""
    from ..brokers.outbox import outbox_json

    box = _outbox(url)
    routes, stats = box.routes(), box.status()
    if as_json:
        echo_json(
            {"routes": [outbox_json(r) for r in routes], "outbox": [outbox_json(s) for s in stats]}
        )
        return
    if not routes:
        click.echo("no queue is routed to a broker (jobledger outbox route QUEUE)")
    by_queue = {s.queue: s for s in stats}
    routed = {r.queue: r for r in routes}
    rows = []
    for queue in sorted(set(routed) | set(by_queue)):
        s = by_queue.get(queue)
        r = routed.get(queue)
        rows.append(
            [
                queue,
                f"by {r.routed_by}" if r else "no (leftover records)",
                str(s.unpublished if s else 0),
                str(s.due if s else 0),
                "—"
                if s is None or s.oldest_due_seconds is None
                else f"{s.oldest_due_seconds:.1f} s",
                _stamp(s.last_published_at if s else None),
            ]
        )
    if rows:
        table(
            ["queue", "routed", "unpublished", "due", "oldest due", "last published"],
            rows,
            title="outbox",
            right=("unpublished", "due"),
        )


@outbox.command("list")
@click.option("--queue", default=None, help="Only this queue's records.")
@click.option("--job", "job_ref", default=None, help="Only this job's records (key or id).")
@click.option(
    "--job-id", type=click.IntRange(1), default=None, help="Only the records of this job id."
)
@click.option("--job-key", default=None, help="Only the records of the job with this key.")
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
    queue: str | None,
    job_ref: str | None,
    job_id: int | None,
    job_key: str | None,
    unpublished: bool,
    limit: int,
    url: str,
    as_json: bool,
) -> None:
    """List outbox records, newest first: why each was written (enqueue, retry, redrive, …),
    when it is due, and when it was published."""
    from ..brokers.outbox import Outbox, outbox_json

    ledger = open_ledger(url)
    ref = JobRef(job_ref, job_id, job_key, queue)
    if ref.given:
        job_id = ref.find(ledger).id
    records = Outbox(ledger).records(
        job_id=job_id, queue=queue, unpublished=unpublished, limit=limit
    )
    if as_json:
        echo_json([outbox_json(r) for r in records])
        return
    table(
        ["id", "queue", "key", "job", "reason", "due", "published"],
        (
            [
                str(r.id),
                r.queue,
                r.key,
                str(r.job_id),
                r.reason.value,
                _stamp(r.available_at),
                _stamp(r.published_at),
            ]
            for r in records
        ),
        title="outbox records",
        empty="no outbox records",
    )


@outbox.command()
@click.argument("queue")
@setting(
    "--due-for", DURATION, "5m", help="Only jobs due for this long or longer (e.g. 30s, 10m, 1h)."
)
@url_option
def republish(queue: str, due_for: timedelta, url: str) -> None:
    """Publish again the pending jobs of QUEUE due for --due-for or longer that have no
    unpublished record: after the broker lost messages (a Redis restarted without an
    append-only file, a queue purged by hand). Consumers skip any delivered twice."""
    written = _outbox(url).republish(queue, due_for=due_for.total_seconds())
    click.echo(f"wrote {written} record(s) for {queue}; the relay publishes them")


@outbox.command()
@setting(
    "--older-than",
    DURATION,
    "1d",
    help="Delete records published longer ago than this (e.g. 6h, 7d).",
)
@url_option
def prune(older_than: timedelta, url: str) -> None:
    """Delete published outbox records older than --older-than (the relay does this itself,
    see its --keep-published)."""
    pruned = _outbox(url).prune(older_than)
    click.echo(f"pruned {pruned} published record(s)")
