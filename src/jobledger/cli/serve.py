"""``jobledger serve``: the HTTP API."""

from __future__ import annotations

import socket

import click

from .base import cli, open_ledger, url_option
from .logs import setup_logging


@cli.command()
@url_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8787,
    show_default=True,
    help="Port to listen on (0: any free port; the log says which).",
)
@click.option(
    "--default-rate",
    type=click.FloatRange(min=0.001),
    default=None,
    help="Publish limit (messages/s) for keys created without --rate. Default: none.",
)
@click.option(
    "--default-burst",
    type=click.FloatRange(min=1),
    default=None,
    help="Messages a key without its own limit may publish at once (default: the rate).",
)
@click.option(
    "--rescue-interval",
    type=click.FloatRange(min=0.05),
    default=5.0,
    show_default=True,
    help="Seconds between scans for leases that expired (consumers that died).",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="Least severe log messages shown.",
)
@click.option(
    "--access-log/--no-access-log",
    default=True,
    show_default=True,
    help="Log one line per request (method, path, status; never headers or keys).",
)
def serve(
    url: str,
    host: str,
    port: int,
    default_rate: float | None,
    default_burst: float | None,
    rescue_interval: float,
    log_level: str,
    access_log: bool,
) -> None:
    """Serve the HTTP API: publish with Idempotency-Key, pull consumers, queues, dead letters.

    Clients authenticate with API keys from 'jobledger keys create'; queues are declared with
    'jobledger queues create' or PUT /v1/queues/{name}. The OpenAPI document is at
    /openapi.json and a health check at /healthz. Run several servers against one PostgreSQL
    database to scale out: idempotency, in-flight detection and rate limits hold across them.
    SIGTERM or Ctrl-C stops the server gracefully. See docs/http-api.md.
    """
    import uvicorn

    from ..http import ServerSettings, create_app

    setup_logging(log_level)
    settings = ServerSettings(
        default_rate=default_rate, default_burst=default_burst, rescue_interval=rescue_interval
    )
    ledger = open_ledger(url, write=True)
    try:
        app = create_app(ledger, settings)
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=log_level,
            access_log=access_log,
            log_config=None,
            lifespan="on",
            server_header=False,
        )
        _announcing_server()(config, ledger.url.redacted).run()

    finally:
        ledger.close()


def _announcing_server() -> type:
    """uvicorn's server class, saying where it listens once it does — whatever the log level,
    so that ``--port 0`` is usable. (uvicorn is imported only when serving.)"""
    import uvicorn

    class Server(uvicorn.Server):
        def __init__(self, config: uvicorn.Config, database: str):
            super().__init__(config)
            self.database = database

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started and self.servers and self.servers[0].sockets:
                host, port = self.servers[0].sockets[0].getsockname()[:2]
                click.echo(f"jobledger serving {self.database} on http://{host}:{port}", err=True)

    return Server
