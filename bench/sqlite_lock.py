"""Where a SQLite drain's time goes: the write lock, who holds it, and each thread's CPU.

    python -m bench.sqlite_lock                 # 60,000 jobs, 3 rounds
    python -m bench.sqlite_lock --jobs 2000 --rounds 1

SQLite has one writer: a worker's claims (its fetch loop) and its completions (its completer)
take turns at the database's write lock, so a drain runs at most as fast as the time those two
hold it allows. Each round fills a fresh database with no-op jobs, then drains them with one
worker in this process (32 threads, claims of up to 500, prefetch 500: the drain benchmark's
settings until 2026-12-06, kept here so that its rounds compare with the earlier ones) and
reports:

- jobs per second, from the first claim to the last outcome written;
- the share of the drain the write lock was held, and the time under it per job, by the claims
  and by the completions; the share each of the two threads spent waiting for it;
- each thread's CPU per job (the fetch loop, the completer, the runners together) and the
  process's;
- the same claims and completions made by one thread with nothing else running (claims of 500,
  each batch completed at once): what the two cost under the lock when nobody shares the GIL.

A diagnostic for the SQLite drain (docs/benchmarks.md): it wraps the database's write lock
(``SqliteDatabase._writer``), a private attribute, to time its holders. Linux (per-thread CPU
clocks).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobledger import Ledger
from jobledger._records import Lease

WORKER_SETTINGS = {"concurrency": 32, "batch_size": 500, "prefetch": 500}
ROLES = {"jobledger-worker": "fetch loop", "jobledger-completer": "completer"}


class TimedLock:
    """A ``threading.Lock`` that adds up, per thread name, the time spent waiting for it and
    holding it (while ``on`` is set)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since = 0.0
        self.on = False
        self.waited: dict[str, float] = defaultdict(float)
        self.held: dict[str, float] = defaultdict(float)

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        asked = time.perf_counter()
        got = self._lock.acquire(blocking, timeout)
        self._since = time.perf_counter()
        if self.on:
            self.waited[threading.current_thread().name] += self._since - asked
        return got

    def release(self) -> None:
        if self.on:
            self.held[threading.current_thread().name] += time.perf_counter() - self._since
        self._lock.release()

    __enter__ = acquire

    def __exit__(self, *exc: object) -> None:
        self.release()


def _ledger(path: Path, jobs: int) -> Ledger:
    ledger = Ledger(f"sqlite:///{path}")
    ledger.migrate()

    def noop(ctx: Any, n: int = 0) -> None:
        pass

    ledger.task(noop, name="noop", queue="bench", lease_seconds=60, max_attempts=3)
    for start in range(0, jobs, 1000):
        ledger.enqueue_many(
            "noop",
            [{"payload": {"n": i}, "key": f"j{i}"} for i in range(start, min(jobs, start + 1000))],
        )
    return ledger


def _thread_cpu(threads: list[threading.Thread]) -> dict[str, float]:
    """CPU seconds of the worker's live threads so far (each its own clock), by role."""
    cpu: dict[str, float] = defaultdict(float)
    for t in threads:
        if t.ident is None or not t.is_alive():
            continue
        try:
            seconds = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        except OSError:  # the thread ended meanwhile
            continue
        role = "runners" if t.name.startswith("jobledger-runner") else ROLES.get(t.name)
        if role is not None:
            cpu[role] += seconds
    return cpu


def drain(jobs: int) -> dict[str, Any]:
    """One worker drains ``jobs`` no-op jobs; the write lock and the threads timed."""
    with tempfile.TemporaryDirectory() as tmp:
        ledger = _ledger(Path(tmp) / "drain.db", jobs)
        lock = TimedLock()
        ledger.backend.jobs._db._writer = lock  # type: ignore[attr-defined]
        worker = ledger.worker(["bench"], poll_interval=0.01, **WORKER_SETTINGS)
        lock.on = True
        process = time.process_time()
        started = time.perf_counter()
        worker.start()  # its threads' clocks start at zero: all they spend is the drain's
        try:
            _wait(lambda: worker.stats.completed, jobs)
            seconds = time.perf_counter() - started
            cpu = _thread_cpu(threading.enumerate())
            process = time.process_time() - process
            lock.on = False
        finally:
            worker.stop()
            ledger.close()
    per_job = 1e6 / jobs
    claims = lock.held.get("jobledger-worker", 0.0)
    completions = lock.held.get("jobledger-completer", 0.0)
    return {
        "jobs_per_s": jobs / seconds,
        "lock_held_share": (claims + completions) / seconds,
        "claim_in_lock_us": claims * per_job,
        "completion_in_lock_us": completions * per_job,
        "fetch_loop_waiting_share": lock.waited.get("jobledger-worker", 0.0) / seconds,
        "completer_waiting_share": lock.waited.get("jobledger-completer", 0.0) / seconds,
        "cpu_us": {role: spent * per_job for role, spent in cpu.items()}
        | {"process": process * per_job},
    }


