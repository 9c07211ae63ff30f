"""An application for the observability tests: a task that fails its first attempt (a
transient error) and one that fails for good, so that logs and metrics see every outcome."""

from __future__ import annotations

import os

from jobledger import Ledger, Permanent

ledger = Ledger()

DELAY = float(os.environ.get("OBSERVED_DELAY", "0"))


@ledger.task(queue="observed", max_attempts=3)
def flaky(ctx, n: int) -> None:
    if ctx.attempt == 1:
        raise ConnectionError(f"provider hiccup for {n}")


@ledger.task(queue="observed")
def refused(ctx, n: int) -> None:
    raise Permanent(f"customer {n} does not exist")


@ledger.task(queue="slow")
def slow(ctx, n: int, poison: bool = False) -> None:
    """Takes DELAY seconds; a poison job fails for good on its first attempt only, so that a
    redrive (once 'the provider is fixed') completes it."""
    import time

    time.sleep(DELAY)
    if poison and ctx.attempt == 1:
        raise Permanent(f"provider refused message {n} <script>window.__xss = 1</script>")
