"""``jobledger subscriptions create|list|pause|resume|rotate|delete`` and ``jobledger push``."""

from __future__ import annotations

import json
import signal
from datetime import timedelta
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from .._records import (
    DEFAULT_CONCURRENCY,
    DEFAULT_OVERLAP,
    DEFAULT_TIMEOUT_SECONDS,
    Subscription,
    SubscriptionState,
)
from .._services.subscriptions import create_subscription, rotate_secret
from .base import cli, json_option, open_ledger, url_option
from .logs import log_format_option, setup_logging
from .params import Duration, format_time
from .schedules import _default_actor


@cli.group()
def subscriptions() -> None:
    """Push subscriptions: every job of a queue POSTed to a URL, signed per Standard Webhooks.

    The delivery loop ('jobledger push', and 'jobledger serve' unless --no-push) claims the
    queue's jobs under leases like any worker and POSTs each one; the endpoint verifies the
    signature with the subscription's secret. A queue has one subscription. See docs/push.md.
    """


def _show_secret(sub: Subscription, as_json: bool, what: str) -> None:
    if as_json:
        click.echo(json.dumps({**sub.public(), "secret": sub.secret}))
        return
    click.echo(sub.secret)
    click.echo(
        f"{what} subscription {sub.id}: queue {sub.queue} → {sub.url}. The secret above signs "
        "its deliveries; give it to the endpoint now: it is not shown again.",
        err=True,
    )


@subscriptions.command("create")
@url_option
@click.option("--queue", "-q", required=True, help="The queue whose jobs are delivered.")
@click.option("--endpoint", "--to", "endpoint", required=True, help="The https:// URL to POST to.")
@click.option("--secret", default=None, help="A whsec_ secret to use (default: a new one).")
@click.option(
    "--rate",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Deliveries per second, shared by every delivering process. Default: no limit.",
)
@click.option("--burst", type=click.FloatRange(min=1), default=None, help="Default: the rate.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True, max=60),
    default=DEFAULT_TIMEOUT_SECONDS,
    show_default=True,
    help="Seconds each request may take, connect to answer.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 100),
    default=DEFAULT_CONCURRENCY,
    show_default=True,
    help="Requests in flight at once, per delivering process.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the subscription and secret as JSON.")
def create(
    url: str,
    queue: str,
    endpoint: str,
    secret: str | None,
    rate: float | None,
    burst: float | None,
    timeout: float,
    concurrency: int,
    as_json: bool,
) -> None:
    """Subscribe a URL to a queue and print the signing secret — the only time it is shown."""
    ledger = open_ledger(url, write=True)
    sub = create_subscription(
        ledger.backend,
        queue,
        endpoint,
        secret=secret,
        rate_per_second=rate,
        burst=burst,
        timeout_seconds=timeout,
        concurrency=concurrency,
    )
    _show_secret(sub, as_json, "created")


def _limits(sub: Subscription) -> str:
    rate = "" if sub.rate_per_second is None else f", {sub.rate_per_second:g}/s"
    return f"{sub.concurrency} at once{rate}, {sub.timeout_seconds:g} s"


@subscriptions.command("list")
@url_option
@json_option
def list_subscriptions(url: str, as_json: bool) -> None:
    """Every subscription: queue, URL, state, health, last status and error (never secrets)."""
    ledger = open_ledger(url)
    subs = ledger.backend.subscriptions.all()
    if as_json:
        click.echo(json.dumps([s.public() for s in subs]))
        return
    if not subs:
        click.echo("no subscriptions")
        return
    table = Table("id", "queue", "url", "health", "limits", "delivered", "failed", "last")
    for s in subs:
        last = "-"
        if s.last_attempt_at is not None:
            last = f"{format_time(s.last_attempt_at)} {s.last_status or ''}".strip()
        health = s.health
        if s.state is not SubscriptionState.ACTIVE and s.state_reason:
            health = f"{health}: {s.state_reason}"
        elif s.consecutive_failures:
            health = f"{health} ×{s.consecutive_failures}: {s.last_error}"
        table.add_row(
            s.id, s.queue, s.url, health, _limits(s), str(s.delivered), str(s.failed), last
        )
    Console().print(table)


def _state(
    url: str, subscription_id: str, state: SubscriptionState, actor: str, reason: Any
) -> None:
    ledger = open_ledger(url, write=True)
    sub = ledger.backend.subscriptions.set_state(subscription_id, state, actor, reason)
    verb = "paused" if state is SubscriptionState.PAUSED else "resumed"
    click.echo(f"{verb} subscription {sub.id} (queue {sub.queue} → {sub.url})")


