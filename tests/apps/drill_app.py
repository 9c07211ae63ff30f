"""The application the drill tests run in worker processes.

Reads JOBLEDGER_URL, PROVIDER_URL and DRILL_LEASE_SECONDS from the environment. Its one task
sends a message through the fake provider once per key, with the job key as idempotency key.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx

from jobledger import Ledger, check_response

from ..support.waiting import Patience

ledger = Ledger()

LEASE = float(os.environ.get("DRILL_LEASE_SECONDS", "2"))
PROVIDER = os.environ.get("PROVIDER_URL", "")
NOOP_SECONDS = float(os.environ.get("DRILL_NOOP_SECONDS", "0"))

_barrier = os.environ.get("DRILL_START_BARRIER")
if _barrier:
    # Start all worker processes of a test at the same moment: say this one is ready, wait.
    Path(f"{_barrier}.ready.{os.getpid()}").touch()
    patience = Patience(30)
    while not Path(_barrier).exists() and not patience.expired():
        time.sleep(0.005)


def _post(ctx, n: int) -> None:
    response = httpx.post(
        f"{PROVIDER}/send",
        json={"to": f"customer-{n}", "n": n},
        headers={"Idempotency-Key": ctx.idempotency_key("email")},
        timeout=10,
    )
    check_response(response)


@ledger.task(queue="drill", lease_seconds=LEASE, max_attempts=5)
def send(ctx, n: int) -> None:
    """Send one message per key, recorded as the effect "email"."""
    ctx.once("email", _post, ctx, n)


@ledger.task(queue="drill", lease_seconds=LEASE, max_attempts=5)
def noop(ctx, n: int) -> None:
    """Nothing (or a short sleep, DRILL_NOOP_SECONDS): for counting which process ran what."""
    if NOOP_SECONDS:
        time.sleep(NOOP_SECONDS)
