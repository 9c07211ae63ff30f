"""``python -m bench.hosts``: worker hosts against one PostgreSQL, directly and through PgBouncer.

Each host is a network namespace (``tests/support/netns.py``: needs root, ``ip``, ``nft``) with
``--processes`` worker processes (``jobledger worker``, ``--concurrency`` threads each) of a
no-op task. One private PostgreSQL server listens for every host; in ``pgbouncer`` mode a
private PgBouncer in transaction mode (``--bouncer-pool`` server sessions) sits in front of it
and the workers LISTEN on the server directly (``--listen-url``). For each mode and each host
count, in turn:

- **drain**: ``--jobs`` jobs enqueued before the workers start; jobs/s from the first attempt's
  start to the last job's finish (the database's clock);
- **steady**: the harness enqueues ``--rate`` jobs/s for ``--steady`` seconds; enqueue → start
  p50/p95 of those jobs (their ``created_at`` to their attempt's ``started_at``);
- **connections**: the most server sessions open on the run's database at once
  (``pg_stat_activity``), and the most the processes held (direct plus their connections to
  PgBouncer);
- **PostgreSQL CPU per job**: CPU seconds of the server's processes over each phase, per job;
- **waits**: ``pg_stat_activity`` wait events of active sessions, sampled during the drain.

    python -m bench.hosts --hosts 1,2,4,8 --processes 2 --jobs 20000
    python -m bench.hosts --hosts 8 --modes pgbouncer --baseline main

With ``--baseline REV`` every run is made twice in turn, once with jobledger at REV on the
workers' ``PYTHONPATH`` (bench/baseline.py), so that the two can be compared in the same run.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from jobledger import Ledger

from .baseline import prepare
from .harness import ROOT, _cpu_seconds, _descendants, percentile

sys.path.insert(0, str(ROOT))

from tests.apps.budget_app import register  # noqa: E402
from tests.support import netns, pgcluster  # noqa: E402
from tests.support.connections import HARNESS, ConnectionSampler  # noqa: E402
from tests.support.pgbouncer import PgBouncer  # noqa: E402

APP = "tests.apps.budget_app:ledger"


def _cpu(pg: pgcluster.PgInstance) -> float:
    """CPU seconds used so far by the server's processes (postmaster and every child)."""
    pid = pg.postmaster_pid()
    return sum(_cpu_seconds(p) for p in _descendants(pid)) if pid else 0.0


def _scalar(url: str, sql: str, params: Sequence[Any] = ()) -> Any:
    with psycopg.connect(url, autocommit=True, application_name=HARNESS) as conn:
        row = conn.execute(sql.encode(), params).fetchone()
    return row[0] if row else None


class Waits:
    """Wait events of the active sessions on ``dbname``, sampled every ``interval`` s."""

    def __init__(self, url: str, dbname: str, interval: float = 0.1):
        self.url, self.dbname, self.interval = url, dbname, interval
        self.counts: collections.Counter[str] = collections.Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with psycopg.connect(self.url, autocommit=True, application_name=HARNESS) as conn:
            while not self._stop.wait(self.interval):
                rows = conn.execute(
                    "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM"
                    " pg_stat_activity WHERE datname = %s AND state = 'active'"
                    " AND pid <> pg_backend_pid()",
                    (self.dbname,),
                ).fetchall()
                self.samples += 1
                self.counts.update(r[0] for r in rows)

    def __enter__(self) -> Waits:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def top(self, n: int = 4) -> str:
        """The most seen wait events, as sessions waiting on them per sample."""
        if not self.samples:
            return ""
        return ", ".join(f"{k} {v / self.samples:.1f}" for k, v in self.counts.most_common(n))


