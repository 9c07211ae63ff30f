"""The application ``jobledger worker`` runs in the benchmark: a no-op task (and its twins in a
group and as a coroutine).

Each worker process says it is ready, waits for the start barrier (a worker service, so the
fetch loop starts with the barrier), and writes the enqueue→start latency of the jobs that
carry their enqueue time when it stops. ``BENCH_RUNDIR`` names the run's directory.

Only the public API, so that the same app runs on jobledger at another revision
(``--baseline``): a revision whose Ledger has no ``worker_services`` waits at the barrier when
this module is imported (before its worker starts) and saves its latencies at exit.
"""

from __future__ import annotations

import atexit
import os

from jobledger import Ledger

from .common import Run

ledger = Ledger()
run = Run(os.environ.get("BENCH_RUNDIR", "."))


@ledger.task(queue="bench", lease_seconds=60, max_attempts=3)
def noop(ctx, n: int = 0, t: float | None = None) -> None:
    """Nothing, but note when it started."""
    run.started(t)


@ledger.task(queue="bench", lease_seconds=60, max_attempts=3, group=lambda p: p.get("g"))
def gnoop(ctx, n: int = 0, t: float | None = None, g: str | None = None) -> None:
    """``noop`` in a group: the producer of ``python -m bench.pressure --groups N`` spreads its
    jobs over N groups (fair turns, no limits)."""
    run.started(t)


@ledger.task(queue="bench-async", lease_seconds=60, max_attempts=3)
async def anoop(ctx, n: int = 0, t: float | None = None) -> None:
    """``noop`` as a coroutine: the drain of async handlers (run on the worker's event loop).
    A queue of its own: a worker of only async tasks runs them as tasks of its loop, one with
    both kinds through runner threads (docs/concepts.md)."""
    run.started(t)


class _Barrier:
    def __init__(self, worker: object):
        pass

    def start(self) -> None:
        if os.environ.get("BENCH_TIME_CLAIMS"):
            # The claim's own time, from call to rows (the pressure bench reports it).
            jobs = ledger.backend.jobs
            jobs.claim = run.timed_claims(jobs.claim)  # type: ignore[method-assign]
        run.ready_and_wait()

    def stop(self) -> None:
        run.save()


if os.environ.get("BENCH_RUNDIR"):
    services = getattr(ledger, "worker_services", None)
    if services is not None:
        services.append(_Barrier)
    else:
        run.ready_and_wait()
        atexit.register(run.save)
