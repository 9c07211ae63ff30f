"""The demo's application: one task that sends a customer's weekly digest through the e-mail
provider, once, whatever retries happen.

Worker processes run it as ``jobledger worker jobledger.testing.demo.app:ledger``; they read the database
from ``JOBLEDGER_URL`` and the provider from ``JOBLEDGER_DEMO_PROVIDER``.
"""

from __future__ import annotations

import os

import httpx

from ..._ledger import Ledger
from ..._task import Task
from ...policy import Backoff, check_response

QUEUE = "digests"
LEASE_SECONDS = 3.0
"""Short, so that the jobs of the worker the demo kills are handed out again within seconds."""
SEND_TIMEOUT = 1.0
"""How long a send waits for the provider's answer before the attempt fails as a timeout."""


def register(ledger: Ledger, provider_url: str) -> Task:
    """Register the digest task on ``ledger``, sending through the provider at ``provider_url``."""

    def post(ctx, customer_id: int, week: str) -> None:  # type: ignore[no-untyped-def]
        response = httpx.post(
            f"{provider_url}/send",
            json={"to": f"customer-{customer_id}", "template": "weekly-digest", "week": week},
            headers={"Idempotency-Key": ctx.idempotency_key("email")},
            timeout=SEND_TIMEOUT,
        )
        check_response(response)  # 429 → retry after Retry-After; 400 → dead

    @ledger.task(
        name="send_digest",
        queue=QUEUE,
        max_attempts=6,
        lease_seconds=LEASE_SECONDS,
        backoff=Backoff(base=0.5, cap=4.0),
        key="{customer_id}:{week}",
    )
    def send_digest(ctx, customer_id: int, week: str) -> None:  # type: ignore[no-untyped-def]
        """Send one customer's digest for one week; record it as the effect "email"."""
        ctx.once("email", post, ctx, customer_id, week)

    return send_digest


ledger = Ledger()
register(ledger, os.environ.get("JOBLEDGER_DEMO_PROVIDER", "http://127.0.0.1:9"))
