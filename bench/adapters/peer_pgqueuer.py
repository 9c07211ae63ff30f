"""The PgQueuer adapter (runs in the peers' virtualenv).

Settings: asyncpg driver on one connection per process (its documented fast path), an
entrypoint without a concurrency limit, ``QueueManager.run(batch_size=100)``, tables as
installed (logged: the same durability as jobledger's). Bulk enqueue: one ``enqueue`` call
with lists; single: one call per job.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import asyncpg
from pgqueuer.db import AsyncpgDriver
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries

from .common import Run, emit, fan_out, paced, parser, rate

BATCH_SIZE = 100
#: Whether any job is left (0: none), for the harness's poll during a drain: the first entry of
#: its index of queued jobs and of picked ones (a finished job's row is deleted).
LEFT_SQL = (
    "SELECT (SELECT count(*) FROM (SELECT 1 FROM pgqueuer WHERE status = 'queued'"
    " ORDER BY entrypoint, priority DESC, id LIMIT 1) AS q)"
    " + (SELECT count(*) FROM (SELECT 1 FROM pgqueuer WHERE status = 'picked'"
    " ORDER BY heartbeat LIMIT 1) AS p)"
)


async def main() -> None:
    args = parser("pgqueuer").parse_args()
    if args.command == "work" and fan_out(__spec__.name, args.processes):
        return
    conn = await asyncpg.connect(args.dsn)
    queries = Queries(AsyncpgDriver(conn))
    if args.command == "setup":
        await queries.install()
        emit({})
    elif args.command == "info":
        emit(
            {
                "name": "pgqueuer",
                "remaining_sql": "SELECT count(*) FROM pgqueuer",
                "left_sql": LEFT_SQL,
            }
        )
    elif args.command == "enqueue":
        started = time.perf_counter()
        for i in range(args.single):
            await queries.enqueue("noop", json.dumps({"n": i}).encode())
        single = time.perf_counter() - started
        started = time.perf_counter()
        await _fill(queries, args.bulk, args.batch)
        bulk = time.perf_counter() - started
        emit({"single": rate(args.single, single), "bulk": rate(args.bulk, bulk)})
    elif args.command == "fill":
        started = time.perf_counter()
        await _fill(queries, args.n, args.batch)
        emit({"seconds": time.perf_counter() - started})
    elif args.command == "produce":
        sent = 0
        for n in paced(args.rate, args.seconds, args.chunk):
            t = time.time()
            payloads = [json.dumps({"n": i, "t": t}).encode() for i in range(sent, sent + n)]
            if n == 1:
                await queries.enqueue("noop", payloads[0])
            else:
                await queries.enqueue(["noop"] * n, payloads, [0] * n)
            sent += n
            await asyncio.sleep(0)
        emit({"enqueued": sent})
    elif args.command == "work":
        await _work(conn, queries, Run(args.rundir))
    await conn.close()


async def _fill(queries: Queries, n: int, batch: int) -> None:
    for start in range(0, n, batch):
        count = min(n, start + batch) - start
        await queries.enqueue(
            ["noop"] * count,
            [json.dumps({"n": i}).encode() for i in range(start, start + count)],
            [0] * count,
        )


async def _work(conn: asyncpg.Connection, queries: Queries, run: Run) -> None:
    if os.environ.get("BENCH_TIME_CLAIMS"):
        queries.dequeue = _timed(run, queries.dequeue)  # type: ignore[method-assign]
    qm = QueueManager(queries)

    @qm.entrypoint("noop")
    async def noop(job) -> None:  # type: ignore[no-untyped-def]
        run.started(json.loads(job.payload).get("t") if job.payload else None)

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, qm.shutdown.set)
    await loop.run_in_executor(None, run.ready_and_wait)
    await qm.run(batch_size=BATCH_SIZE)
    run.save()


def _timed(run: Run, dequeue):  # type: ignore[no-untyped-def]
    """``dequeue`` (a coroutine function), timing every call: the claim's own time."""

    async def timed(*args, **kwargs):  # type: ignore[no-untyped-def]
        at, started = time.time(), time.perf_counter()
        jobs = await dequeue(*args, **kwargs)
        run.claims.append((at, time.perf_counter() - started, len(jobs)))
        return jobs

    return timed


if __name__ == "__main__":
    asyncio.run(main())
