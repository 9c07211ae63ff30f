"""The application the outage tests run a worker of: one task that records that it ran."""

from __future__ import annotations

from jobledger import Ledger

QUEUE = "outage"

ledger = Ledger()


@ledger.task(queue=QUEUE)
def note(ctx, n: int) -> int:
    return n
