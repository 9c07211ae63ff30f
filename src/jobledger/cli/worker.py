"""``jobledger migrate`` and ``jobledger worker``."""

from __future__ import annotations

import click

from .._ledger import Ledger
from ..testing.history import ENV
from ..testing.history import install as install_history
from .base import cli, load_app, split_csv, url_option
from .logs import announce, log_format_option, setup_logging
from .supervise import supervise


@cli.command()
@url_option
def migrate(url: str) -> None:
    """Create or upgrade the jobledger schema in the database.

    Applies the numbered migrations the database lacks, in order, and prints their names. Safe
    to run again (and from several processes at once): applied migrations are skipped.
    """
    ledger = Ledger(url, auto_migrate=False)
    applied = ledger.migrate()
    version = ledger.backend.schema_version()
    ledger.close()
    if applied:
        click.echo(
            f"applied {', '.join(applied)}; {ledger.url.redacted} is at schema version {version}"
        )
    else:
        click.echo(f"{ledger.url.redacted} is up to date (schema version {version})")


@cli.command()
@click.argument("app")
@click.option(
    "--url", envvar="JOBLEDGER_URL", default=None, help="Override the ledger's database URL."
)
@click.option(
    "-q",
    "--queues",
    multiple=True,
    help="Queues to work on (comma-separated or repeated). Default: every queue of the app's tasks.",
)
@click.option(
    "-c",
    "--concurrency",
    type=click.IntRange(1, 1000),
    default=4,
    show_default=True,
    help="Jobs run at once.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1, 1000),
    default=10,
    show_default=True,
    help="Jobs claimed per statement.",
)
@click.option(
    "--prefetch",
    type=click.IntRange(0, 10000),
    default=0,
    show_default=True,
    help="Jobs that may wait claimed for a free thread (their leases are renewed). More "
    "jobs per claim for short jobs; 0 claims only what the threads can start at once.",
)
@click.option(
    "--processes",
    type=click.IntRange(1, 256),
    default=1,
    show_default=True,
    help="Worker processes on this host, each with CONCURRENCY threads (use the cores).",
)
@click.option("--burst", is_flag=True, help="Run what is due, then exit.")
@click.option(
    "--grace",
    type=click.FloatRange(0),
    default=30.0,
    show_default=True,
    help="Seconds running jobs get to finish after SIGTERM/SIGINT.",
)
@click.option(
    "--poll-interval",
    type=click.FloatRange(0.001),
    default=None,
    help="Longest sleep between claims when idle (default 1 s on PostgreSQL with LISTEN, 0.25 s on SQLite).",
)
@click.option(
    "--rescue-interval",
    type=click.FloatRange(0.01),
    default=None,
    help="Seconds between scans for expired leases.",
)
@click.option(
    "--name",
    default=None,
    help="This worker's name in attempt histories (default: host:pid:random).",
)
@click.option(
    "--history",
    "history_path",
    envvar=ENV,
    default=None,
    show_envvar=True,
    type=click.Path(dir_okay=True, file_okay=True),
    help="Append this worker's history (claims with tokens, heartbeats, outcomes, lease losses, "
    "rescues) as JSON lines to this file, or to a new file in this directory. "
    "Checked by `jobledger history check`.",
)
@click.option(
    "--no-scheduler",
    is_flag=True,
    help="Do not run the app's schedules in this worker (by default a worker takes part in "
    "scheduling: it ticks them while it holds the leader lease).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics (this worker's, and the ledger's gauges) on this port at "
    "/metrics while the worker runs; 0 picks a free port (the log says which).",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics port listens on (0.0.0.0 for every interface).",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
)
@log_format_option
def worker(
    app: str,
    url: str | None,
    queues: tuple[str, ...],
    concurrency: int,
    batch_size: int,
    prefetch: int,
    processes: int,
    burst: bool,
    grace: float,
    poll_interval: float | None,
    rescue_interval: float | None,
    name: str | None,
    history_path: str | None,
    no_scheduler: bool,
    metrics_port: int | None,
    metrics_host: str,
    log_level: str,
    log_format: str,
) -> None:
    """Run jobs of the tasks registered on APP (MODULE:LEDGER, e.g. myapp.jobs:ledger).

    Claims due jobs in batches under a lease, runs them with CONCURRENCY threads (async
    handlers on an event loop), renews leases while handlers run, writes outcomes fenced by
    lease token, and rescues expired leases of crashed workers. SIGTERM or Ctrl-C stops
    claiming and lets running jobs finish within --grace seconds; a second signal stops at once.

    --processes N starts N such worker processes under this one (each with CONCURRENCY threads),
    so that Python uses more than one core; signals are passed on to all of them.
    """
    setup_logging(log_level, log_format)
    if processes > 1:
        child = ["worker", app, "--concurrency", str(concurrency), "--batch-size", str(batch_size)]
        child += ["--prefetch", str(prefetch), "--grace", str(grace), "--log-level", log_level]
        child += ["--log-format", log_format]
        child += [f"--queues={q}" for q in queues]
        child += ["--burst"] if burst else []
        child += ["--poll-interval", str(poll_interval)] if poll_interval is not None else []
        child += ["--rescue-interval", str(rescue_interval)] if rescue_interval else []
        child += ["--no-scheduler"] if no_scheduler else []
        child += ["--history", history_path] if history_path else []
        if metrics_port is not None:
            raise click.UsageError(
                "--metrics-port cannot be shared by --processes children; run each worker "
                "process with its own port, or scrape the server's /metrics"
            )
        # The URL goes to the children in their environment, not on their command line.
        status = supervise(child, processes, burst, env={"JOBLEDGER_URL": url} if url else None)
        click.echo(f"{processes} worker processes done", err=True)
        raise SystemExit(status)
    ledger = load_app(app, url)
    if metrics_port is not None:
        from ..observability.metrics import install_metrics

        install_metrics(ledger, metrics_port, metrics_host)
    recorder = install_history(ledger, history_path) if history_path else None
    if no_scheduler:
        ledger.schedules.run_in_workers = False
    stats = ledger.run_worker(
        split_csv(queues) or None,
        concurrency=concurrency,
        batch_size=batch_size,
        prefetch=prefetch,
        burst=burst,
        grace_seconds=grace,
        poll_interval=poll_interval,
        rescue_interval=rescue_interval,
        name=name,
    )
    if recorder is not None:
        recorder.close()
    announce(
        f"worker done: claimed {stats.claimed}, completed {stats.completed}, retried {stats.retried}, "
        f"dead {stats.dead}, released {stats.released}, lease lost {stats.lease_lost}, rescued {stats.rescued}",
        log_format,
        "jobledger.worker",
        claimed=stats.claimed,
        completed=stats.completed,
        retried=stats.retried,
        dead=stats.dead,
        released=stats.released,
        lease_lost=stats.lease_lost,
        rescued=stats.rescued,
    )
