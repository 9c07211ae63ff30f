"""A web application that receives pushes with nothing but ``WebhookReceiver``, for the tests.

Run as ``python -m tests.apps.receiver_app PORT``; it prints ``listening on PORT`` once it does.

Environment: JOBLEDGER_URL (the application's own ledger), WEBHOOK_SECRET, and RECEIVER_CHAOS
to misbehave on purpose, each only the first time a webhook-id arrives in this process:
``429:N`` answers every N-th id 429 with Retry-After: 1 before the receiver sees it;
``slow:N:SECONDS`` lets the receiver accept every N-th id and then holds the answer that long
(the sender times out and delivers again). JOBLEDGER_FAULTS="receiver.after_accept=kill@K"
kills the process after the K-th acceptance is committed and before it is answered.
"""

from __future__ import annotations

import asyncio
import os
import sys
import zlib
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.routing import Route

from jobledger import Ledger
from jobledger.push import WebhookReceiver

ledger = Ledger(os.environ["JOBLEDGER_URL"])


@ledger.task(queue="inbox")
def on_event(ctx: Any, type: str, timestamp: str, data: dict[str, Any]) -> None:  # noqa: A002
    """The application's work; the tests run it with a worker of their own."""


def _rules() -> dict[str, tuple[int, float]]:
    rules = {}
    for item in filter(None, os.environ.get("RECEIVER_CHAOS", "").split(",")):
        kind, _, rest = item.partition(":")
        every, _, seconds = rest.partition(":")
        rules[kind] = (int(every), float(seconds or 0))
    return rules


class Chaos:
    """An ASGI middleware that makes the first arrival of some webhook-ids go wrong."""

    def __init__(self, app: Any):
        self.app = app
        self.rules = _rules()
        self.seen: set[str] = set()

    def _picked(self, kind: str, msg_id: str) -> float | None:
        rule = self.rules.get(kind)
        if rule is None or zlib.crc32(msg_id.encode()) % rule[0] != 0:
            return None
        return rule[1]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        msg_id = headers.get("webhook-id", "")
        first = msg_id not in self.seen
        self.seen.add(msg_id)
        if first and self._picked("429", msg_id) is not None:
            await send(
                {
                    "type": "http.response.start",
                    "status": 429,
                    "headers": [(b"retry-after", b"1"), (b"content-length", b"0")],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        delay = self._picked("slow", msg_id) if first else None

        async def delayed(message: Any) -> None:
            if delay and message["type"] == "http.response.start":
                await asyncio.sleep(delay)
            await send(message)

        await self.app(scope, receive, delayed)


receiver = WebhookReceiver(ledger, os.environ["WEBHOOK_SECRET"], on_event)
app = Chaos(Starlette(routes=[Route("/hooks", receiver, methods=["POST"])]))


class _Server(uvicorn.Server):
    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        print(f"listening on {self.servers[0].sockets[0].getsockname()[1]}", flush=True)


if __name__ == "__main__":
    ledger.migrate()
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    _Server(config).run()
