"""``jobledger serve``: the HTTP API."""

from __future__ import annotations

import socket
from typing import Any

import click

from .base import open_ledger
from .params import (
    listen_url_option,
    log_options,
    migrate_option,
    rate_options,
    setting,
    split_csv,
    url_option,
)
from .subscriptions import push_options


@click.command()
@url_option
@listen_url_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@setting(
    "--port",
    click.IntRange(0, 65535),
    8787,
    help="Port to listen on (0: any free port; the log says which).",
)
@rate_options(
    "Publish limit (messages/s) for keys created without --rate. Default: none.",
    "Messages a key without its own limit may publish at once (default: the rate).",
    prefix="default-",
)
@setting(
    "--rescue-interval",
    click.FloatRange(min=0.05),
    5.0,
    help="Seconds between scans for leases that expired (consumers that died).",
)
@log_options
@click.option(
    "--public-metrics",
    is_flag=True,
    help="Serve /metrics without an API key (default: a key with the read or admin scope, "
    "which Prometheus sends as a bearer token).",
)
@click.option(
    "--push/--no-push",
    default=True,
    show_default=True,
    help="Run the push delivery loop (subscriptions) in the server too.",
)
@push_options
@click.option(
    "--access-log/--no-access-log",
    default=True,
    show_default=True,
    help="Log one line per request (method, path, status; never headers or keys).",
)
@migrate_option
def serve(
    url: str,
    listen_url: str | None,
    host: str,
    port: int,
    default_rate: float | None,
    default_burst: float | None,
    rescue_interval: float,
    log_level: str,
    log_format: str,
    public_metrics: bool,
    push: bool,
    push_allow: tuple[str, ...],
    push_ca_file: str | None,
    access_log: bool,
    migrate: bool,
) -> None:
    """Serve the HTTP API: publish with Idempotency-Key, pull consumers, queues, dead letters.

    Clients authenticate with API keys from 'jobledger keys create'; queues are declared with
    'jobledger queues create' or PUT /v1/queues/{name}. The OpenAPI document is at
    /openapi.json and a health check at /healthz. Run several servers against one PostgreSQL
    database to scale out: idempotency, in-flight detection and rate limits hold across them.
    The dashboard is at / (log in with a read or admin key) and Prometheus metrics at
    /metrics. Unless --no-push, the server also delivers push subscriptions (see 'jobledger
    push'). The database must be migrated (`jobledger migrate`, or --migrate); a port already
    in use is an error. SIGTERM or Ctrl-C stops the server gracefully. See docs/http-api.md,
    docs/observability.md and docs/push.md.
    """
    import uvicorn

    from ..http import ServerSettings, create_app
    from ..push import PushSettings
    from .logs import setup_logging

    setup_logging(log_level, log_format)
    settings = ServerSettings(
        default_rate=default_rate,
        default_burst=default_burst,
        rescue_interval=rescue_interval,
        public_metrics=public_metrics,
        push=PushSettings(allow_networks=tuple(split_csv(push_allow)), ca_file=push_ca_file)
        if push
        else None,
    )
    ledger = open_ledger(url, migrate=migrate, listen_url=listen_url)
    listener = _listen(host, port)
    try:
        config = uvicorn.Config(
            create_app(ledger, settings),
            host=host,
            port=port,
            log_level=log_level,
            access_log=access_log,
            log_config=None,
            lifespan="on",
            server_header=False,
        )
        _announcing_server()(config, ledger.url.redacted, log_format).run(sockets=[listener])
    finally:
        listener.close()


def _listen(host: str, port: int) -> socket.socket:
    """The server's listening socket, bound here so that a port in use (or an address this
    host does not have) is one line and exit code 2, before anything starts."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.create_server((host, port), family=family, backlog=2048)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise click.ClickException(f"cannot listen on {host}:{port}: {reason}") from None
    sock.set_inheritable(True)
    return sock


def _announcing_server() -> Any:
    """uvicorn's server class, saying where it listens once it does — whatever the log level,
    so that ``--port 0`` is usable. (uvicorn is imported only when serving.)"""
    import uvicorn

    from .logs import announce

    class Server(uvicorn.Server):
        def __init__(self, config: uvicorn.Config, database: str, log_format: str = "console"):
            super().__init__(config)
            self.database = database
            self.log_format = log_format

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started and self.servers and self.servers[0].sockets:
                host, port = self.servers[0].sockets[0].getsockname()[:2]
                announce(
                    f"jobledger serving {self.database} on http://{host}:{port}",
                    self.log_format,
                    "jobledger.http",
                    host=host,
                    port=port,
                )

    return Server
