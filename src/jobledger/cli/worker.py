"""``jobledger migrate`` and ``jobledger worker``."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from .base import load_app
from .params import (
    app_url_option,
    concurrency_option,
    database_url,
    grace_option,
    listen_url_option,
    log_options,
    metrics_options,
    migrate_option,
    no_scheduler,
    poll_interval,
    queues_option,
    rescue_interval_option,
    setting,
    split_csv,
)

# jobledger.testing.history.ENV (a test checks it): written here so that the worker's options
# cost no import of the history recorder.
HISTORY_ENV = "JOBLEDGER_HISTORY"

#: Python's default collection thresholds (3.11 and 3.12: a later Python's, which differ, are
#: left alone), and the first generation's that a worker process uses instead (see
#: ``fewer_young_collections``).
DEFAULT_GC_THRESHOLD = (700, 10, 10)
WORKER_GC_YOUNG = 10_000


@click.command()
@database_url(
    "Created when missing: the SQLite file (its directory must exist), the PostgreSQL schema "
    "(the database must exist)."
)
def migrate(url: str) -> None:
    """Create or upgrade the jobledger schema in the database.

    Creates the SQLite file (its directory must exist) or the PostgreSQL schema named by
    ?schema= (the database must exist), applies the numbered migrations it lacks, in order, and
    prints their names. Safe to run again (and from several processes at once): applied
    migrations are skipped. The only command that creates anything, with --migrate of the
    commands that offer it.
    """
    from .._ledger import Ledger

    ledger = Ledger(url, auto_migrate=False)
    try:
        applied = ledger.migrate()
        version = ledger.schema_version()
    finally:
        ledger.close()
    if applied:
        click.echo(
            f"applied {', '.join(applied)}; {ledger.url.redacted} is at schema version {version}"
        )
    else:
        click.echo(f"{ledger.url.redacted} is up to date (schema version {version})")


@click.command()
@click.argument("app")
@app_url_option
@listen_url_option
@queues_option
@concurrency_option
@setting("--batch-size", click.IntRange(1, 1000), 10, help="Jobs claimed per statement.")
@setting(
    "--prefetch",
    click.IntRange(0, 10000),
    0,
    help="Jobs that may wait claimed for a free thread (their leases are renewed). More "
    "jobs per claim for short jobs; 0 claims only what the threads can start at once.",
)
@setting(
    "--processes",
    click.IntRange(1, 256),
    1,
    help="Worker processes on this host, each with CONCURRENCY threads (use the cores).",
)
@click.option("--burst", is_flag=True, help="Run what is due, then exit.")
@grace_option
@poll_interval(
    "Longest sleep between claims when idle (default 1 s on PostgreSQL with LISTEN, 0.25 s on "
    "SQLite)."
)
@rescue_interval_option
@click.option(
    "--name",
    default=None,
    help="This worker's name in attempt histories (default: host:pid:random).",
)
@click.option(
    "--history",
    "history_path",
    envvar=HISTORY_ENV,
    default=None,
    show_envvar=True,
    type=click.Path(dir_okay=True, file_okay=True),
    help="Append this worker's history (claims with tokens, heartbeats, outcomes, lease losses, "
    "rescues) as JSON lines to this file, or to a new file in this directory. "
    "Checked by `jobledger history check`.",
)
@no_scheduler("worker")
@metrics_options("this worker's")
@migrate_option
@log_options
def worker(
    app: str,
    url: str | None,
    listen_url: str | None,
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
    migrate: bool,
    log_level: str,
    log_format: str,
) -> None:
    """Run jobs of the tasks registered on APP (MODULE:LEDGER, e.g. myapp.jobs:ledger).

    Claims due jobs in batches under a lease, runs them with CONCURRENCY threads (async
    handlers on an event loop), renews leases while handlers run, writes outcomes fenced by
    lease token, and rescues expired leases of crashed workers. SIGTERM or Ctrl-C stops
    claiming and lets running jobs finish within --grace seconds; a second signal stops at once.

    The database must exist and be migrated (`jobledger migrate`), unless --migrate: a worker
    started on a mistyped URL exits 2 and creates nothing.

    --processes N starts N such worker processes under this one (each with CONCURRENCY threads),
    so that Python uses more than one core; signals are passed on to all of them.
    """
    from .logs import announce, setup_logging

    setup_logging(log_level, log_format)
    # How each worker runs, in this process or in each of --processes children.
    running: dict[str, Any] = {
        "concurrency": concurrency,
        "batch_size": batch_size,
        "prefetch": prefetch,
        "burst": burst,
        "grace_seconds": grace,
        "poll_interval": poll_interval,
        "rescue_interval": rescue_interval,
    }
    if processes > 1:
        if metrics_port is not None:
            raise click.UsageError(
                "--metrics-port cannot be shared by --processes children; run each worker "
                "process with its own port, or scrape the server's /metrics"
            )
        from .._runtime.processes import WorkerProcesses

        # Open the app's ledger here first: a missing database or schema, or an app that does
        # not import, is one error before any child starts (and --migrate migrates once).
        load_app(app, url, migrate=migrate, listen_url=listen_url).close()
        status = WorkerProcesses(
            app,
            processes,
            url=url,
            queues=queues,
            **running,
            scheduler=not no_scheduler,
            history=history_path,
            log_level=log_level,
            log_format=log_format,
            env={"JOBLEDGER_LISTEN_URL": listen_url} if listen_url else None,
        ).run()
        click.echo(f"{processes} worker processes done", err=True)
        raise SystemExit(status)
    ledger = load_app(app, url, migrate=migrate, listen_url=listen_url)
    if metrics_port is not None:
        from ..observability.metrics import install_metrics

        install_metrics(ledger, metrics_port, metrics_host)
    recorder = None
    if history_path:
        from ..testing.history import install as install_history

        recorder = install_history(ledger, history_path)
    if no_scheduler:
        ledger.schedules.run_in_workers = False
    with fewer_young_collections():
        stats = ledger.run_worker(split_csv(queues) or None, **running, name=name)
    if recorder is not None:
        recorder.close()
    counts = {
        "claimed": stats.claimed,
        "completed": stats.completed,
        "retried": stats.retried,
        "dead": stats.dead,
        "released": stats.released,
        "lease_lost": stats.lease_lost,
        "rescued": stats.rescued,
    }
    summary = ", ".join(f"{what.replace('_', ' ')} {n}" for what, n in counts.items())
    announce(f"worker done: {summary}", log_format, "jobledger.worker", **counts)


@contextmanager
def fewer_young_collections() -> Iterator[None]:
    """While the worker runs, collect the first generation every 10,000 allocations rather
    than 700.

    A worker holds a few objects for each job from its claim until its outcome is written (the
    claimed job, its lease, the finished item), hundreds of jobs at a time. With Python's
    default, a young collection runs every hundred-odd jobs and walks every job still in
    flight, and the next one walks them again in the older generation they were moved to
    (callgrind, `jobledger worker --burst` on 20,000 no-op SQLite jobs: 169.5k -> 163.9k
    instructions per job). Cycles are still collected, a few thousand jobs' worth of
    allocations later. An application that set its own thresholds keeps them."""
    before = gc.get_threshold()
    if before == DEFAULT_GC_THRESHOLD:
        gc.set_threshold(WORKER_GC_YOUNG, *DEFAULT_GC_THRESHOLD[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
