"""The cost of fairness: draining no-op jobs without groups, in 1 group, and in 1,000 groups.

    python -m bench.groups                      # 20,000 jobs per case, SQLite and PostgreSQL
    python -m bench.groups --jobs 2000 --backends sqlite
    python -m bench.groups --baseline main --rounds 3   # old against new, alternately

Each case fills a fresh database with the jobs (enqueue_many, batches of 1,000), then one worker
process (``Ledger.run_worker``, burst mode, 32 threads, claims of up to 500, prefetch 500: the
drain benchmark's settings until 2026-12-06, kept so that rounds compare with earlier ones)
drains them; the figure is jobs per second from the worker's start to its return. A
second figure is the latency of one claim of 10 jobs with 100,000 jobs pending across the
groups (p50 and p95 of 200 claims, each lease released again), which is where the grouped
claim pays for its round: a skip scan of the grouped index, one probe per group.

``--baseline REV`` measures jobledger at a git revision beside the working tree, in one run
(``bench/baseline.py``): every case runs in a process of its own, first on the working tree
and then on REV, case after case and round after round, so both sides see the same machine
within seconds of each other. It prints every round's figures, the ratios new/old, and each
side's grouped figures as a fraction of its own ungrouped ones (in the same round).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

from jobledger import Ledger
from jobledger._records import Lease

from . import baseline
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


def measure(dialect: str, groups: int | None, args: argparse.Namespace) -> dict[str, float]:
    """One case: the best of ``args.rounds`` drains, and the claim latency."""
    rate = max(drain(dialect, args.jobs, groups) for _ in range(args.rounds))
    p50, p95 = claim_latency(dialect, args.pending, groups, args.claims)
    return {"rate": rate, "p50": p50, "p95": p95}


def _in_process(
    dialect: str, groups: int | None, args: argparse.Namespace, pythonpath: str | None
) -> dict[str, float]:
    """``measure`` in a process of its own, with ``pythonpath`` first on its path (a baseline
    revision's ``src``, or None: the working tree)."""
    case = ["--case", dialect, str(groups or 0), "--jobs", str(args.jobs)]
    case += ["--pending", str(args.pending), "--claims", str(args.claims), "--rounds", "1"]
    return baseline.run_case("bench.groups", case, pythonpath)


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def compare(args: argparse.Namespace) -> int:
    """New against ``args.baseline``, alternately, ``args.rounds`` rounds (one drain each)."""
    old = baseline.prepare_or_say(args.baseline)
    if old is None:
        return 2
    sides: tuple[tuple[str, str | None], ...] = (
        ("new", None),
        (f"old ({old.label})", str(old.path)),
    )
    if args.new:
        # The new side pinned to a revision too: the working tree may change during the run.
        new = baseline.prepare(args.new)
        sides = ((f"new ({new.label})", str(new.path)), sides[1])
    dialects = [b for b in args.backends.split(",") if b]
    figures: dict[tuple[int, str, str, str], dict[str, float]] = {}
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    print(f"# started {started}, load average {_load()}", flush=True)
    for r in range(args.rounds):
        for dialect in dialects:
            for label, groups in CASES:
                for side, path in sides:
                    got = _in_process(dialect, groups, args, path)
                    figures[(r, dialect, label, side)] = got
                    print(
                        f"round {r + 1} {dialect:9} {label:13} {side:18} "
                        f"drain {got['rate']:9,.0f} jobs/s   claim p50 {got['p50']:.2f} ms, "
                        f"p95 {got['p95']:.2f} ms   load {_load()}",
                        flush=True,
                    )
    ended = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    print(f"# ended {ended}, load average {_load()}\n")
    names = [side for side, _ in sides]
    print(
        "| backend | case | round | "
        + " | ".join(f"{n} drain jobs/s (× own ungrouped) | {n} claim p50 / p95 ms" for n in names)
        + " | drain new/old | claim p50 new/old |"
    )
    print("|---|---|---|" + "---|---|" * len(names) + "---|---|")
    for dialect in dialects:
        for label, _ in CASES:
            for r in range(args.rounds):
                cells = []
                for n in names:
                    f = figures[(r, dialect, label, n)]
                    own = figures[(r, dialect, CASES[0][0], n)]["rate"]
                    cells.append(f"{f['rate']:,.0f} ({f['rate'] / own:.2f}×)")
                    cells.append(f"{f['p50']:.2f} / {f['p95']:.2f}")
                new, older = (
                    figures[(r, dialect, label, names[0])],
                    figures[(r, dialect, label, names[1])],
                )
                cells.append(f"{new['rate'] / older['rate']:.2f}")
                cells.append(f"{new['p50'] / older['p50']:.2f}")
                print(f"| {dialect} | {label} | {r + 1} | " + " | ".join(cells) + " |")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.groups", description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=20_000, help="jobs drained per case")
    p.add_argument("--pending", type=int, default=100_000, help="jobs pending for claim latency")
    p.add_argument("--claims", type=int, default=200, help="claims timed per case")
    p.add_argument("--backends", default="sqlite,postgres")
    p.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="drains per case (best counts); with --baseline: rounds",
    )
    p.add_argument("--baseline", metavar="REV", help="measure REV beside the working tree")
    p.add_argument(
        "--new", metavar="REV", help="with --baseline: measure REV instead of the working tree"
    )
    p.add_argument("--case", nargs=2, metavar=("BACKEND", "GROUPS"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.case:
        groups = int(args.case[1]) or None
        print(json.dumps(measure(args.case[0], groups, args)))
        return 0
    if args.baseline:
        return compare(args)
    rows = []
    for dialect in [b for b in args.backends.split(",") if b]:
        for label, groups in CASES:
            got = measure(dialect, groups, args)
            rate, p50, p95 = got["rate"], got["p50"], got["p95"]
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
