"""Running one queue's workloads through its adapter: fresh databases, worker processes, the
start barrier, polling for the last completion, latencies and peak memory."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

ROOT = Path(__file__).resolve().parents[1]
PG_ADMIN_URL = os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


#: A drain that takes longer is stopped and rated by the jobs it finished.
DRAIN_TIMEOUT = 120.0
#: After a stream's producer stops, how long its backlog may take to start.
STREAM_TAIL_TIMEOUT = 60.0


class BenchError(RuntimeError):
    """A workload could not run (an adapter failed, a drain never finished)."""


@dataclass
class System:
    """A queue under test: which Python runs its adapter, on which database kind."""

    name: str
    python: str
    module: str
    dialect: str  # "postgres" or "sqlite"
    info: dict[str, Any] = field(default_factory=dict)
    pythonpath: str | None = None
    """Put first on the adapter's and workers' ``PYTHONPATH``: jobledger at another revision
    (``--baseline``)."""


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


# -- databases --------------------------------------------------------------------------------


def _with_db(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


@contextmanager
def fresh_database(dialect: str) -> Iterator[str]:
    """A new, empty database for one workload: a PostgreSQL database created and dropped on
    the bench server, or a SQLite file in a temporary directory."""
    if dialect == "sqlite":
        tmp = tempfile.mkdtemp(prefix="jobledger-bench-")
        try:
            yield f"sqlite:///{tmp}/bench.db"
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    name = f"jobledger_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_db(PG_ADMIN_URL, name)
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def scalar(dsn: str, sql: str) -> Any:
    if dsn.startswith("sqlite"):
        conn = sqlite3.connect(dsn[len("sqlite:///") :], timeout=30)
        try:
            return conn.execute(sql).fetchone()[0]
        finally:
            conn.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql).fetchone()[0]  # type: ignore[index]


class Poller:
    """One connection that asks "is any job left?" until the answer is no.

    ``left_sql``, when the queue's adapter gives one, answers cheaply (the jobs it finds in an
    index, at most a few: 0 means none left); the harness polls every 5 ms during a drain, and
    a count over a table that keeps its finished jobs took 4-6 ms of a core each time on the
    bench machine (docs/benchmarks.md). ``remaining_sql`` counts what is left, and is asked
    only once the drain timed out (or every time, for an adapter without ``left_sql``).
    ``cpu_seconds`` is the CPU the polling has used so far (its server session's on
    PostgreSQL, this thread's own SQLite reads): its share of the machine, reported with each
    drain."""

    def __init__(self, dsn: str, sql: str, left_sql: str | None = None):
        self.sql = sql
        self.left_sql = left_sql
        self._read_cpu = 0.0
        if dsn.startswith("sqlite"):
            self._sqlite = sqlite3.connect(dsn[len("sqlite:///") :], timeout=30)
            self._pg = None
        else:
            self._sqlite = None
            self._pg = psycopg.connect(dsn, autocommit=True)

    @property
    def backend_pid(self) -> int | None:
        return self._pg.info.backend_pid if self._pg is not None else None

    def cpu_seconds(self) -> float:
        if self._pg is not None:
            return _cpu_seconds(self._pg.info.backend_pid)
        return self._read_cpu

    def _ask(self, sql: str) -> int:
        if self._pg is not None:
            return int(self._pg.execute(sql).fetchone()[0])  # type: ignore[index]
        assert self._sqlite is not None
        asked = time.thread_time()
        try:
            return int(self._sqlite.execute(sql).fetchone()[0])
        finally:
            self._read_cpu += time.thread_time() - asked

    def remaining(self) -> int:
        return self._ask(self.sql)

    def wait_empty(self, timeout: float, interval: float = 0.005) -> tuple[float, int]:
        """Poll until nothing is left, or ``timeout``. Returns the time (perf_counter) and how
        many jobs were left then (0 unless the queue was too slow)."""
        deadline = time.perf_counter() + timeout
        while True:
            left = self._ask(self.left_sql or self.sql)
            if left == 0:
                return time.perf_counter(), 0
            if time.perf_counter() > deadline:
                ended = time.perf_counter()
                return ended, left if self.left_sql is None else self.remaining()
            time.sleep(interval)

    def close(self) -> None:
        if self._sqlite is not None:
            self._sqlite.close()
        if self._pg is not None:
            self._pg.close()


# -- adapters and processes -------------------------------------------------------------------


def adapter(system: System, command: str, dsn: str, *args: str, timeout: float = 600) -> dict:
    """Run one adapter command to its end; return the JSON it printed."""
    proc = subprocess.run(
        [system.python, "-m", system.module, command, "--dsn", dsn, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(system),
    )
    if proc.returncode != 0:
        raise BenchError(f"{system.name} {command} failed:\n{proc.stderr[-3000:]}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise BenchError(f"{system.name} {command} printed no result:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def _env(system: System) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [system.pythonpath, str(ROOT), env.get("PYTHONPATH")])
    )
    env.pop("JOBLEDGER_URL", None)
    return env


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                text = Path(f"/proc/{current}/task/{task}/children").read_text()
                todo.extend(int(c) for c in text.split())
        except OSError:
            continue
    return found


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def database_cpu_seconds(dsn: str, exclude_pid: int | None) -> float | None:
    """CPU used so far by the PostgreSQL sessions open on this run's database (the server
    starts one process per session, so this is the database work of this run alone, however
    busy the server is with other databases)."""
    if dsn.startswith("sqlite"):
        return None
    with psycopg.connect(dsn, autocommit=True) as conn:
        own = conn.info.backend_pid
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        ).fetchall()
    return sum(_cpu_seconds(r[0]) for r in rows if r[0] not in (own, exclude_pid))


def _peak_rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


@dataclass
class WorkerRecords:
    """What a run's worker processes recorded: each job's enqueue→start latency (seconds) and
    start time (Unix time; the two lists in the same order, when the adapter notes both), and
    each timed claim as (Unix time, seconds, jobs)."""

    latencies: list[float] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    claims: list[tuple[float, float, int]] = field(default_factory=list)


class Workers:
    """An adapter's ``work`` command: N worker processes behind one start barrier."""

    def __init__(self, system: System, dsn: str, processes: int, env: dict[str, str] | None = None):
        self.system = system
        self.processes = processes
        self.rundir = Path(tempfile.mkdtemp(prefix="jobledger-bench-run-"))
        self.proc = subprocess.Popen(
            [
                system.python,
                "-m",
                system.module,
                "work",
                "--dsn",
                dsn,
                "--processes",
                str(processes),
                "--rundir",
                str(self.rundir),
            ],
            cwd=ROOT,
            env=_env(system) | (env or {}),
            stdout=subprocess.DEVNULL,
            stderr=open(self.rundir / "stderr.log", "w"),  # noqa: SIM115
        )

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while len(list(self.rundir.glob("ready-*"))) < self.processes:
            if self.proc.poll() is not None:
                raise BenchError(f"{self.system.name} workers exited early:\n{self.stderr()}")
            if time.monotonic() > deadline:
                raise BenchError(f"{self.system.name} workers not ready:\n{self.stderr()}")
            time.sleep(0.01)

    def go(self) -> float:
        (self.rundir / "go").touch()
        return time.perf_counter()

    def peak_rss_mb(self) -> float | None:
        """The largest peak resident set of any process of this run (a worker, in practice)."""
        peaks = [_peak_rss_mb(pid) for pid in _descendants(self.proc.pid)]
        known = [p for p in peaks if p is not None]
        return max(known) if known else None

    def cpu_seconds(self) -> float:
        """CPU used so far by every process of this run."""
        return sum(_cpu_seconds(pid) for pid in _descendants(self.proc.pid))

    def stop(self, timeout: float = 60) -> list[float]:
        """Stop the workers (SIGTERM) and return the latencies they recorded, in seconds."""
        return self.stop_records(timeout).latencies

    def stop_records(self, timeout: float = 60) -> WorkerRecords:
        """Stop the workers (SIGTERM) and return everything they recorded."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            for pid in reversed(_descendants(self.proc.pid)):
                with suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            self.proc.wait()
        records = WorkerRecords()
        for path in self.rundir.glob("latency-*.json"):
            records.latencies.extend(json.loads(path.read_text()))
            starts = path.with_name(path.name.replace("latency-", "starts-"))
            if starts.exists():
                records.starts.extend(json.loads(starts.read_text()))
            claims = path.with_name(path.name.replace("latency-", "claims-"))
            if claims.exists():
                records.claims.extend(tuple(c) for c in json.loads(claims.read_text()))
        shutil.rmtree(self.rundir, ignore_errors=True)
        return records

    def stderr(self) -> str:
        try:
            return (self.rundir / "stderr.log").read_text()[-3000:]
        except OSError:
            return ""


# -- workloads ------------------------------------------------------------------------------------


def setup(system: System, dsn: str) -> None:
    if not system.info.get("self_setup"):
        adapter(system, "setup", dsn)


def run_enqueue(system: System, single: int, bulk: int, batch: int) -> dict[str, float]:
    with fresh_database(system.dialect) as dsn:
        setup(system, dsn)
        result = adapter(
            system,
            "enqueue",
            dsn,
            "--single",
            str(single),
            "--bulk",
            str(bulk),
            "--batch",
            str(batch),
        )
    found = {"enqueue_single_per_s": result["single"], "enqueue_bulk_per_s": result["bulk"]}
    # jobledger's adapter measures its asyncio API too (AsyncLedger), in the same process.
    for name in ("async_single", "async_concurrent", "async_bulk"):
        if name in result:
            found[f"enqueue_{name}_per_s"] = result[name]
    return found


def run_drain(
    system: System, jobs: int, processes: int, async_handlers: bool = False
) -> dict[str, float | None]:
    """Fill, then drain with ``processes`` worker processes; ``async_handlers``: the jobs are
    the app's async task's (jobledger's adapter only)."""
    with fresh_database(system.dialect) as dsn:
        setup(system, dsn)
        fill = ["--n", str(jobs), "--batch", "1000"] + (["--async-handlers"] * async_handlers)
        adapter(system, "fill", dsn, *fill)
        left_sql = None if os.environ.get("BENCH_POLL_COUNT") else system.info.get("left_sql")
        poller = Poller(dsn, system.info["remaining_sql"], left_sql)
        workers = Workers(
            system, dsn, processes, {"BENCH_ASYNC_HANDLERS": "1"} if async_handlers else None
        )
        try:
            workers.wait_ready()
            workers_cpu = workers.cpu_seconds()
            poller_cpu = poller.cpu_seconds()
            start = workers.go()
            end, left = poller.wait_empty(timeout=DRAIN_TIMEOUT)
            poller_cpu = poller.cpu_seconds() - poller_cpu
            rss = workers.peak_rss_mb()
            workers_cpu = workers.cpu_seconds() - workers_cpu
            db_cpu = database_cpu_seconds(dsn, poller.backend_pid)
        finally:
            workers.stop()
            poller.close()
    done = jobs - left
    return {
        # A queue that did not finish in DRAIN_TIMEOUT is rated by what it did finish.
        "drain_per_s": done / (end - start),
        "unfinished": left,
        "worker_peak_rss_mb": rss,
        "worker_cpu_us_per_job": workers_cpu / max(1, done) * 1e6,
        "database_cpu_us_per_job": None if db_cpu is None else db_cpu / max(1, done) * 1e6,
        "poller_cpu_share": poller_cpu / (end - start),
    }


def run_stream(
    system: System, rate: float, seconds: float, chunk: int, processes: int = 1
) -> dict[str, float | None]:
    """Producer and workers together: ``rate`` jobs/s for ``seconds``. Returns the completion
    rate over the window and enqueue→start percentiles in milliseconds."""
    with fresh_database(system.dialect) as dsn:
        setup(system, dsn)
        poller = Poller(dsn, system.info["remaining_sql"])
        workers = Workers(system, dsn, processes)
        try:
            workers.wait_ready()
            workers.go()
            time.sleep(0.5)  # the workers reach their idle wait
            started = time.perf_counter()
            produced = adapter(
                system,
                "produce",
                dsn,
                "--rate",
                str(rate),
                "--seconds",
                str(seconds),
                "--chunk",
                str(chunk),
            )
            produced_in = time.perf_counter() - started
            left = poller.remaining()
            # The latencies of jobs still queued after this are not counted (their number is).
            _, backlog = poller.wait_empty(timeout=STREAM_TAIL_TIMEOUT)
        finally:
            latencies = workers.stop()
            poller.close()
    ms = [x * 1000 for x in latencies]
    return {
        "offered_per_s": rate,
        "enqueued": produced["enqueued"],
        "completed_per_s": (produced["enqueued"] - left) / produced_in,
        "p50_ms": percentile(ms, 50),
        "p95_ms": percentile(ms, 95),
        "p99_ms": percentile(ms, 99),
        "samples": len(ms),
        "left_at_end": left,
        "never_started": backlog,
    }