class Run:
    """One mode at one host count: a fresh database, the hosts' worker processes."""

    def __init__(self, args: argparse.Namespace, pg: pgcluster.PgInstance, net: netns.Network,
                 bouncer: PgBouncer | None, hosts: int, pythonpath: str):  # fmt: skip
        self.args, self.pg, self.net, self.bouncer = args, pg, net, bouncer
        self.hosts = net.hosts[:hosts]
        self.pythonpath = pythonpath
        self.dbname = f"jl_hosts_{uuid.uuid4().hex[:8]}"
        self.harness_url = pg.url(dbname=self.dbname)
        self.direct = pg.url(net.server_address, self.dbname)
        self.workers: list[subprocess.Popen[bytes]] = []

    def worker_url(self) -> str:
        url = self.bouncer.url(self.direct) + "?pooler=transaction" if self.bouncer else self.direct
        return url + ("&" if "?" in url else "?") + f"pool_size={self.args.pool_size}"

    def start_workers(self) -> None:
        env = dict(os.environ)
        env["JOBLEDGER_URL"] = self.worker_url()
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [self.pythonpath, str(ROOT)]))
        env["BUDGET_WORK_SECONDS"] = str(self.args.work)
        argv = [sys.executable, "-m", "jobledger", "worker", APP, "--log-level", "warning",
                "-c", str(self.args.concurrency), "--batch-size", str(self.args.batch_size)]  # fmt: skip
        if self.bouncer:
            argv += ["--listen-url", self.direct]
        for host in self.hosts:
            for p in range(self.args.processes):
                self.workers.append(
                    subprocess.Popen(
                        self.net.command(host, [*argv, "--name", f"{host}:{p}"]),
                        cwd=ROOT,
                        env=env,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )  # fmt: skip
                )

    def stop_workers(self) -> None:
        for w in self.workers:
            w.terminate()
        for w in self.workers:
            try:
                w.wait(60)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()

    def _done(self, prefix: str) -> int:
        return int(_scalar(self.harness_url, "SELECT count(*) FROM jobledger_jobs WHERE state ="
                           " 'done' AND key LIKE %s", (prefix + "%",)))  # fmt: skip

    def _wait_done(self, prefix: str, n: int, stall: float) -> None:
        last, moved = -1, time.monotonic()
        while (done := self._done(prefix)) < n:
            if done != last:
                last, moved = done, time.monotonic()
            elif time.monotonic() - moved > stall:
                raise RuntimeError(f"no job finished for {stall:.0f} s ({done} of {n} done)")
            time.sleep(0.2)

    def measure(self) -> dict[str, Any]:
        args = self.args
        with psycopg.connect(self.pg.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.dbname}"')
        try:
            with register(Ledger(self.harness_url)) as ledger:
                ledger.migrate()
                for start in range(0, args.jobs, 5000):
                    ledger.enqueue_many("work", [
                        {"payload": {"n": n, "follow": False}, "key": f"d{n}"}
                        for n in range(start, min(args.jobs, start + 5000))
                    ])  # fmt: skip
                sampler = ConnectionSampler(
                    self.pg.url(), self.dbname, self.bouncer.admin_url if self.bouncer else None,
                    interval=0.05,
                )  # fmt: skip
                with sampler:
                    cpu0 = _cpu(self.pg)
                    with Waits(self.pg.url(), self.dbname) as waits:
                        self.start_workers()
                        self._wait_done("d", args.jobs, args.stall)
                    cpu1 = _cpu(self.pg)
                    drain = self._drain_rate()
                    steady = self._steady(ledger)
                    cpu2 = _cpu(self.pg)
                self.stop_workers()
            steady_jobs = steady.pop("jobs")
            return {
                "hosts": len(self.hosts),
                "processes": len(self.hosts) * args.processes,
                "drain_jobs_per_s": drain,
                **steady,
                "server_sessions_peak": sampler.server_peak,
                "client_connections_peak": sampler.peak.client_total,
                "pg_cpu_ms_per_job_drain": 1000 * (cpu1 - cpu0) / args.jobs,
                "pg_cpu_ms_per_job_steady": 1000 * (cpu2 - cpu1) / max(1, steady_jobs),
                "waits": waits.top(),
            }
        finally:
            self.stop_workers()
            with psycopg.connect(self.pg.url(), autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')

    def _drain_rate(self) -> float:
        count, seconds = self._done(
            "count(*), extract(epoch FROM max(finished_at) - min(leased_at))", "key LIKE 'd%%'"
        )[0]
        return float(count) / float(seconds)

    def _done(self, columns: str, where: str) -> list[tuple[Any, ...]]:
        """``columns`` of the jobs done, ``where`` so. A job done keeps the attempt that
        completed it in its own row (its start: ``leased_at``; its end: ``finished_at``)."""
        with psycopg.connect(self.harness_url, autocommit=True, application_name=HARNESS) as c:
            return c.execute(
                f"SELECT {columns} FROM jobledger_jobs WHERE state = 'done' AND {where}".encode()
            ).fetchall()

    def _steady(self, ledger: Ledger) -> dict[str, Any]:
        args = self.args
        tick, sent = 0.1, 0
        per_tick = args.rate * tick
        started = time.monotonic()
        while (elapsed := time.monotonic() - started) < args.steady:
            due = int(per_tick * (elapsed / tick + 1)) - sent
            if due > 0:
                ledger.enqueue_many("work", [
                    {"payload": {"n": n, "follow": False}, "key": f"s{n}"}
                    for n in range(sent, sent + due)
                ])  # fmt: skip
                sent += due
            time.sleep(max(0.0, started + (elapsed // tick + 1) * tick - time.monotonic()))
        self._wait_done("s", sent, args.stall)
        rows = self._done(
            "extract(epoch FROM leased_at - created_at)", "key LIKE 's%%' AND attempts = 1"
        )
        latencies = sorted(1000 * float(r[0]) for r in rows)
        return {
            "jobs": sent,
            "steady_rate": sent / args.steady,
            "start_p50_ms": percentile(latencies, 50),
            "start_p95_ms": percentile(latencies, 95),
        }


@contextmanager
def _server(args: argparse.Namespace, net: netns.Network) -> Iterator[pgcluster.PgInstance]:
    base = Path(tempfile.mkdtemp(prefix="jobledger-hosts-pg-"))
    base.chmod(0o755)
    pg = pgcluster.PgInstance(base, "hosts", listen=["127.0.0.1", net.server_address])
    pg.initdb({"max_connections": str(args.max_connections), "shared_buffers": "128MB",
               "fsync": "on", "synchronous_commit": "on"})  # fmt: skip
    pg.start()
    try:
        yield pg
    finally:
        pg.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)


def _row(mode: str, system: str, r: dict[str, Any]) -> str:
    return (
        f"| {mode} | {system} | {r['hosts']} | {r['processes']} | {r['drain_jobs_per_s']:.0f} "
        f"| {r['steady_rate']:.0f} | {r['start_p50_ms']:.0f} / {r['start_p95_ms']:.0f} "
        f"| {r['server_sessions_peak']} | {r['client_connections_peak']} "
        f"| {r['pg_cpu_ms_per_job_drain']:.2f} / {r['pg_cpu_ms_per_job_steady']:.2f} "
        f"| {r['waits']} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", default="1,2,4,8,16", help="host counts, comma-separated")
    parser.add_argument("--processes", type=int, default=2, help="worker processes per host")
    parser.add_argument("--concurrency", type=int, default=8, help="threads per process")
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--pool-size", type=int, default=6, help="pool_size of each process")
    parser.add_argument("--jobs", type=int, default=20_000, help="the drain's backlog")
    parser.add_argument("--rate", type=float, default=300.0, help="steady enqueues per second")
    parser.add_argument("--steady", type=float, default=15.0, help="steady seconds")
    parser.add_argument("--work", type=float, default=0.0, help="seconds each job works")
    parser.add_argument("--modes", default="direct,pgbouncer")
    parser.add_argument("--bouncer-pool", type=int, default=10, help="PgBouncer server sessions")
    parser.add_argument("--max-connections", type=int, default=400, help="the server's")
    parser.add_argument("--stall", type=float, default=120.0, help="give up after s with no job")
    parser.add_argument("--baseline", default=None, help="also run jobledger at this revision")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    args = parser.parse_args(argv)
    counts = [int(h) for h in args.hosts.split(",")]
    modes = args.modes.split(",")
    missing = netns.unavailable() or pgcluster.unavailable()
    if missing:
        print(f"bench.hosts cannot run here: {missing}", file=sys.stderr)
        return 2
    systems = [("working tree", "")]
    if args.baseline:
        base = prepare(args.baseline)
        systems.append((base.label, str(base.path)))
    started = datetime.now(UTC)
    load0 = os.getloadavg()
    rows: list[dict[str, Any]] = []
    print("| mode | jobledger | hosts | processes | drain jobs/s | steady jobs/s "
          "| enqueue→start p50 / p95 ms | server sessions | client conns "
          "| PG CPU ms/job drain / steady | top waits (sessions) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with netns.Network([f"b{i}" for i in range(max(counts))]) as net, _server(args, net) as pg:
        for mode in modes:
            bouncer = (
                PgBouncer(
                    pg.url(),
                    Path(tempfile.mkdtemp()),
                    pool_size=args.bouncer_pool,
                    listen=net.server_address,
                )  # fmt: skip
                if mode == "pgbouncer"
                else None
            )
            try:
                for hosts in counts:
                    for system, path in systems:
                        result = Run(args, pg, net, bouncer, hosts, path).measure()
                        result |= {"mode": mode, "system": system}
                        rows.append(result)
                        print(_row(mode, system, result), flush=True)
            finally:
                if bouncer:
                    bouncer.stop()
    load1 = os.getloadavg()
    print(f"\n{started:%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores; load average at the start "
          f"{load0[0]:.2f}, at the end {load1[0]:.2f}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"started": started.isoformat(), "load": [load0, load1],
                                         "args": vars(args) | {"json": str(args.json)},
                                         "rows": rows}, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
