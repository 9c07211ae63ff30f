"""The jobledger adapter: the same subcommands as the other queues' adapters.

Workers are ``jobledger worker bench.adapters.ours_app:ledger --processes N``, with the
settings in ``WORKER_OPTIONS`` (the fastest we found for no-op jobs; see docs/benchmarks.md).

It uses only the public API (``Ledger``, ``migrate``, ``enqueue``, ``enqueue_many``, the
``jobledger worker`` command), so that it runs unchanged on jobledger at another revision
(``python -m bench --baseline REV``).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from jobledger import Ledger

from .common import emit, paced, parser, rate, timed

QUEUE = "bench"

#: Worker settings per dialect: threads, jobs per claim, claimed jobs that may wait for a thread.
#: Claims of the most a worker takes (1,000) with as many prefetched: swept against 500 / 500 on
#: 2026-12-06 (docs/benchmarks.md), the drain's medians over 17 alternating pairs 1.14× (one
#: process) and 1.09× (two) on PostgreSQL, 1.13× on SQLite (one process, 8 pairs).
WORKER_OPTIONS = {
    "postgres": ["--concurrency", "32", "--batch-size", "1000", "--prefetch", "1000"],
    "sqlite": ["--concurrency", "32", "--batch-size", "1000", "--prefetch", "1000"],
}
#: Whether any job is left (0: none), for the harness's poll every 5 ms during a drain: the
#: first entry of each index of pending or leased jobs (ordered as the index is, so that it is
#: read and not the table, on either database), instead of a count over a table that keeps the
#: finished jobs.
LEFT_SQL = "SELECT " + " + ".join(
    f"(SELECT count(*) FROM (SELECT 1 FROM jobledger_jobs WHERE {where} ORDER BY {order} LIMIT 1)"
    f" AS {name})"
    for name, where, order in (
        ("due", "state = 'pending' AND group_name IS NULL", "queue, priority DESC, run_at, id"),
        (
            "grouped",
            "state = 'pending' AND group_name IS NOT NULL",
            "queue, group_name, priority DESC, run_at, id",
        ),
        ("leased", "state = 'leased' AND lease_until IS NOT NULL", "lease_until"),
    )
)

#: SQLite has no LISTEN/NOTIFY: an idle worker polls this often (seconds).
SQLITE_POLL = "0.01"


def _ledger(dsn: str) -> Ledger:
    from .ours_app import ledger

    ledger.use_url(dsn)
    return ledger


def main() -> None:
    args = parser("ours").parse_args()
    if args.command == "setup":
        _ledger(args.dsn).migrate()
        emit({})
    elif args.command == "info":
        import jobledger

        emit(
            {
                "name": "jobledger",
                "source": os.path.dirname(jobledger.__file__),
                "remaining_sql": "SELECT count(*) FROM jobledger_jobs "
                "WHERE state IN ('pending', 'leased')",
                "left_sql": LEFT_SQL,
                # The harness runs "setup" (migrate) first: no revision has to create its
                # tables on first use.
                "self_setup": False,
            }
        )
    elif args.command == "enqueue":
        ledger = _ledger(args.dsn)
        ledger.migrate()  # opens the database (and finds it migrated) before the clock starts
        single = timed(
            lambda: [ledger.enqueue("noop", {"n": i}, key=f"s{i}") for i in range(args.single)]
        )
        bulk = timed(lambda: _fill(ledger, args.bulk, args.batch, prefix="b"))
        emit(
            {"single": rate(args.single, single), "bulk": rate(args.bulk, bulk)}
            | _enqueue_async(ledger, args.single, args.bulk, args.batch)
        )
    elif args.command == "fill":
        ledger = _ledger(args.dsn)
        task = "anoop" if args.async_handlers else "noop"
        seconds = timed(lambda: _fill(ledger, args.n, args.batch, prefix="f", task=task))
        emit({"seconds": seconds})
    elif args.command == "produce":
        ledger = _ledger(args.dsn)
        ledger.migrate()  # opens the database before the clock starts
        sent = 0
        groups = args.groups
        task = "gnoop" if groups else "noop"

        def payload(i: int, t: float) -> dict[str, Any]:
            return {"n": i, "t": t, "g": f"g{i % groups}"} if groups else {"n": i, "t": t}

        for n in paced(args.rate, args.seconds, args.chunk):
            t = time.time()
            if args.chunk == 1:
                ledger.enqueue(task, payload(sent, t), key=f"p{sent}")
            else:
                ledger.enqueue_many(
                    task,
                    [{"payload": payload(i, t), "key": f"p{i}"} for i in range(sent, sent + n)],
                )
            sent += n
        emit({"enqueued": sent})
    elif args.command == "work":
        _work(args)


#: Enqueues in flight at once in the "concurrent" async figure (an app's requests).
ASYNC_CONCURRENCY = 100


def _enqueue_async(ledger: Ledger, single: int, bulk: int, batch: int) -> dict[str, float]:
    """The same enqueues through ``AsyncLedger`` (absent at revisions without it): one by one,
    awaited in turn; ``ASYNC_CONCURRENCY`` at a time (``gather``); in batches."""
    try:
        from jobledger import AsyncLedger
    except ImportError:
        return {}
    import asyncio

    async def main() -> dict[str, float]:
        async with AsyncLedger.of(ledger) as aledger:
            await aledger.open()  # connections opened before the clock starts
            start = time.perf_counter()
            for i in range(single):
                await aledger.enqueue("noop", {"n": i}, key=f"as{i}")
            one = time.perf_counter() - start
            start = time.perf_counter()
            for first in range(0, single, ASYNC_CONCURRENCY):
                await asyncio.gather(
                    *(
                        aledger.enqueue("noop", {"n": i}, key=f"ac{i}")
                        for i in range(first, min(single, first + ASYNC_CONCURRENCY))
                    )
                )
            concurrent = time.perf_counter() - start
            start = time.perf_counter()
            for first in range(0, bulk, batch):
                await aledger.enqueue_many(
                    "noop",
                    [
                        {"payload": {"n": i}, "key": f"ab{i}"}
                        for i in range(first, min(bulk, first + batch))
                    ],
                )
            many = time.perf_counter() - start
        return {
            "async_single": rate(single, one),
            "async_concurrent": rate(single, concurrent),
            "async_bulk": rate(bulk, many),
        }

    return asyncio.run(main())


def _fill(ledger: Ledger, n: int, batch: int, prefix: str, task: str = "noop") -> None:
    for start in range(0, n, batch):
        ledger.enqueue_many(
            task,
            [
                {"payload": {"n": i}, "key": f"{prefix}{i}"}
                for i in range(start, min(n, start + batch))
            ],
        )


def _work(args) -> None:  # type: ignore[no-untyped-def]
    dialect = "sqlite" if args.dsn.startswith("sqlite") else "postgres"
    command = [
        sys.executable,
        "-m",
        "jobledger",
        "worker",
        "bench.adapters.ours_app:ledger",
        "--url",
        args.dsn,
        "--processes",
        str(args.processes),
        "--log-level",
        "warning",
        "--grace",
        "5",
        # The drain of async handlers works the async task's queue alone (``ours_app``).
        "--queues",
        "bench-async" if os.environ.get("BENCH_ASYNC_HANDLERS") else QUEUE,
        # A sweep of the settings gives its own (``BENCH_WORKER_OPTIONS="--concurrency 8 ..."``).
        *(os.environ.get("BENCH_WORKER_OPTIONS") or " ".join(WORKER_OPTIONS[dialect])).split(),
    ]
    if dialect == "sqlite":
        command += ["--poll-interval", SQLITE_POLL]
    # Become the worker command (no extra process between the harness and the workers).
    os.execve(sys.executable, command, dict(os.environ, BENCH_RUNDIR=args.rundir))


if __name__ == "__main__":
    main()
