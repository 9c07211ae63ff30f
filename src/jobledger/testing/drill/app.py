"""The drill's application, run by its worker processes as ``jobledger.testing.drill.app:ledger``.

Reads ``JOBLEDGER_URL``, ``JOBLEDGER_DRILL_QUEUE`` (the queue this worker serves) and
``JOBLEDGER_DRILL_PROVIDER`` (the fake provider's base URL) from the environment.
"""

from __future__ import annotations

import os

import httpx

from ..._ledger import Ledger
from ..._task import Task
from ...policy import Backoff, check_response

LEASE_SECONDS = 3.0
"""The lease of every drill job (SPEC drill 4: "lease 3")."""


def recipient(key: str, effect: str) -> str:
    """Whom the provider sees a drill job's effect addressed to: one recipient per key and effect."""
    return f"{effect}:{key}"


def register(ledger: Ledger, provider_url: str, queue: str) -> dict[str, Task]:
    """Register the drill's tasks on ``ledger``: ``send`` (one e-mail) and ``notify`` (an e-mail,
    then a text message), each effect once per key, with the key as the idempotency key."""

    def post(ctx, effect: str) -> None:  # type: ignore[no-untyped-def]
        response = httpx.post(
            f"{provider_url}/send",
            json={"to": recipient(ctx.key, effect), "key": ctx.key, "effect": effect},
            headers={"Idempotency-Key": ctx.idempotency_key(effect)},
            timeout=10,
        )
        check_response(response)

    backoff = Backoff(base=0.2, cap=2)

    @ledger.task(
        name="send", queue=queue, max_attempts=5, lease_seconds=LEASE_SECONDS, backoff=backoff
    )
    def send(ctx, n: int) -> None:  # type: ignore[no-untyped-def]
        ctx.once("email", post, ctx, "email")

    @ledger.task(
        name="notify", queue=queue, max_attempts=5, lease_seconds=LEASE_SECONDS, backoff=backoff
    )
    def notify(ctx, n: int) -> None:  # type: ignore[no-untyped-def]
        ctx.once("email", post, ctx, "email")
        ctx.once("sms", post, ctx, "sms")

    return {"send": send, "notify": notify}


ledger = Ledger()
register(
    ledger,
    os.environ.get("JOBLEDGER_DRILL_PROVIDER", "http://127.0.0.1:9"),
    os.environ.get("JOBLEDGER_DRILL_QUEUE", "drill"),
)
