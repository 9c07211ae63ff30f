"""The Procrastinate adapter (runs in the peers' virtualenv).

Settings: ``PsycopgConnector`` (psycopg 3 pool), an async task, worker ``concurrency=50`` with
LISTEN/NOTIFY (``listen_notify=True``, its default); finished jobs are kept (``delete_jobs``
left at "never"), as jobledger keeps them. Bulk enqueue: ``batch_defer_async``.
"""

from __future__ import annotations

import asyncio
import sys
import time

import procrastinate

from .common import Run, emit, fan_out, paced, parser, rate

CONCURRENCY = 50
run: Run | None = None


def make_app(dsn: str) -> procrastinate.App:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="noop", queue="bench")
    async def noop(n: int = 0, t: float | None = None) -> None:
        if run is not None:
            run.started(t)

    return app


async def main() -> None:
    global run
    args = parser("procrastinate").parse_args()
    if args.command == "work" and fan_out(__spec__.name, args.processes):
        return
    app = make_app(args.dsn)
    noop = app.tasks["noop"]
    async with app.open_async():
        if args.command == "setup":
            await app.schema_manager.apply_schema_async()
            emit({})
        elif args.command == "info":
            emit(
                {
                    "name": "procrastinate",
                    "remaining_sql": "SELECT count(*) FROM procrastinate_jobs "
                    "WHERE status IN ('todo', 'doing')",
                    # Whether any job is left, for the harness's poll during a drain: the first
                    # entry of its index of jobs to do or being done.
                    "left_sql": "SELECT count(*) FROM (SELECT 1 FROM procrastinate_jobs "
                    "WHERE status IN ('todo', 'doing') ORDER BY id, lock LIMIT 1) AS x",
                }
            )
        elif args.command == "enqueue":
            started = time.perf_counter()
            for i in range(args.single):
                await noop.defer_async(n=i)
            single = time.perf_counter() - started
            started = time.perf_counter()
            await _fill(noop, args.bulk, args.batch)
            bulk = time.perf_counter() - started
            emit({"single": rate(args.single, single), "bulk": rate(args.bulk, bulk)})
        elif args.command == "fill":
            started = time.perf_counter()
            await _fill(noop, args.n, args.batch)
            emit({"seconds": time.perf_counter() - started})
        elif args.command == "produce":
            sent = 0
            for n in paced(args.rate, args.seconds, args.chunk):
                t = time.time()
                if n == 1:
                    await noop.defer_async(n=sent, t=t)
                else:
                    await noop.batch_defer_async(*({"n": i, "t": t} for i in range(sent, sent + n)))
                sent += n
            emit({"enqueued": sent})
        elif args.command == "work":
            run = Run(args.rundir)
            await asyncio.get_running_loop().run_in_executor(None, run.ready_and_wait)
            await app.run_worker_async(queues=["bench"], concurrency=CONCURRENCY, wait=True)
            run.save()


async def _fill(task, n: int, batch: int) -> None:  # type: ignore[no-untyped-def]
    for start in range(0, n, batch):
        await task.batch_defer_async(*({"n": i} for i in range(start, min(n, start + batch))))


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
