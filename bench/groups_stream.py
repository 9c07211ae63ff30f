"""A stream of small grouped claims: what a claim costs while jobs trickle into many groups.

    python -m bench.groups_stream                              # 1,000 groups, 3,000 claims
    python -m bench.groups_stream --baseline main --rounds 2   # old against new, alternately

Each run fills a fresh PostgreSQL database with ``--start`` jobs spread at random over
``--groups`` groups (no limits: fair turns only), with autovacuum off on the jobs and groups
tables, then ``--claims`` times enqueues 10 more jobs in random groups, claims 20 and completes
what it got, as a worker keeping up with a steady producer does. Reported: the claim's p50 and
p95 in ms, the first 500 claims left out. The claims are small and most groups have one job or
none, so the walk of the turns, each group's probe and the write of each served group's row
are most of each claim. ``--baseline REV`` measures a revision beside the working tree, run by
run, each in a process of its own (``bench/baseline.py``), new first in odd rounds and old
first in even ones.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import Any

import psycopg

from jobledger import Ledger
from jobledger._records import Lease

from . import baseline
from .harness import fresh_database, percentile

ENQUEUED = 10  # jobs enqueued before each claim
BATCH = 20  # jobs asked for by each claim
WARMUP = 500  # claims left out of the figures


def measure(groups: int, start: int, claims: int) -> dict[str, float]:
    """One run: the claim's p50 and p95 (ms)."""
    rng = random.Random(1)
    with fresh_database("postgres") as dsn:
        ledger = Ledger(dsn)
        ledger.task(
            lambda ctx, n, g: None,
            name="t",
            queue="q",
            group=lambda p: p["g"],  # type: ignore[arg-type,return-value]
        )
        ledger.migrate()
        with psycopg.connect(dsn, autocommit=True) as conn:
            for table in ("jobs", "groups"):
                conn.execute(f"ALTER TABLE jobledger_{table} SET (autovacuum_enabled = false)")
        made = 0

        def produce(n: int) -> None:
            nonlocal made
            items = [
                {
                    "payload": {"n": made + i, "g": f"g{rng.randrange(groups)}"},
                    "key": f"k{made + i}",
                }
                for i in range(n)
            ]
            ledger.enqueue_many("t", items)
            made += n

        produce(start)
        jobs = ledger.backend.jobs
        times = []
        for _ in range(claims):
            produce(ENQUEUED)
            started = time.perf_counter()
            got = jobs.claim(["q"], "w", BATCH)
            times.append((time.perf_counter() - started) * 1000)
            jobs.complete([Lease(j.id, j.lease_token, j.attempt) for j in got])
        ledger.close()
    kept = times[WARMUP:] or times
    p95 = percentile(kept, 95)
    return {"p50": statistics.median(kept), "p95": p95 if p95 is not None else float("nan")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.groups_stream", description=__doc__.split("\n")[0]
    )
    p.add_argument("--groups", type=int, default=1000, help="groups the jobs go to")
    p.add_argument("--start", type=int, default=2000, help="jobs enqueued before the claims")
    p.add_argument("--claims", type=int, default=3000, help="claims per run")
    p.add_argument("--rounds", type=int, default=1, help="runs per side")
    p.add_argument("--baseline", metavar="REV", help="measure REV beside the working tree")
    p.add_argument("--case", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.case:
        print(json.dumps(measure(args.groups, args.start, args.claims)))
        return 0
    sides: list[tuple[str, str | None]] = [("new", None)]
    if args.baseline:
        old = baseline.prepare_or_say(args.baseline)
        if old is None:
            return 2
        sides.append((f"old ({old.label})", str(old.path)))
    case = ["--case", "--groups", str(args.groups), "--start", str(args.start)]
    case += ["--claims", str(args.claims)]
    print(baseline.stamp("started"))
    print("| round | side | claim p50 ms | claim p95 ms |")
    print("|---|---|---|---|")
    for r in range(max(1, args.rounds)):
        for side, path in sides if r % 2 == 0 else sides[::-1]:
            got: dict[str, Any] = baseline.run_case("bench.groups_stream", case, path)
            print(f"| {r + 1} | {side} | {got['p50']:.2f} | {got['p95']:.2f} |", flush=True)
    print(baseline.stamp("ended"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
