"""``jobledger subscriptions create|list|pause|resume|rotate|delete`` and ``jobledger push``."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import click

from .._signals import relayed_signals
from .base import open_ledger
from .params import (
    Duration,
    echo_json,
    format_time,
    json_flag,
    json_option,
    listen_url_option,
    listing,
    log_options,
    metrics_options,
    migrate_option,
    options,
    recorded_actor,
    setting,
    split_csv,
    url_option,
)

if TYPE_CHECKING:
    from .._records import Subscription

# The defaults of jobledger._records.subscriptions (a test checks them): written here so that
# the options cost no import.
DEFAULT_TIMEOUT_SECONDS = 15.0
DEFAULT_CONCURRENCY = 4
DEFAULT_OVERLAP_HOURS = 24


@click.group()
def subscriptions() -> None:
    """Push subscriptions: every job of a queue POSTed to a URL, signed per Standard Webhooks.

    The delivery loop ('jobledger push', and 'jobledger serve' unless --no-push) claims the
    queue's jobs under leases like any worker and POSTs each one; the endpoint verifies the
    signature with the subscription's secret. A queue has one subscription. See docs/push.md.
    """


def _show_secret(sub: Subscription, as_json: bool, what: str) -> None:
    if as_json:
        echo_json({**sub.public(), "secret": sub.secret})
        return
    click.echo(sub.secret)
    click.echo(
        f"{what} subscription {sub.id}: queue {sub.queue} → {sub.url}. The secret above signs "
        "its deliveries; give it to the endpoint now: it is not shown again.",
        err=True,
    )


_secret_json = json_flag(help="Print the subscription and secret as JSON.")


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
@click.option(
    "--burst", type=click.FloatRange(min=1), default=None, help="Default: the rate (needs --rate)."
)
@setting(
    "--timeout",
    click.FloatRange(min=0, min_open=True, max=60),
    DEFAULT_TIMEOUT_SECONDS,
    help="Seconds each request may take, connect to answer.",
)
@setting(
    "--concurrency",
    click.IntRange(1, 100),
    DEFAULT_CONCURRENCY,
    help="Requests in flight at once, per delivering process.",
)
@_secret_json
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
    sub = open_ledger(url).subscriptions.create(
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


def _health(sub: Subscription) -> str:
    if sub.state.value != "active" and sub.state_reason:
        return f"{sub.health}: {sub.state_reason}"
    if sub.consecutive_failures:
        return f"{sub.health} ×{sub.consecutive_failures}: {sub.last_error}"
    return sub.health


@subscriptions.command("list")
@url_option
@json_option
def list_subscriptions(url: str, as_json: bool) -> None:
    """Every subscription: queue, URL, state, health, last status and error (never secrets)."""
    listing(
        open_ledger(url).subscriptions.list(),
        as_json,
        lambda s: s.public(),
        ["id", "queue", "url", "health", "limits", "delivered", "failed", "last"],
        _row,
        right=("delivered", "failed"),
        empty="no subscriptions",
    )


def _row(s: Subscription) -> list[str]:
    last = "-"
    if s.last_attempt_at is not None:
        last = f"{format_time(s.last_attempt_at)} {s.last_status or ''}".strip()
    return [s.id, s.queue, s.url, _health(s), _limits(s), str(s.delivered), str(s.failed), last]


_change = options(
    url_option,
    click.argument("subscription_id"),
    click.option("--reason", default=None, help="Why; kept on the subscription."),
    recorded_actor("the subscription"),
)


def _set_state(url: str, subscription_id: str, state: str, actor: str, reason: Any) -> None:
    from .._records import SubscriptionState

    ledger = open_ledger(url)
    sub = ledger.subscriptions.set_state(subscription_id, SubscriptionState(state), actor, reason)
    verb = "paused" if state == "paused" else "resumed"
    click.echo(f"{verb} subscription {sub.id} (queue {sub.queue} → {sub.url})")


@subscriptions.command("pause")
@_change
def pause(url: str, subscription_id: str, reason: str | None, actor: str) -> None:
    """Stop delivering SUBSCRIPTION_ID's jobs; they wait in the queue until it is resumed."""
    _set_state(url, subscription_id, "paused", actor, reason)


