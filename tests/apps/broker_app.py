"""The application the broker tests run in consumer processes (``jobledger consume``).

Reads JOBLEDGER_URL, PROVIDER_URL, BROKER_LEASE_SECONDS and HANDLER_SECONDS from the
environment. Its task sends the weekly digest of one customer through the fake provider, once
per key: the job key is the provider's idempotency key, and the send is recorded as the effect
"email".
"""

from __future__ import annotations

import os
import time

import httpx

from jobledger import Ledger, check_response

ledger = Ledger()
ledger.schedules.run_in_workers = False

LEASE = float(os.environ.get("BROKER_LEASE_SECONDS", "2"))
PROVIDER = os.environ.get("PROVIDER_URL", "")
PAUSE = float(os.environ.get("HANDLER_SECONDS", "0"))
_client = httpx.Client(timeout=10)  # one client (and connection pool) for every handler


def _post(ctx, customer_id: int, week: str) -> None:
    response = _client.post(
        f"{PROVIDER}/send",
        json={"to": f"customer-{customer_id}", "week": week},
        headers={"Idempotency-Key": ctx.idempotency_key("email")},
    )
    check_response(response)


@ledger.task(queue="digests", lease_seconds=LEASE, max_attempts=5, key="{customer_id}:{week}")
def send_digest(ctx, customer_id: int, week: str) -> None:
    """Send one customer's digest for one week, once per key."""
    if PAUSE:
        time.sleep(PAUSE)
    ctx.once("email", _post, ctx, customer_id, week)
