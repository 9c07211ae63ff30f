"""The application of the chaos test's worker processes.

Reads JOBLEDGER_URL, CHAOS_PROVIDER_URL and CHAOS_LEASE_SECONDS. Its one task records the effect
"email" once per key through the fake provider, with the job key as idempotency key — the
pattern of SPEC §4 under SIGKILLs and a database restart.
"""

from __future__ import annotations

import os

import httpx

from jobledger import Backoff, Ledger, check_response

ledger = Ledger()

PROVIDER = os.environ.get("CHAOS_PROVIDER_URL", "")
LEASE = float(os.environ.get("CHAOS_LEASE_SECONDS", "2"))
_client = httpx.Client(timeout=5)


def _send(ctx, n: int) -> None:
    response = _client.post(
        f"{PROVIDER}/send",
        # job_queue/job_key/effect let the history checker tie each delivery to its job.
        json={
            "to": f"recipient-{n}",
            "n": n,
            "job_queue": ctx.queue,
            "job_key": ctx.key,
            "effect": "email",
        },
        headers={"Idempotency-Key": ctx.idempotency_key("email")},
    )
    check_response(response)


@ledger.task(queue="chaos", lease_seconds=LEASE, max_attempts=10, backoff=Backoff(0.05, 0.5))
def deliver(ctx, n: int) -> None:
    """Send one message per key, recorded as the effect "email"."""
    ctx.once("email", _send, ctx, n)
