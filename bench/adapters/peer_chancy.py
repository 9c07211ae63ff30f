"""The Chancy adapter (runs in the peers' virtualenv).

Settings: one queue with ``concurrency=100`` and the ``AsyncExecutor`` (async jobs on the
worker's event loop, its fastest executor for I/O-free work), notifications on (LISTEN/NOTIFY),
``polling_interval=0`` (see below). Bulk enqueue: ``push_many`` (one transaction per batch); single: ``push``.
"""

from __future__ import annotations

import asyncio
import signal
import time

from chancy import Chancy, Queue, Worker, job

from .common import Run, emit, fan_out, paced, parser, rate

CONCURRENCY = 100
#: Chancy fetches once per polling interval unless a NOTIFY wakes it; completions do not.
#: 0 makes it fetch again as soon as it has room (its drain is capped at
#: concurrency / interval otherwise).
POLLING_INTERVAL = 0
run: Run | None = None


@job(queue="bench")
async def noop(n: int = 0, t: float | None = None) -> None:
    if run is not None:
        run.started(t)


def _job(**kwargs):  # type: ignore[no-untyped-def]
    return noop.job.with_kwargs(**kwargs)


async def main() -> None:
    global run
    args = parser("chancy").parse_args()
    if args.command == "work" and fan_out(__spec__.name, args.processes):
        return
    async with Chancy(args.dsn) as chancy:
        if args.command == "setup":
            await chancy.migrate()
            await chancy.declare(
                Queue(
                    "bench",
                    concurrency=CONCURRENCY,
                    executor="chancy.executors.asyncex.AsyncExecutor",
                    polling_interval=POLLING_INTERVAL,
                ),
                upsert=True,
            )
            emit({})
        elif args.command == "info":
            emit(
                {
                    "name": "chancy",
                    "remaining_sql": "SELECT count(*) FROM chancy_jobs "
                    "WHERE state IN ('pending', 'running', 'retrying')",
                    # Whether any job is left, for the harness's poll during a drain: the first
                    # entry of each state in its index by queue and state.
                    "left_sql": "SELECT "
                    + " + ".join(
                        "(SELECT count(*) FROM (SELECT 1 FROM chancy_jobs WHERE queue = 'bench'"
                        f" AND state = '{state}' LIMIT 1) AS {state})"
                        for state in ("pending", "running", "retrying")
                    ),
                }
            )
        elif args.command == "enqueue":
            started = time.perf_counter()
            for i in range(args.single):
                await chancy.push(_job(n=i))
            single = time.perf_counter() - started
            started = time.perf_counter()
            await _fill(chancy, args.bulk, args.batch)
            bulk = time.perf_counter() - started
            emit({"single": rate(args.single, single), "bulk": rate(args.bulk, bulk)})
        elif args.command == "fill":
            started = time.perf_counter()
            await _fill(chancy, args.n, args.batch)
            emit({"seconds": time.perf_counter() - started})
        elif args.command == "produce":
            sent = 0
            for n in paced(args.rate, args.seconds, args.chunk):
                t = time.time()
                if n == 1:
                    await chancy.push(_job(n=sent, t=t))
                else:
                    await _push_many(chancy, [_job(n=i, t=t) for i in range(sent, sent + n)])
                sent += n
            emit({"enqueued": sent})
        elif args.command == "work":
            run = Run(args.rundir)
            await asyncio.get_running_loop().run_in_executor(None, run.ready_and_wait)
            async with Worker(chancy, register_signal_handlers=False) as worker:
                stop = asyncio.Event()
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(sig, stop.set)
                await stop.wait()
                await worker.stop()
            run.save()


async def _fill(chancy: Chancy, n: int, batch: int) -> None:
    for start in range(0, n, batch):
        await _push_many(chancy, [_job(n=i) for i in range(start, min(n, start + batch))])


async def _push_many(chancy: Chancy, jobs: list) -> None:  # type: ignore[type-arg]
    async for _ in chancy.push_many(jobs, batch_size=len(jobs)):
        pass


if __name__ == "__main__":
    asyncio.run(main())