@subscriptions.command("pause")
@url_option
@click.argument("subscription_id")
@click.option("--reason", default=None, help="Why; kept on the subscription.")
@click.option("--actor", default=_default_actor, help="Who (default: user@host).")
def pause(url: str, subscription_id: str, reason: str | None, actor: str) -> None:
    """Stop delivering SUBSCRIPTION_ID's jobs; they wait in the queue until it is resumed."""
    _state(url, subscription_id, SubscriptionState.PAUSED, actor, reason)


@subscriptions.command("resume")
@url_option
@click.argument("subscription_id")
@click.option("--reason", default=None, help="Why; kept on the subscription.")
@click.option("--actor", default=_default_actor, help="Who (default: user@host).")
def resume(url: str, subscription_id: str, reason: str | None, actor: str) -> None:
    """Deliver SUBSCRIPTION_ID's jobs again: after a pause, or after 410 Gone disabled it."""
    _state(url, subscription_id, SubscriptionState.ACTIVE, actor, reason)


@subscriptions.command("rotate")
@url_option
@click.argument("subscription_id")
@click.option("--secret", default=None, help="The new whsec_ secret (default: a new one).")
@click.option(
    "--overlap",
    type=Duration(),
    default=DEFAULT_OVERLAP,
    show_default="24h",
    help="How long the old secret keeps signing beside the new one (0: stop now).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the subscription and secret as JSON.")
def rotate(
    url: str, subscription_id: str, secret: str | None, overlap: timedelta, as_json: bool
) -> None:
    """Give SUBSCRIPTION_ID a new secret and print it; deliveries carry both signatures
    (space-separated) during the overlap, so the endpoint can switch without a failure."""
    ledger = open_ledger(url, write=True)
    sub = rotate_secret(ledger.backend, subscription_id, secret=secret, overlap=overlap)
    _show_secret(sub, as_json, "rotated")


@subscriptions.command("delete")
@url_option
@click.argument("subscription_id")
def delete(url: str, subscription_id: str) -> None:
    """Delete SUBSCRIPTION_ID. The queue's jobs stay, waiting for another consumer."""
    ledger = open_ledger(url, write=True)
    sub = ledger.backend.subscriptions.delete(subscription_id)
    click.echo(f"deleted subscription {sub.id} (queue {sub.queue} → {sub.url})")


def push_options(fn: Any) -> Any:
    """The delivery loop's options, shared by ``push`` and ``serve``."""
    fn = click.option(
        "--push-ca-file",
        "push_ca_file",
        type=click.Path(exists=True, dir_okay=False),
        default=None,
        help="A PEM file of extra certificate authorities deliveries trust.",
    )(fn)
    fn = click.option(
        "--push-allow-network",
        "push_allow",
        multiple=True,
        envvar="JOBLEDGER_PUSH_ALLOW_NETWORKS",
        help="A network deliveries may reach although it is private (127.0.0.1, "
        "10.0.0.0/8); repeat for several. Plain http:// goes only to these.",
    )(fn)
    return fn


@cli.command("push")
@url_option
@push_options
@click.option(
    "--poll-interval",
    type=click.FloatRange(min=0.01),
    default=None,
    help="Longest pause between looks at an idle queue (default 1 s PostgreSQL, 0.25 s SQLite).",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="Least severe log messages shown (one line per delivery at info).",
)
@log_format_option
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics (deliveries by status class, the ledger's gauges) on this "
    "port at /metrics.",
)
@click.option(
    "--metrics-host", default="127.0.0.1", show_default=True, help="Address for --metrics-port."
)
def push(
    url: str,
    push_ca_file: str | None,
    push_allow: tuple[str, ...],
    poll_interval: float | None,
    log_level: str,
    log_format: str,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Run the push delivery loop alone: POST every active subscription's jobs, signed.

    The same loop runs inside 'jobledger serve'; run this instead to deliver without serving
    the API, or to deliver from more processes (they share leases, and rate limits through
    the database). SIGTERM or Ctrl-C stops it after the requests in flight.
    """
    from ..push import PushService, PushSettings

    settings = PushSettings(
        allow_networks=_networks(push_allow), ca_file=push_ca_file, poll_interval=poll_interval
    )
    ledger = open_ledger(url, write=True)
    setup_logging(log_level, log_format)
    if metrics_port is not None:
        from ..observability.metrics import MetricsServer, metrics_for
        from ..observability.snapshot import SnapshotCache

        metrics = metrics_for(ledger)
        metrics.add_ledger(SnapshotCache(ledger))
        MetricsServer(metrics, metrics_host, metrics_port).start()
    service = PushService(ledger, settings)

    def on_signal(signum: int, frame: object) -> None:
        service.stop(timeout=0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    click.echo(f"jobledger push delivering from {ledger.url.redacted}", err=True)
    service.run()


def _networks(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())
