"""The application of the connection-budget test and the hosts bench's worker processes.

Reads JOBLEDGER_URL and BUDGET_WORK_SECONDS (how long each job works, default 0). ``work``
also enqueues a follow-up job for one job in ten, so that the pool serves enqueues from the
handlers beside the claims, renewals and completions; ``waits`` waits for another job's result
(the results LISTEN session).
"""

from __future__ import annotations

import os
import time

from jobledger import Ledger

QUEUE = "budget"


def register(ledger: Ledger) -> Ledger:
    """Register the tasks on ``ledger`` (the harness registers them too, to enqueue)."""

    @ledger.task(queue=QUEUE, lease_seconds=30)
    def work(ctx, n: int, follow: bool = True) -> None:
        """Work for BUDGET_WORK_SECONDS; one job in ten enqueues a follow-up (which does not)."""
        seconds = float(os.environ.get("BUDGET_WORK_SECONDS", "0"))
        if seconds:
            time.sleep(seconds)
        if follow and n % 10 == 0:
            ledger.enqueue("work", {"n": n, "follow": False}, key=f"{ctx.key}:follow")

    @ledger.task(queue=QUEUE, lease_seconds=30)
    def waits(ctx, key: str) -> None:
        """Wait for the job of ``key`` to finish (a LISTEN on the channel of finished jobs)."""
        ledger.result(key, timeout=60)

    return ledger


ledger = register(Ledger())
