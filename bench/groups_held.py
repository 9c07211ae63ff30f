"""The grouped claim under a held xmin: claims of 10 while a transaction holds back vacuum.

    python -m bench.groups_held                         # 1 and 1,000 groups, 30,000 jobs claimed
    python -m bench.groups_held --baseline main --rounds 2   # old against new, alternately

Each case fills a fresh PostgreSQL database with ``--jobs`` jobs spread over its groups (no
limits: fair turns only), then one session opens a transaction, takes a transaction id and
stays idle in it, and the case claims 10 jobs at a time and completes them until ``--claimed``
jobs are done. Each serve of a group writes its turn, and each claimed job its row: under the
held xmin every old version stays, and so does its index entry. Reported: the claim's p50
over the first and over the last 100 claims, and its p50 over 100 claims once the transaction
has ended and a ``VACUUM`` has run. ``--baseline REV`` measures a revision beside the working
tree, case by case, each in a process of its own (``bench/baseline.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import psycopg

from jobledger import Ledger
from jobledger._records import Lease

from . import baseline
from .harness import fresh_database

CASES = (("1 group", 1), ("1,000 groups", 1000))
BATCH = 10
WINDOW = 100  # claims per p50


def measure(groups: int, jobs: int, claimed: int) -> dict[str, float]:
    """One case: the claim's p50 (ms) at the start and the end of the hold, and after it."""
    with fresh_database("postgres") as dsn:
        ledger = Ledger(dsn)
        ledger.task(
            lambda ctx, n, g: None,
            name="t",
            queue="q",
            group=lambda p: p["g"],  # type: ignore[arg-type,return-value]
        )
        for first in range(0, jobs, 1000):
            ledger.enqueue_many(
                "t",
                [
                    {"payload": {"n": i, "g": f"g{i % groups}"}, "key": f"k{i}"}
                    for i in range(first, min(jobs, first + 1000))
                ],
            )
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
        backend = ledger.backend

        def claims(n: int) -> list[float]:
            times = []
            for _ in range(n):
                started = time.perf_counter()
                got = backend.jobs.claim(["q"], "w", BATCH)
                times.append((time.perf_counter() - started) * 1000)
                backend.jobs.complete([Lease(j.id, j.lease_token, j.attempt) for j in got])
            return times

        holder = psycopg.connect(dsn)
        try:
            holder.execute("SELECT txid_current()")  # idle in transaction with an XID
            held = claims(claimed // BATCH)
        finally:
            holder.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("VACUUM")
        after = claims(WINDOW)
        ledger.close()
    window = min(WINDOW, max(1, len(held) // 2))
    return {
        "first": statistics.median(held[:window]),
        "last": statistics.median(held[-window:]),
        "after": statistics.median(after),
    }


def _in_process(groups: int, args: argparse.Namespace, pythonpath: str | None) -> dict[str, Any]:
    case = ["--case", str(groups), "--jobs", str(args.jobs), "--claimed", str(args.claimed)]
    return baseline.run_case("bench.groups_held", case, pythonpath)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.groups_held", description=__doc__.split("\n")[0]
    )
    p.add_argument("--jobs", type=int, default=60_000, help="jobs enqueued per case")
    p.add_argument("--claimed", type=int, default=30_000, help="jobs claimed under the hold")
    p.add_argument("--rounds", type=int, default=1, help="with --baseline: rounds")
    p.add_argument("--baseline", metavar="REV", help="measure REV beside the working tree")
    p.add_argument("--case", type=int, metavar="GROUPS", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.case:
        print(json.dumps(measure(args.case, args.jobs, args.claimed)))
        return 0
    sides: list[tuple[str, str | None]] = [("new", None)]
    if args.baseline:
        old = baseline.prepare_or_say(args.baseline)
        if old is None:
            return 2
        sides.append((f"old ({old.label})", str(old.path)))
    print(baseline.stamp("started"))
    print(
        f"| case | round | side | claim p50 ms: first {WINDOW} held | last {WINDOW} held | after |"
    )
    print("|---|---|---|---|---|---|")
    for r in range(max(1, args.rounds)):
        for label, groups in CASES:
            for side, path in sides:
                got = _in_process(groups, args, path)
                print(
                    f"| {label} | {r + 1} | {side} | {got['first']:.2f} | {got['last']:.2f} | "
                    f"{got['after']:.2f} |",
                    flush=True,
                )
    print(baseline.stamp("ended"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
