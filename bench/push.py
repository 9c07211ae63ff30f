"""How fast the delivery loop pushes to a local endpoint that answers at once: jobs per second
from the first claim to the last outcome, for some concurrencies, on SQLite and PostgreSQL.

    .venv/bin/python bench/push.py --jobs 2000 --concurrency 1 8 32
    .venv/bin/python bench/push.py --backend postgres --url postgresql://postgres@127.0.0.1/postgres

The endpoint is a minimal ASGI app under uvicorn on 127.0.0.1 (allow-listed) in this process, so
the figures are bounded by it and by this machine's two cores, not by a real network.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import threading  # noqa: E402

import uvicorn  # noqa: E402

from jobledger import JobFilter, JobState, Ledger  # noqa: E402
from jobledger._services.subscriptions import create_subscription  # noqa: E402
from jobledger.push import PushService, PushSettings  # noqa: E402


class Endpoint:
    """Answers every POST 204 at once."""

    def __init__(self) -> None:
        async def app(scope, receive, send):  # type: ignore[no-untyped-def]
            if scope["type"] != "http":
                return
            while (await receive()).get("more_body"):
                pass
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})

        config = uvicorn.Config(
            app, host="127.0.0.1", port=0, log_level="error", lifespan="off", access_log=False
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/hooks"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def run(url: str, jobs: int, concurrency: int) -> float:
    ledger = Ledger(url)
    ledger.migrate()
    endpoint = Endpoint()
    queue = f"bench-{uuid.uuid4().hex[:6]}"
    create_subscription(ledger.backend, queue, endpoint.url, concurrency=concurrency)
    ledger.enqueue_many(
        "bench", [{"key": f"k{i}", "payload": {"i": i}} for i in range(jobs)], queue=queue
    )
    settings = PushSettings(allow_networks=("127.0.0.1",), poll_interval=0.05)
    service = PushService(ledger, settings)
    start = time.monotonic()
    service.start()
    where = JobFilter(queue=queue, states=(JobState.DONE,))
    while len(ledger.jobs(where)) < jobs:
        time.sleep(0.05)
    elapsed = time.monotonic() - start
    service.stop()
    endpoint.stop()
    ledger.close()
    return jobs / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    args = parser.parse_args()
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    for backend in backends:
        for concurrency in args.concurrency:
            if backend == "sqlite":
                directory = tempfile.mkdtemp()
                url = f"sqlite:///{directory}/bench.db"
            else:
                schema = f"bench_push_{uuid.uuid4().hex[:8]}"
                sep = "&" if "?" in args.url else "?"
                url = f"{args.url}{sep}schema={schema}"
            rate = run(url, args.jobs, concurrency)
            print(
                f"{backend:8} concurrency {concurrency:3}: {rate:7.0f} deliveries/s "
                f"({args.jobs} jobs)",
                flush=True,
            )
            if backend == "postgres":
                Ledger(url).backend.schema_drop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
