"""``jobledger keys create|list|revoke``: API keys for the HTTP API."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from .base import open_ledger
from .params import (
    echo_json,
    format_time,
    json_flag,
    json_option,
    listing,
    rate_options,
    url_option,
)

if TYPE_CHECKING:
    from .._records import ApiKey


def _when(value: object) -> str | None:
    return None if value is None else value.isoformat()  # type: ignore[attr-defined]


def key_json(key: ApiKey) -> dict[str, object]:
    return {
        "id": key.id,
        "name": key.name,
        "scopes": list(key.scopes),
        "rate_per_second": key.rate_per_second,
        "burst": key.burst,
        "created_at": _when(key.created_at),
        "revoked_at": _when(key.revoked_at),
    }


@click.group()
def keys() -> None:
    """API keys for the HTTP API: create (shown once), list, revoke.

    A key carries scopes: publish:QUEUE and consume:QUEUE (QUEUE may be * for every queue),
    read (look at everything, change nothing: the dashboard read-only, /metrics), or admin
    (everything: declaring queues, redrive, resolve, the dashboard's actions). Only a SHA-256
    digest of each key is stored, so a lost key cannot be shown again: revoke it and create
    another.
    """


@keys.command("create")
@url_option
@click.option("--name", required=True, help="What the key is for, e.g. billing-service.")
@click.option(
    "--scope",
    "scopes",
    multiple=True,
    required=True,
    help="publish:QUEUE, consume:QUEUE, read or admin; repeat for several.",
)
@rate_options(
    "Messages per second this key may publish (shared by all servers). Default: the server's "
    "--default-rate, else no limit.",
    "Messages it may publish at once before --rate applies (default: the rate; needs --rate).",
)
@json_flag(help="Print the key and its record as JSON.")
def create(
    url: str,
    name: str,
    scopes: tuple[str, ...],
    rate: float | None,
    burst: float | None,
    as_json: bool,
) -> None:
    """Create an API key and print it — the only time it is shown."""
    ledger = open_ledger(url)
    key, record = ledger.keys.create(name, list(scopes), rate_per_second=rate, burst=burst)
    if as_json:
        echo_json({"key": key, **key_json(record)})
        return
    click.echo(key)
    click.echo(
        f"created key {record.id} ({record.name}) with scopes {' '.join(record.scopes)}. "
        "Store it now: it is not shown again.",
        err=True,
    )


@keys.command("list")
@url_option
@json_option
def list_keys(url: str, as_json: bool) -> None:
    """List API keys (never the keys themselves): id, name, scopes, limits, state."""
    listing(
        open_ledger(url).keys.list(),
        as_json,
        key_json,
        ["id", "name", "scopes", "rate/s", "burst", "created", "revoked"],
        _row,
        right=("rate/s", "burst"),
        empty="no API keys (jobledger keys create)",
    )


def _row(k: ApiKey) -> list[str]:
    return [
        k.id,
        k.name,
        " ".join(k.scopes),
        "" if k.rate_per_second is None else f"{k.rate_per_second:g}",
        "" if k.burst is None else f"{k.burst:g}",
        format_time(k.created_at),
        "" if k.revoked_at is None else format_time(k.revoked_at),
    ]


@keys.command("revoke")
@url_option
@click.argument("key_id")
def revoke(url: str, key_id: str) -> None:
    """Revoke the key with id KEY_ID (from 'keys list'); it stops working at once."""
    record = open_ledger(url).keys.revoke(key_id)
    click.echo(f"revoked key {record.id} ({record.name})")
