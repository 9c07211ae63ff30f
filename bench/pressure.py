"""``python -m bench.pressure``: a steady stream of jobs while a long transaction elsewhere in the
database holds back vacuum (issue 18).

    python -m bench.pressure                               # 60 s clean, 600 s held, 300 s recovery
    python -m bench.pressure --clean 60 --held 180 --recover 60 --baseline main
    python -m bench.pressure --quick                       # a few seconds a phase (the test suite)
    python -m bench.pressure --groups 1000 --peers '' --baseline main   # jobs in 1,000 groups

Each run: a fresh PostgreSQL database, the queue's workers, and a producer at ``--rate`` jobs/s
for the whole run. After the clean phase one session holds the xmin horizon for the held phase,
then lets go, and the run recovers. Two ways of holding it (``--scenarios``):

- ``idle``: a session opens a transaction, takes a transaction id and stays idle in it;
- ``rr``: a ``REPEATABLE READ`` transaction that keeps scanning the queue's jobs table (an
  analytics query), one scan after the other.

Every queue (jobledger, jobledger at ``--baseline REV``, the peers of ``--peers``) runs each
scenario in turn, in one invocation. Reported per phase: completed jobs/s against offered,
enqueue→start p50/p95/p99, the claim's p50/p95 (the workers time their claim calls), dead
tuples and the size of each of the queue's tables and indexes at the phase's end, and how long
after the release the queue was back to the clean phase's figures. Writes
``bench/pressure.json``.

``--groups N``: jobledger's producer spreads its jobs over N groups (fair turns, no limits), so
that the workers claim them the grouped way; the peers have no groups and are left out
(``--peers ''``), and a ``--baseline`` revision must know the option (its adapter takes it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from . import baseline, peers
from .harness import (
    ROOT,
    BenchError,
    Poller,
    System,
    WorkerRecords,
    Workers,
    _env,
    adapter,
    fresh_database,
    percentile,
    setup,
)

PHASES = ("clean", "held", "recover")
#: The producer starts this long (seconds) before the clean phase: its process starting, the
#: workers' first claims.
WARM_UP = 3.0
#: Back to clean figures: each of this many seconds in a row meets the clean phase's.
STEADY_SECONDS = 5
#: A second's enqueue→start p95 may exceed the clean phase's by this factor (or by SLACK_MS,
#: whichever is more) and still count as clean.
P95_FACTOR = 1.5
SLACK_MS = 5.0
#: The queue tables each adapter's relations start with.
PREFIXES = {"jobledger": "jobledger", "pgqueuer": "pgqueuer"}
#: The table an ``rr`` reader scans.
JOBS_TABLES = {"jobledger": "jobledger_jobs", "pgqueuer": "pgqueuer"}

_SIZES = """
SELECT c.relname, c.relkind, pg_relation_size(c.oid),
       COALESCE(s.n_dead_tup, 0), COALESCE(s.n_live_tup, 0)
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i') AND c.relname LIKE %(prefix)s
ORDER BY c.relkind DESC, c.relname
"""


@dataclass
class Phases:
    """The run's timeline, in Unix time: the producer's start, the hold and its release, the
    producer's end."""

    start: float
    hold: float
    release: float
    end: float

    def of(self, t: float) -> str | None:
        if self.start <= t < self.hold:
            return "clean"
        if self.hold <= t < self.release:
            return "held"
        if self.release <= t < self.end:
            return "recover"
        return None

    def bounds(self, phase: str) -> tuple[float, float]:
        return {
            "clean": (self.start, self.hold),
            "held": (self.hold, self.release),
            "recover": (self.release, self.end),
        }[phase]


