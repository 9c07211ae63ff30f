"""A worker app for the shutdown test: its "send" job blocks until the test says go."""

from __future__ import annotations

import os
import time
from pathlib import Path

from jobledger import Ledger

from ..support.waiting import Patience

ledger = Ledger()


@ledger.task(queue="drill", lease_seconds=30)
def send(ctx, n: int) -> None:
    Path(os.environ["LIFECYCLE_STARTED"]).touch()
    go = Path(os.environ["LIFECYCLE_GO"])
    patience = Patience(60)
    while not go.exists() and not patience.expired():
        time.sleep(0.01)


@ledger.task(queue="drill")
def noop(ctx, n: int) -> None:
    pass
