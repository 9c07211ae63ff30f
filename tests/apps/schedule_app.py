"""The application the scheduling tests run in scheduler and worker processes.

One weekly fan-out schedule: every Monday 06:00 Europe/Berlin, one ``send_digest`` job per
customer, keyed ``<customer>:<ISO week>``, catching up every missed tick.

Environment: JOBLEDGER_URL; SCHEDULE_CUSTOMERS (default 50) and SCHEDULE_BATCH (default 25);
SCHEDULE_LEASE_SECONDS and SCHEDULE_POLL_SECONDS (real seconds). With SIM_SPEED, SIM_T0 (ISO
time) and SIM_EPOCH (Unix time), the schedulers run on a simulated clock that starts at SIM_T0
at the real moment SIM_EPOCH and runs SIM_SPEED times faster than real time; every process of a
test computes the same simulated time, and lease and poll are scaled to it.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta

from jobledger import Ledger

CRON = "0 6 * * MON"
ZONE = "Europe/Berlin"


def declare(ledger: Ledger, customers: int, batch: int) -> None:
    """The weekly digest, fanned out to ``customers`` customers."""

    @ledger.schedule(
        CRON,
        tz=ZONE,
        name="weekly-digest",
        for_each=lambda tick: range(customers),
        key="{entity}:{week}",
        payload=lambda tick, customer: {"customer_id": customer, "week": tick.week},
        catch_up="all",
        max_catch_up=1000,
        batch_size=batch,
    )
    @ledger.task(queue="digests", lease_seconds=5)
    def send_digest(ctx, customer_id: int, week: str) -> None:
        """Nothing: the tests count jobs, not e-mails."""


def sim_clock(t0: datetime, epoch: float, speed: float):
    def clock() -> datetime:
        return t0 + timedelta(seconds=(time.time() - epoch) * speed)

    return clock


ledger = Ledger()
declare(
    ledger,
    int(os.environ.get("SCHEDULE_CUSTOMERS", "50")),
    int(os.environ.get("SCHEDULE_BATCH", "25")),
)

_lease = float(os.environ.get("SCHEDULE_LEASE_SECONDS", "30"))
_poll = float(os.environ.get("SCHEDULE_POLL_SECONDS", "1"))
if os.environ.get("SIM_SPEED"):
    _speed = float(os.environ["SIM_SPEED"])
    ledger.schedules.clock = sim_clock(
        datetime.fromisoformat(os.environ["SIM_T0"]), float(os.environ["SIM_EPOCH"]), _speed
    )
    ledger.schedules.lease_seconds = _lease * _speed
else:
    ledger.schedules.lease_seconds = _lease
ledger.schedules.poll_interval = _poll
