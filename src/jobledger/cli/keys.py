"""``jobledger keys create|list|revoke``: API keys for the HTTP API."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from .._records import ApiKey
from .._services.keys import create_api_key
from .base import cli, json_option, open_ledger, url_option


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


@cli.group()
def keys() -> None:
    """API keys for the HTTP API: create (shown once), list, revoke.

    A key carries scopes: publish:QUEUE and consume:QUEUE (QUEUE may be * for every queue),
    read (look at everything, change nothing: the dashboard read-only, /metrics), or admin
    (everything: declaring queues, redrive, resolve, the dashboard's actions). Only a SHA-256 digest of each
    key is stored, so a lost key cannot be shown again: revoke it and create another.
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
@click.option(
    "--rate",
    type=click.FloatRange(min=0.001),
    default=None,
    help="Messages per second this key may publish (shared by all servers). Default: the "
    "server's --default-rate, else no limit.",
)
@click.option(
    "--burst",
    type=click.FloatRange(min=1),
    default=None,
    help="Messages it may publish at once before --rate applies (default: the rate).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the key and its record as JSON.")
def create(
    url: str,
    name: str,
    scopes: tuple[str, ...],
    rate: float | None,
    burst: float | None,
    as_json: bool,
) -> None:
    """Create an API key and print it — the only time it is shown."""
    ledger = open_ledger(url, write=True)
    try:
        key, record = create_api_key(
            ledger.backend, name, list(scopes), rate_per_second=rate, burst=burst
        )
    finally:
        ledger.close()
    if as_json:
        click.echo(json.dumps({"key": key, **key_json(record)}))
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
    ledger = open_ledger(url)
    try:
        records = ledger.backend.api.keys()
    finally:
        ledger.close()
    if as_json:
        click.echo(json.dumps([key_json(k) for k in records]))
        return
    table = Table("id", "name", "scopes", "rate/s", "burst", "created", "revoked")
    for k in records:
        table.add_row(
            k.id,
            k.name,
            " ".join(k.scopes),
            "" if k.rate_per_second is None else f"{k.rate_per_second:g}",
            "" if k.burst is None else f"{k.burst:g}",
            _when(k.created_at),
            _when(k.revoked_at) or "",
        )
    Console().print(table)


@keys.command("revoke")
@url_option
@click.argument("key_id")
def revoke(url: str, key_id: str) -> None:
    """Revoke the key with id KEY_ID (from 'keys list'); it stops working at once."""
    ledger = open_ledger(url, write=True)
    try:
        record = ledger.backend.api.key_revoke(key_id)
    finally:
        ledger.close()
    click.echo(f"revoked key {record.id} ({record.name})")
