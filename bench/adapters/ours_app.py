"""The application ``jobledger worker`` runs in the benchmark: one no-op task.

Each worker process says it is ready, waits for the start barrier (a worker service, so the
fetch loop starts with the barrier), and writes the enqueue→start latency of the jobs that
carry their enqueue time when it stops. ``BENCH_RUNDIR`` names the run's directory.
"""

from __future__ import annotations

import os

from jobledger import Ledger

from .common import Run

ledger = Ledger()
run = Run(os.environ.get("BENCH_RUNDIR", "."))


@ledger.task(queue="bench", lease_seconds=60, max_attempts=3)
def noop(ctx, n: int = 0, t: float | None = None) -> None:
    """Nothing, but note when it started."""
    run.started(t)


class _Barrier:
    def __init__(self, worker: object):
        pass

    def start(self) -> None:
        run.ready_and_wait()

    def stop(self) -> None:
        run.save()


if os.environ.get("BENCH_RUNDIR"):
    ledger.worker_services.append(_Barrier)
