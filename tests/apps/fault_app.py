"""The application the partition and failover tests run on their worker hosts.

Reads JOBLEDGER_URL, PROVIDER_URL, FAULT_LEASE_SECONDS, FAULT_WORK_SECONDS and FAULT_GATE_DIR
from the environment. Every task sends one message per key through the fake provider, with an
idempotency key derived from the job key, and records the effect in the ledger — the pattern of
``ctx.once``, spelled out so that a gate can stop a handler between its check and its call.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx

from jobledger import Ledger, check_response

from ..support.waiting import Patience

QUEUE = "faults"


def _post(ctx, n: int) -> None:
    response = httpx.post(
        f"{os.environ['PROVIDER_URL']}/send",
        json={
            "to": f"customer-{n}",
            "job_queue": ctx.queue,
            "job_key": ctx.key,
            "effect": "email",
        },
        headers={"Idempotency-Key": ctx.idempotency_key("email")},
        timeout=10,
    )
    check_response(response)


def _wait_for_gate(name: str, timeout: float = 120.0) -> None:
    """Say we are at the gate (``NAME.waiting``), then wait for the test to create ``NAME``."""
    gate = Path(os.environ["FAULT_GATE_DIR"]) / name
    gate.with_name(f"{name}.waiting").touch()
    patience = Patience(timeout)
    while not gate.exists():
        if patience.expired():
            raise TimeoutError(f"gate {name} was never opened: {patience.describe()}")
        time.sleep(0.01)


def register(ledger: Ledger, lease: float | None = None) -> Ledger:
    """Register the tasks on ``ledger`` (the harness registers them too, for their leases)."""
    lease = lease if lease is not None else float(os.environ.get("FAULT_LEASE_SECONDS", "3"))

    @ledger.task(queue=QUEUE, lease_seconds=lease, max_attempts=25)
    def send(ctx, n: int) -> None:
        """Work a little (so that faults find jobs mid-lease), then send once per key."""
        time.sleep(float(os.environ.get("FAULT_WORK_SECONDS", "0.05")))
        ctx.once("email", _post, ctx, n)

    @ledger.task(queue=QUEUE, lease_seconds=lease, max_attempts=25)
    def gated(ctx, n: int, gate: str) -> None:
        """``ctx.once`` with a gate between the check and the call: the test decides when."""
        if ctx.effect_recorded("email"):
            return
        _wait_for_gate(gate)
        _post(ctx, n)
        ctx.record_effect("email")

    return ledger


ledger = register(Ledger())