class Sampler(threading.Thread):
    """Every ``interval`` seconds: the size and dead tuples of each of the queue's relations."""

    def __init__(self, dsn: str, prefix: str, interval: float, jobs_table: str):
        super().__init__(daemon=True)
        self.dsn, self.prefix, self.interval = dsn, prefix, interval
        self.jobs_table = jobs_table
        self.samples: list[tuple[float, dict[str, dict[str, Any]]]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                self.samples.append((time.time(), self.sizes(conn)))
                self.stop.wait(self.interval)
            self.samples.append((time.time(), self.sizes(conn)))

    def sizes(self, conn: psycopg.Connection[Any]) -> dict[str, dict[str, Any]]:
        rows = conn.execute(_SIZES, {"prefix": self.prefix.replace("_", r"\_") + "%"}).fetchall()
        # Jobs enqueued so far: the jobs table's id sequence (a finished PgQueuer job leaves
        # its table for the log).
        enqueued = conn.execute(
            "SELECT pg_sequence_last_value(pg_get_serial_sequence(%s, 'id'))", [self.jobs_table]
        ).fetchone()[0]  # type: ignore[index]
        return {"*enqueued": {"kind": "count", "bytes": 0, "dead": 0, "jobs": enqueued or 0}} | {
            r[0]: {"kind": "table" if r[1] == "r" else "index", "bytes": r[2], "dead": r[3]}
            | ({"live": r[4]} if r[1] == "r" else {})
            for r in rows
        }


class Vacuumer(threading.Thread):
    """Every ``interval`` seconds, ``VACUUM`` each of the queue's tables: autovacuum's part, for
    a server that runs without it (``--vacuum``)."""

    def __init__(self, dsn: str, prefix: str, interval: float):
        super().__init__(daemon=True)
        self.dsn, self.prefix, self.interval = dsn, prefix, interval
        self.runs = 0
        self.stop = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.wait(self.interval):
                tables = conn.execute(
                    "SELECT relname FROM pg_class WHERE relkind = 'r' AND relname LIKE %s "
                    "AND relnamespace = 'public'::regnamespace",
                    [self.prefix + "%"],
                ).fetchall()
                for (table,) in tables:
                    conn.execute(f'VACUUM "{table}"')
                self.runs += 1


class Holder:
    """The session that holds the xmin horizon back: idle in a transaction with an XID, or a
    REPEATABLE READ reader scanning the jobs table again and again."""

    def __init__(self, dsn: str, scenario: str, table: str):
        self.scenario, self.table = scenario, table
        self.conn = psycopg.connect(dsn)
        self.scans = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def begin(self) -> None:
        if self.scenario == "idle":
            self.conn.execute("SELECT txid_current()")  # an XID: idle in transaction from here
            return
        self.conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        self.conn.execute("SELECT 1")  # the snapshot is taken here, and held

        def scan() -> None:
            while not self._stop.is_set():
                self.conn.execute(f"SELECT count(*), max(length(payload::text)) FROM {self.table}")
                self.scans += 1
                self._stop.wait(0.5)

        self._thread = threading.Thread(target=scan, daemon=True)
        self._thread.start()

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.conn.rollback()
        self.conn.close()


def run_pressure(
    system: System,
    scenario: str,
    seconds: dict[str, float],
    rate: float,
    chunk: int,
    processes: int,
    sample: float,
    tail_timeout: float,
    vacuum: float = 0.0,
    groups: int = 0,
) -> dict[str, Any]:
    """One queue through one scenario; the per-phase figures."""
    kind = system.info.get("kind", system.name.split("/")[0].split("@")[0])
    with fresh_database("postgres") as dsn:
        setup(system, dsn)
        sampler = Sampler(dsn, PREFIXES[kind], sample, JOBS_TABLES[kind])
        poller = Poller(dsn, system.info["remaining_sql"])
        workers = Workers(system, dsn, processes, env={"BENCH_TIME_CLAIMS": "1"})
        producer = None
        try:
            workers.wait_ready()
            workers.go()
            time.sleep(0.5)  # the workers reach their idle wait
            total = sum(seconds.values())
            sampler.start()
            vacuumer = Vacuumer(dsn, PREFIXES[kind], vacuum) if vacuum > 0 else None
            if vacuumer is not None:
                vacuumer.start()
            warm_up = min(WARM_UP, total / 3)
            producer = subprocess.Popen(
                [system.python, "-m", system.module, "produce", "--dsn", dsn, "--rate", str(rate),
                 "--seconds", str(total + warm_up), "--chunk", str(chunk)]
                + (["--groups", str(groups)] if groups else []),
                cwd=ROOT, env=_env(system), stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            start = time.time() + warm_up
            phases = Phases(
                start,
                start + seconds["clean"],
                start + seconds["clean"] + seconds["held"],
                start + total,
            )
            holder = Holder(dsn, scenario, JOBS_TABLES[kind])
            _sleep_until(phases.hold)
            holder.begin()
            _sleep_until(phases.release)
            holder.release()
            out, _ = producer.communicate(timeout=total + 120)
            if producer.returncode != 0:
                raise BenchError(f"{system.name} producer failed")
            produced_until = time.time()
            enqueued = json.loads(out.strip().splitlines()[-1])["enqueued"]
            _, backlog = poller.wait_empty(timeout=tail_timeout)
            sampler.stop.set()
            sampler.join()
            if vacuumer is not None:
                vacuumer.stop.set()
                vacuumer.join()
        finally:
            if producer is not None and producer.poll() is None:
                producer.kill()
            records = workers.stop_records()
            poller.close()
    return summarise(records, sampler.samples, phases, rate, enqueued, backlog, holder.scans) | {
        "producer_overran_s": max(0.0, produced_until - phases.end),
        "vacuums": vacuumer.runs if vacuumer is not None else None,
    }


def _sleep_until(t: float) -> None:
    while (left := t - time.time()) > 0:
        time.sleep(min(left, 0.5))


def summarise(
    records: WorkerRecords,
    samples: list[tuple[float, dict[str, dict[str, Any]]]],
    phases: Phases,
    rate: float,
    enqueued: int,
    backlog: int,
    scans: int,
) -> dict[str, Any]:
    """The per-phase figures of one run, and the time it took to be back to clean ones."""
    by_phase: dict[str, list[float]] = {p: [] for p in PHASES}
    per_second: dict[int, list[float]] = {}
    for started, lag in zip(records.starts, records.latencies, strict=False):
        phase = phases.of(started)
        if phase is not None:
            by_phase[phase].append(lag * 1000)
            per_second.setdefault(int(started - phases.start), []).append(lag * 1000)
    claims: dict[str, list[float]] = {p: [] for p in PHASES}
    for at, took, _n in records.claims:
        phase = phases.of(at)
        if phase is not None:
            claims[phase].append(took * 1000)
    result: dict[str, Any] = {"offered_per_s": rate, "enqueued": enqueued}
    result["never_started"] = backlog
    result["rr_scans"] = scans
    for phase in PHASES:
        lo, hi = phases.bounds(phase)
        ms = by_phase[phase]
        result[phase] = {
            "seconds": hi - lo,
            "completed_per_s": len(ms) / (hi - lo) if hi > lo else None,
            "completed_vs_offered": len(ms) / (hi - lo) / rate if hi > lo else None,
            "p50_ms": percentile(ms, 50),
            "p95_ms": percentile(ms, 95),
            "p99_ms": percentile(ms, 99),
            "claims": len(claims[phase]),
            "claim_p50_ms": percentile(claims[phase], 50),
            "claim_p95_ms": percentile(claims[phase], 95),
            "relations": _at(samples, hi),
            "peak_dead": _peak_dead(samples, lo, hi),
        }
    result["recovered_after_s"] = _recovered_after(per_second, phases, result["clean"], rate)
    for phase in PHASES:
        relations = result[phase]["relations"]
        jobs = relations.get("*enqueued", {}).get("jobs", 0)
        result[phase]["jobs_enqueued"] = jobs
        result[phase]["bytes_per_job"] = _total_bytes(relations) / jobs if jobs else None
    clean_bytes = _total_bytes(result["clean"]["relations"])
    after_bytes = _total_bytes(result["recover"]["relations"])
    result["size_after_vs_clean"] = after_bytes / clean_bytes if clean_bytes else None
    clean_per_job, after_per_job = (result[p]["bytes_per_job"] for p in ("clean", "recover"))
    result["bytes_per_job_after_vs_clean"] = (
        after_per_job / clean_per_job if clean_per_job and after_per_job else None
    )
    return result


def _at(samples: list[tuple[float, dict[str, Any]]], t: float) -> dict[str, Any]:
    """The last sample taken by ``t`` (the first one if none was)."""
    before = [s for at, s in samples if at <= t]
    return before[-1] if before else (samples[0][1] if samples else {})


def _peak_dead(samples: list[tuple[float, dict[str, Any]]], lo: float, hi: float) -> int:
    totals = [
        sum(r["dead"] for r in s.values() if r["kind"] == "table")
        for at, s in samples
        if lo <= at <= hi
    ]
    return max(totals, default=0)


def _total_bytes(relations: dict[str, Any]) -> int:
    return sum(r["bytes"] for r in relations.values())


def _recovered_after(
    per_second: dict[int, list[float]], phases: Phases, clean: dict[str, Any], rate: float
) -> float | None:
    """Seconds from the release to the first of ``STEADY_SECONDS`` seconds in a row in which
    jobs started at the offered rate (at least 99 % of it over those seconds), each second's
    p95 within the clean phase's (times ``P95_FACTOR``, or plus ``SLACK_MS``); None if that
    never happened."""
    if clean["p95_ms"] is None:
        return None
    bound = max(clean["p95_ms"] * P95_FACTOR, clean["p95_ms"] + SLACK_MS)
    first = int(phases.release - phases.start)
    last = int(phases.end - phases.start)
    for second in range(first, last - STEADY_SECONDS + 1):
        window = [per_second.get(s, []) for s in range(second, second + STEADY_SECONDS)]
        if sum(len(ms) for ms in window) < 0.99 * rate * STEADY_SECONDS:
            continue
        if all(ms and (percentile(ms, 95) or 0) <= bound for ms in window):
            return max(0.0, second - (phases.release - phases.start))
    return None


# -- the report ---------------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, float | int):
        return f"{value:,.{digits}f}"
    return str(value)


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f}"


def render(report: dict[str, Any]) -> str:
    s = report["seconds"]
    lines = [
        f"held xmin — {report['date']}: {report['rate']:,.0f} jobs/s offered, phases "
        f"{s['clean']:g} s clean / {s['held']:g} s held / {s['recover']:g} s recovery, "
        f"load average {', '.join(f'{x:.2f}' for x in report['loadavg_before'])} before, "
        f"{', '.join(f'{x:.2f}' for x in report['loadavg_after'])} after; PostgreSQL "
        f"{report['postgres']}, autovacuum {report['autovacuum']}"
        + (f", VACUUM every {report['vacuum_every_s']:g} s" if report["vacuum_every_s"] else "")
        + (f"; jobs in {report['groups']:,} groups" if report.get("groups") else ""),
    ]
    for run in report["runs"]:
        lines.append("")
        head = f"{run['system']} — {run['scenario']}"
        if "error" in run:
            lines.append(f"{head}: ERROR {run['error'].splitlines()[0]}")
            continue
        r = run["result"]
        lines.append(
            f"{head}: back to clean figures {_fmt(r['recovered_after_s'])} s after the release; "
            f"size after recovery {_fmt(r['size_after_vs_clean'], 2)}x the clean phase's, "
            f"{_fmt(r['bytes_per_job_after_vs_clean'], 2)}x per job enqueued; "
            f"{r['never_started']} never started"
        )
        lines.append(
            "  phase     done/s  of offered  p50 ms  p95 ms  p99 ms  claim p50/p95 ms  "
            "peak dead  tables+indexes MB  bytes/job"
        )
        for phase in PHASES:
            p = r[phase]
            lines.append(
                f"  {phase:8} {_fmt(p['completed_per_s']):>7} {_fmt(p['completed_vs_offered'], 3):>11}"
                f" {_fmt(p['p50_ms'], 1):>7} {_fmt(p['p95_ms'], 1):>7} {_fmt(p['p99_ms'], 1):>7}"
                f" {_fmt(p['claim_p50_ms'], 2):>8}/{_fmt(p['claim_p95_ms'], 2):<8}"
                f" {_fmt(p['peak_dead']):>10} {_mb(_total_bytes(p['relations'])):>18}"
                f" {_fmt(p['bytes_per_job']):>10}"
            )
        lines.append("  at each phase's end, MB (dead tuples), relations over 64 kB:")
        for name, rel in r["recover"]["relations"].items():
            if rel["kind"] == "count" or rel["bytes"] <= 65536:
                continue
            cells = []
            for phase in PHASES:
                rel = r[phase]["relations"].get(name)
                if rel is None:
                    cells.append("-")
                    continue
                dead = f" ({_fmt(rel['dead'])})" if rel["kind"] == "table" else ""
                cells.append(f"{_mb(rel['bytes'])}{dead}")
            lines.append(f"    {name:36} " + "  ".join(c.rjust(18) for c in cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.pressure", description=__doc__.split("\n")[0])
    p.add_argument("--clean", type=float, default=60.0, help="seconds before the hold")
    p.add_argument("--held", type=float, default=600.0, help="seconds the xmin is held")
    p.add_argument("--recover", type=float, default=300.0, help="seconds after the release")
    p.add_argument("--rate", type=float, default=1000.0, help="jobs per second offered")
    p.add_argument("--chunk", type=int, default=20, help="jobs per enqueue call")
    p.add_argument("--processes", type=int, default=1, help="worker processes per queue")
    p.add_argument("--scenarios", default="idle,rr", help="comma-separated: idle, rr")
    p.add_argument("--peers", default="pgqueuer", help="other queues (comma-separated; '' none)")
    p.add_argument("--peers-venv", type=Path, default=peers.default_venv())
    p.add_argument("--baseline", metavar="REV", help="also jobledger at this git revision")
    p.add_argument(
        "--vacuum",
        type=float,
        default=0.0,
        help="VACUUM the queue's tables every this many seconds (for a server without "
        "autovacuum; default 0: leave it to the server)",
    )
    p.add_argument("--sample", type=float, default=2.0, help="seconds between size samples")
    p.add_argument("--quick", action="store_true", help="a few seconds a phase, 200 jobs/s")
    p.add_argument(
        "--groups", type=int, default=0, help="jobledger's jobs in this many groups (no peers)"
    )
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "pressure.json")
    args = p.parse_args(argv)
    if args.groups and args.peers:
        print("error: --groups needs --peers '' (the peers have no groups)", file=sys.stderr)
        return 2
    if args.quick:
        args.clean, args.held, args.recover, args.rate, args.sample = 3.0, 3.0, 3.0, 200.0, 0.5
    seconds = {"clean": args.clean, "held": args.held, "recover": args.recover}
    scenarios = [s for s in args.scenarios.split(",") if s]
    notes: list[str] = []

    systems = [System("jobledger", sys.executable, "bench.adapters.ours", "postgres")]
    if args.baseline:
        old = baseline.prepare_or_say(args.baseline)
        if old is None:
            return 2
        systems.append(
            System(f"jobledger@{old.rev}", sys.executable, "bench.adapters.ours", "postgres",
                   {"commit": old.commit, "kind": "jobledger"}, pythonpath=str(old.path))
        )  # fmt: skip
    wanted = [n for n in args.peers.split(",") if n]
    if wanted:
        usable = peers.ensure(args.peers_venv, wanted, notes)
        python = str(args.peers_venv / "bin" / "python")
        for name, version in usable.items():
            systems.append(
                System(name, python, f"bench.adapters.peer_{name}", "postgres",
                       {"version": version, "kind": name})
            )  # fmt: skip
    for system in systems:
        with fresh_database("postgres") as dsn:
            system.info.update(adapter(system, "info", dsn))
            with psycopg.connect(dsn) as conn:
                server = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
                autovacuum = conn.execute("SHOW autovacuum").fetchone()[0]  # type: ignore[index]

    report: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": seconds,
        "rate": args.rate,
        "chunk": args.chunk,
        "processes": args.processes,
        "loadavg_before": os.getloadavg(),
        "vacuum_every_s": args.vacuum or None,
        "groups": args.groups or None,
        "postgres": server,
        "autovacuum": autovacuum,
        "runs": [],
        "notes": notes,
    }
    # Scenario by scenario, every queue in turn: the queues see the machine within minutes of
    # each other.
    for scenario in scenarios:
        for system in systems:
            run: dict[str, Any] = {"system": system.name, "scenario": scenario}
            run["started"] = datetime.now(UTC).isoformat(timespec="seconds")
            run["loadavg_before"] = os.getloadavg()
            try:
                run["result"] = run_pressure(
                    system, scenario, seconds, args.rate, args.chunk, args.processes,
                    args.sample, tail_timeout=max(60.0, args.held), vacuum=args.vacuum,
                    groups=args.groups,
                )  # fmt: skip
            except (BenchError, OSError, subprocess.SubprocessError, psycopg.Error) as exc:
                run["error"] = str(exc)[-2000:]
            run["loadavg_after"] = os.getloadavg()
            report["runs"].append(run)
            print(f"[{time.strftime('%H:%M:%S')}] {system.name} {scenario} done", file=sys.stderr)
    report["loadavg_after"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str))
    print(render(report))
    print(f"\nwritten to {args.out}")
    return 1 if any("error" in r for r in report["runs"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