@subscriptions.command("resume")
@_change
def resume(url: str, subscription_id: str, reason: str | None, actor: str) -> None:
    """Deliver SUBSCRIPTION_ID's jobs again: after a pause, or after 410 Gone disabled it."""
    _set_state(url, subscription_id, "active", actor, reason)


@subscriptions.command("rotate")
@url_option
@click.argument("subscription_id")
@click.option("--secret", default=None, help="The new whsec_ secret (default: a new one).")
@setting(
    "--overlap",
    Duration(),
    f"{DEFAULT_OVERLAP_HOURS}h",
    help="How long the old secret keeps signing beside the new one (0: stop now).",
)
@_secret_json
def rotate(
    url: str, subscription_id: str, secret: str | None, overlap: timedelta, as_json: bool
) -> None:
    """Give SUBSCRIPTION_ID a new secret and print it; deliveries carry both signatures
    (space-separated) during the overlap, so the endpoint can switch without a failure."""
    sub = open_ledger(url).subscriptions.rotate(subscription_id, secret=secret, overlap=overlap)
    _show_secret(sub, as_json, "rotated")


@subscriptions.command("delete")
@url_option
@click.argument("subscription_id")
def delete(url: str, subscription_id: str) -> None:
    """Delete SUBSCRIPTION_ID. The queue's jobs stay, waiting for another consumer."""
    sub = open_ledger(url).subscriptions.delete(subscription_id)
    click.echo(f"deleted subscription {sub.id} (queue {sub.queue} → {sub.url})")


push_options = options(
    click.option(
        "--push-allow-network",
        "push_allow",
        multiple=True,
        envvar="JOBLEDGER_PUSH_ALLOW_NETWORKS",
        help="A network deliveries may reach although it is private (127.0.0.1, "
        "10.0.0.0/8); repeat for several. Plain http:// goes only to these.",
    ),
    click.option(
        "--push-ca-file",
        "push_ca_file",
        type=click.Path(exists=True, dir_okay=False),
        default=None,
        help="A PEM file of extra certificate authorities deliveries trust.",
    ),
)
"""The delivery loop's options, shared by ``push`` and ``serve``."""


@click.command("push")
@url_option
@listen_url_option
@push_options
@click.option(
    "--poll-interval",
    type=click.FloatRange(min=0.01),
    default=None,
    help="Longest pause between looks at an idle queue (default 1 s PostgreSQL, 0.25 s SQLite).",
)
@log_options
@metrics_options("deliveries by status class")
@migrate_option
def push(
    url: str,
    listen_url: str | None,
    push_allow: tuple[str, ...],
    push_ca_file: str | None,
    poll_interval: float | None,
    log_level: str,
    log_format: str,
    metrics_port: int | None,
    metrics_host: str,
    migrate: bool,
) -> None:
    """Run the push delivery loop alone: POST every active subscription's jobs, signed.

    The same loop runs inside 'jobledger serve'; run this instead to deliver without serving
    the API, or to deliver from more processes (they share leases, and rate limits through
    the database). SIGTERM or Ctrl-C stops it after the requests in flight.
    """
    from ..push import PushService, PushSettings
    from .logs import setup_logging

    settings = PushSettings(
        allow_networks=tuple(split_csv(push_allow)),
        ca_file=push_ca_file,
        poll_interval=poll_interval,
    )
    ledger = open_ledger(url, migrate=migrate, listen_url=listen_url)
    setup_logging(log_level, log_format)
    if metrics_port is not None:
        from ..observability.metrics import MetricsServer, metrics_for
        from ..observability.snapshot import SnapshotCache

        metrics = metrics_for(ledger)
        metrics.add_ledger(SnapshotCache(ledger))
        MetricsServer(metrics, metrics_host, metrics_port).start()
    service = PushService(ledger, settings)

    click.echo(f"jobledger push delivering from {ledger.url.redacted}", err=True)
    with relayed_signals(lambda signum, count: service.stop(timeout=0)):
        service.run()
