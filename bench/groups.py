"""The cost of fairness: draining no-op jobs without groups, in 1 group, and in 1,000 groups.

    python -m bench.groups                      # 20,000 jobs per case, SQLite and PostgreSQL
    python -m bench.groups --jobs 2000 --backends sqlite

Each case fills a fresh database with the jobs (enqueue_many, batches of 1,000), then one worker
process (``Ledger.run_worker``, burst mode, the drain benchmark's settings: 32 threads, claims of
up to 500) drains them; the figure is jobs per second from the worker's start to its return. A
second figure is the latency of one claim of 10 jobs with 100,000 jobs pending across the
groups (p50 and p95 of 200 claims, each lease released again), which is where the grouped
claim pays for its round: a skip scan of the grouped index, one probe per group.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from jobledger import Ledger
from jobledger._records import Lease

from .harness import fresh_database, percentile

CASES = (("no group", None), ("1 group", 1), ("1,000 groups", 1000))


def _ledger(dsn: str) -> Ledger:
    ledger = Ledger(dsn)
    ledger.migrate()

    def noop(ctx: Any, n: int, g: str | None = None) -> None:
        pass

    ledger.task(
        noop,
        name="noop",
        queue="bench",
        lease_seconds=60,
        max_attempts=3,
        group=lambda p: p["g"] if p.get("g") is not None else None,  # type: ignore[arg-type,return-value]
    )
    return ledger


def _fill(ledger: Ledger, jobs: int, groups: int | None, prefix: str = "j") -> None:
    for start in range(0, jobs, 1000):
        batch = [
            {
                "payload": {"n": i, "g": None if groups is None else f"g{i % groups}"},
                "key": f"{prefix}{i}",
            }
            for i in range(start, min(jobs, start + 1000))
        ]
        if groups is None:
            for item in batch:
                del item["payload"]["g"]
        ledger.enqueue_many("noop", batch)


def drain(dialect: str, jobs: int, groups: int | None) -> float:
    with fresh_database(dialect) as dsn:
        ledger = _ledger(dsn)
        _fill(ledger, jobs, groups)
        started = time.perf_counter()
        stats = ledger.run_worker(
            queues=["bench"], concurrency=32, batch_size=500, prefetch=500, burst=True
        )
        seconds = time.perf_counter() - started
        done = getattr(stats, "completed", jobs)
        ledger.close()
    return done / seconds


def claim_latency(
    dialect: str, pending: int, groups: int | None, claims: int
) -> tuple[float, float]:
    with fresh_database(dialect) as dsn:
        ledger = _ledger(dsn)
        _fill(ledger, pending, groups)
        backend = ledger.backend
        times = []
        for _ in range(claims):
            t = time.perf_counter()
            got = backend.jobs.claim(["bench"], "bench", 10)
            times.append((time.perf_counter() - t) * 1000)
            backend.jobs.release([Lease(j.id, j.lease_token, j.attempt) for j in got])
        ledger.close()
    p95 = percentile(times, 95)
    return statistics.median(times), p95 if p95 is not None else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.groups", description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=20_000, help="jobs drained per case")
    p.add_argument("--pending", type=int, default=100_000, help="jobs pending for claim latency")
    p.add_argument("--claims", type=int, default=200, help="claims timed per case")
    p.add_argument("--backends", default="sqlite,postgres")
    p.add_argument("--rounds", type=int, default=2, help="drains per case (best counts)")
    args = p.parse_args(argv)
    rows = []
    for dialect in [b for b in args.backends.split(",") if b]:
        for label, groups in CASES:
            rate = max(drain(dialect, args.jobs, groups) for _ in range(args.rounds))
            p50, p95 = claim_latency(dialect, args.pending, groups, args.claims)
            rows.append((dialect, label, rate, p50, p95))
            print(
                f"{dialect:9} {label:13} drain {rate:9,.0f} jobs/s   "
                f"claim of 10 at {args.pending:,} pending: p50 {p50:.2f} ms, p95 {p95:.2f} ms",
                file=sys.stderr,
                flush=True,
            )
    print()
    print(f"| backend | case | drain, jobs/s | claim p50 / p95, ms ({args.pending:,} pending) |")
    print("|---|---|---|---|")
    for dialect, label, rate, p50, p95 in rows:
        print(f"| {dialect} | {label} | {rate:,.0f} | {p50:.2f} / {p95:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