def alone(jobs: int) -> dict[str, float]:
    """The same claims and completions from one thread, nothing else running."""
    with tempfile.TemporaryDirectory() as tmp:
        ledger = _ledger(Path(tmp) / "alone.db", jobs)
        lock = TimedLock()
        store = ledger.backend.jobs
        store._db._writer = lock  # type: ignore[attr-defined]
        me = threading.current_thread().name
        claimed = completed = 0.0
        lock.on = True
        started = time.perf_counter()
        try:
            while True:
                before = lock.held[me]
                got = store.claim(["bench"], "alone", 500)
                claimed += lock.held[me] - before
                if not got:
                    break
                before = lock.held[me]
                store.complete([Lease(j.id, j.lease_token, j.attempt) for j in got])
                completed += lock.held[me] - before
        finally:
            lock.on = False
            ledger.close()
        seconds = time.perf_counter() - started
    return {
        "jobs_per_s": jobs / seconds,
        "claim_in_lock_us": claimed * 1e6 / jobs,
        "completion_in_lock_us": completed * 1e6 / jobs,
    }


def _wait(progress: Callable[[], int], target: int) -> None:
    """Until ``progress()`` reaches ``target``; the drain's own progress is the deadline (no
    new outcome for 60 s is a stall, however slow the machine)."""
    last, since = -1, time.monotonic()
    while (now := progress()) < target:
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > 60:
            raise RuntimeError(f"the drain stalled at {now} of {target} jobs")
        time.sleep(0.002)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sqlite_lock", description=__doc__)
    parser.add_argument("--jobs", type=int, default=60_000, help="jobs drained per round")
    parser.add_argument("--rounds", type=int, default=3, help="drains (each beside a run alone)")
    parser.add_argument("--out", help="write every round's figures here (JSON)")
    args = parser.parse_args(argv)
    rounds = []
    print(f"# started {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load {_load()}")
    for r in range(1, args.rounds + 1):
        d, a = drain(args.jobs), alone(args.jobs)
        rounds.append({"drain": d, "alone": a})
        cpu = d["cpu_us"]
        print(
            f"round {r}: {d['jobs_per_s']:,.0f} jobs/s; write lock held "
            f"{d['lock_held_share']:.0%} (claims {d['claim_in_lock_us']:.1f} µs a job, "
            f"completions {d['completion_in_lock_us']:.1f}); waiting for it: fetch loop "
            f"{d['fetch_loop_waiting_share']:.0%}, completer {d['completer_waiting_share']:.0%}\n"
            f"  CPU µs a job: fetch loop {cpu.get('fetch loop', 0):.1f}, completer "
            f"{cpu.get('completer', 0):.1f}, runners {cpu.get('runners', 0):.1f}, process "
            f"{cpu['process']:.1f}\n"
            f"  alone (one thread): {a['jobs_per_s']:,.0f} jobs/s; under the lock claims "
            f"{a['claim_in_lock_us']:.1f} µs a job, completions {a['completion_in_lock_us']:.1f}"
        )
    if len(rounds) > 1:
        median = statistics.median(x["drain"]["jobs_per_s"] for x in rounds)
        print(f"median drain {median:,.0f} jobs/s over {len(rounds)} rounds")
    print(f"# ended {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load {_load()}")
    if args.out:
        Path(args.out).write_text(json.dumps({"jobs": args.jobs, "rounds": rounds}, indent=1))
    return 0


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    raise SystemExit(main())
