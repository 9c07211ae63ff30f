"""``python -m bench``: run the benchmark, print the table, write bench/results.json.

    python -m bench                 # jobledger on SQLite and PostgreSQL, the floor, scale
    python -m bench --compare       # ... and the other Python PostgreSQL queues, same run
    python -m bench --quick         # a small version of everything (seconds, for CI)
    python -m bench --baseline b0a3e66 --only drain,enqueue
                                    # the working tree against jobledger at a git revision,
                                    # measured in turn in every round

PostgreSQL: ``$BENCH_POSTGRES_URL`` or postgresql://postgres@127.0.0.1:5432/postgres; every
workload runs in a database of its own, created and dropped by the bench.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import baseline, floor, peers, scale
from .harness import (
    ROOT,
    BenchError,
    System,
    adapter,
    fresh_database,
    run_drain,
    run_enqueue,
    run_stream,
)

FULL = {
    "jobs": 20_000,
    "single": 2_000,
    "bulk": 20_000,
    "steady_seconds": 30.0,
    "steady_rate": 2_000.0,
    "idle_jobs": 100,
    "scale": [10_000, 100_000, 1_000_000],
    "scale_done": 1_000_000,
    "claims": 200,
    "floor_jobs": 50_000,
}
QUICK = {
    "jobs": 1_000,
    "single": 50,
    "bulk": 1_000,
    "steady_seconds": 1.0,
    "steady_rate": 500.0,
    "idle_jobs": 5,
    "scale": [1_000],
    "scale_done": 2_000,
    "claims": 10,
    "floor_jobs": 1_000,
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a small run of every workload")
    p.add_argument("--compare", action="store_true", help="also run the other queues")
    p.add_argument(
        "--backends", default="sqlite,postgres", help="comma-separated: sqlite, postgres"
    )
    p.add_argument("--peers", default=",".join(peers.PEERS), help="which other queues")
    p.add_argument("--peers-venv", type=Path, default=peers.default_venv())
    p.add_argument("--only", default="", help="comma-separated workloads to run (default all)")
    p.add_argument("--processes", default="1,2", help="worker processes for the drain")
    p.add_argument(
        "--rounds", type=int, default=None, help="times each workload runs (default 3; quick 1)"
    )
    p.add_argument(
        "--baseline",
        metavar="REV",
        help="also measure jobledger at this git revision (a commit, tag or branch), in turn "
        "with the working tree in every round, and print new/old per round and its median",
    )
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results.json")
    args = p.parse_args(argv)
    size = dict(QUICK if args.quick else FULL)
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    workloads = set(filter(None, args.only.split(","))) or {
        "enqueue",
        "drain",
        "steady",
        "idle",
        "floor",
        "scale",
    }
    backends = [b for b in args.backends.split(",") if b]
    processes = [int(n) for n in args.processes.split(",")]
    notes: list[str] = []

    try:
        old = baseline.prepare(args.baseline) if args.baseline else None
    except BenchError as exc:
        print(f"error: --baseline {args.baseline}: {exc}", file=sys.stderr)
        return 2
    systems = []
    for dialect in backends:
        systems.append(
            System(f"jobledger/{dialect}", sys.executable, "bench.adapters.ours", dialect)
        )
        if old is not None:
            # Right after the working tree's: every round measures new, then old, per backend.
            systems.append(
                System(
                    f"jobledger@{old.rev}/{dialect}",
                    sys.executable,
                    "bench.adapters.ours",
                    dialect,
                    {"commit": old.commit},
                    pythonpath=str(old.path),
                )
            )
    if args.compare and "postgres" in backends:
        usable = peers.ensure(args.peers_venv, args.peers.split(","), notes)
        python = str(args.peers_venv / "bin" / "python")
        for name, version in usable.items():
            systems.append(
                System(
                    name, python, f"bench.adapters.peer_{name}", "postgres", {"version": version}
                )
            )

    results: dict[str, dict[str, Any]] = {}
    live = []
    for system in systems:
        out = results.setdefault(system.name, {"dialect": system.dialect, **system.info})
        try:
            with fresh_database(system.dialect) as dsn:
                system.info.update(adapter(system, "info", dsn))
            if "source" in system.info:
                out["source"] = system.info["source"]  # which jobledger the adapter imported
            live.append(system)
        except (BenchError, OSError, TimeoutError) as exc:
            _failed(system, out, exc, notes)
    # Each workload runs for every queue in turn, ``--rounds`` times: on a shared machine the
    # load drifts, and interleaving gives every queue the same conditions. Best round counts.
    for workload in _WORKLOADS:
        if workload not in workloads:
            continue
        # Steady state runs once: its 30 s already average over the machine's swings.
        for round_no in range(1 if workload == "steady" else args.rounds):
            for system in live:
                out = results[system.name]
                if "error" in out:
                    continue
                try:
                    for key, value in _WORKLOADS[workload](system, size, processes).items():
                        out.setdefault("rounds", {}).setdefault(key, []).append(value)
                        _progress(f"{system.name} {key} (round {round_no + 1})", value)
                except (BenchError, OSError, TimeoutError, subprocess.TimeoutExpired) as exc:
                    # One workload failing leaves the others to run.
                    notes.append(f"{system.name} {workload}: {str(exc).strip().splitlines()[0]}")
                    out.setdefault("errors", {})[workload] = str(exc)[-2000:]
                    traceback.print_exc()
    for out in results.values():
        for key, values in out.get("rounds", {}).items():
            out[key] = _best(key, values)

    extra: dict[str, Any] = {}
    for dialect in backends:
        if "floor" in workloads:
            with fresh_database(dialect) as dsn:
                fn = floor.floor_sqlite if dialect == "sqlite" else floor.floor_postgres
                extra.setdefault("floor", {})[dialect] = fn(
                    dsn, size["floor_jobs"], 500, size["single"]
                )
            if dialect == "postgres":
                with fresh_database(dialect) as dsn:
                    extra["floor"][dialect] |= floor.idle_floor_postgres(dsn, size["idle_jobs"])
            _progress(f"floor/{dialect}", extra["floor"][dialect])
        if "scale" in workloads:
            rows = {}
            cases = [(f"{n:,} pending", n, 0) for n in size["scale"]]
            cases.append(
                (f"10,000 pending + {size['scale_done']:,} done", 10_000, size["scale_done"])
            )
            for label, pending, done in cases:
                with fresh_database(dialect) as dsn:
                    scale.fill(dsn, pending, done)
                    rows[label] = scale.claim_latency(dsn, size["claims"], 10)
                _progress(f"scale/{dialect} {label}", rows[label])
            extra.setdefault("scale", {})[dialect] = rows

    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "machine": _machine(),
        "sizes": size,
        "rounds": args.rounds,
        "results": results,
        **extra,
        "ratios": _ratios(results, extra),
        "notes": notes,
    }
    if old is not None:
        report["baseline"] = {
            "rev": old.rev,
            "commit": old.commit,
            "versus": _versus(results, backends, f"jobledger@{old.rev}"),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str))
    print(render(report))
    print(f"\nwritten to {args.out}")
    return 1 if any("error" in r for r in results.values()) else 0


def _enqueue(system: System, size: dict[str, Any], processes: list[int]) -> dict[str, Any]:
    return run_enqueue(system, size["single"], size["bulk"], 1000)


def _drain(system: System, size: dict[str, Any], processes: list[int]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for n in processes:
        result = run_drain(system, size["jobs"], n)
        found[f"drain_{n}p_per_s"] = result["drain_per_s"]
        found[f"drain_{n}p_peak_rss_mb"] = result["worker_peak_rss_mb"]
        found[f"drain_{n}p_unfinished"] = result["unfinished"]
        found[f"drain_{n}p_worker_cpu_us"] = result["worker_cpu_us_per_job"]
        found[f"drain_{n}p_database_cpu_us"] = result["database_cpu_us_per_job"]
        found[f"drain_{n}p_poller_cpu"] = result["poller_cpu_share"]
    if system.name.startswith("jobledger"):
        # The same drain with async handlers (run on each worker's event loop), one process.
        result = run_drain(system, size["jobs"], 1, async_handlers=True)
        found["drain_async_1p_per_s"] = result["drain_per_s"]
        found["drain_async_1p_worker_cpu_us"] = result["worker_cpu_us_per_job"]
    return found


def _steady(system: System, size: dict[str, Any], processes: list[int]) -> dict[str, Any]:
    return {"steady": run_stream(system, size["steady_rate"], size["steady_seconds"], chunk=20)}


def _idle(system: System, size: dict[str, Any], processes: list[int]) -> dict[str, Any]:
    rate = 20.0
    return {"idle": run_stream(system, rate, size["idle_jobs"] / rate, chunk=1)}


_WORKLOADS = {"enqueue": _enqueue, "drain": _drain, "steady": _steady, "idle": _idle}


def _best(key: str, values: list[Any]) -> Any:
    """The best round: most jobs per second, lowest latency; memory: the highest peak."""
    known = [v for v in values if v is not None]
    if not known:
        return None
    if key == "steady":
        return max(known, key=lambda r: r["completed_per_s"])
    if key == "idle":
        return min(known, key=lambda r: r["p50_ms"] if r["p50_ms"] is not None else 1e9)
    if key.endswith("_mb") or key.endswith("_unfinished"):
        return max(known)
    if key.endswith("_cpu_us"):
        return min(known)  # CPU per job: the least the work took (contention only adds)
    return max(known)


def _failed(system: System, out: dict[str, Any], exc: BaseException, notes: list[str]) -> None:
    notes.append(f"{system.name}: {str(exc).strip().splitlines()[0]}")
    out["error"] = str(exc)[-2000:]
    traceback.print_exc()


def _progress(what: str, result: Any) -> None:
    print(
        f"[{time.strftime('%H:%M:%S')}] {what}: {json.dumps(result, default=str)}", file=sys.stderr
    )


def _machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_at_end": os.getloadavg(),
    }
    try:
        import psycopg

        from .harness import PG_ADMIN_URL

        with psycopg.connect(PG_ADMIN_URL) as conn:
            info["postgres"] = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
            info["postgres_synchronous_commit"] = conn.execute(
                "SHOW synchronous_commit"
            ).fetchone()[0]  # type: ignore[index]
            info["postgres_fsync"] = conn.execute("SHOW fsync").fetchone()[0]  # type: ignore[index]
    except Exception:  # noqa: BLE001 - the machine block is informative only
        pass
    import sqlite3

    info["sqlite"] = sqlite3.sqlite_version
    return info


def _best_drain(r: dict[str, Any]) -> float | None:
    values = [v for k, v in r.items() if k.startswith("drain_") and k.endswith("p_per_s") and v]
    return max(values) if values else None


def _ratios(results: dict[str, dict[str, Any]], extra: dict[str, Any]) -> dict[str, Any]:
    ratios: dict[str, Any] = {}
    for dialect in ("postgres", "sqlite"):
        ours = results.get(f"jobledger/{dialect}")
        floor_result = extra.get("floor", {}).get(dialect)
        if ours and floor_result and _best_drain(ours):
            ratios[f"{dialect}_drain_vs_floor"] = _best_drain(ours) / floor_result["drain_per_s"]
        if ours and floor_result and ours.get("enqueue_single_per_s"):
            ratios[f"{dialect}_single_enqueue_vs_bare_insert"] = (
                ours["enqueue_single_per_s"] / floor_result["enqueue_single_per_s"]
            )
        if floor_result and floor_result.get("enqueue_statement_per_s"):
            ratios[f"{dialect}_insert_statement_vs_bare_insert"] = (
                floor_result["enqueue_statement_per_s"] / floor_result["enqueue_single_per_s"]
            )
        if floor_result and floor_result.get("enqueue_call_per_s"):
            # ledger.enqueue against the bare INSERT in the same minutes (alternating rounds).
            ratios[f"{dialect}_enqueue_call_vs_bare_insert"] = (
                floor_result["enqueue_call_per_s"] / floor_result["enqueue_single_per_s"]
            )
        if ours and floor_result and ours.get("enqueue_bulk_per_s"):
            ratios[f"{dialect}_bulk_enqueue_vs_floor"] = (
                ours["enqueue_bulk_per_s"] / floor_result["enqueue_bulk_per_s"]
            )
        idle = (ours or {}).get("idle") or {}
        if idle.get("p50_ms") and (floor_result or {}).get("idle_p50_ms"):
            ratios[f"{dialect}_idle_p50_vs_floor"] = idle["p50_ms"] / floor_result["idle_p50_ms"]
    ours = results.get("jobledger/postgres")
    others = {
        k: v for k, v in results.items() if not k.startswith("jobledger") and "error" not in v
    }
    if ours and others:
        for metric, higher_is_better in (
            ("drain", True),
            ("enqueue_bulk_per_s", True),
            ("enqueue_single_per_s", True),
            ("idle_p50_ms", False),
        ):
            value = _metric(ours, metric)
            peer_values = {k: _metric(v, metric) for k, v in others.items()}
            peer_values = {k: v for k, v in peer_values.items() if v}
            if not value or not peer_values:
                continue
            best_name = (max if higher_is_better else min)(peer_values, key=peer_values.get)  # type: ignore[arg-type]
            best = peer_values[best_name]
            ratios[f"postgres_{metric}_vs_fastest_peer"] = {
                "peer": best_name,
                "ratio": value / best if higher_is_better else best / value,
            }
    scale_pg = extra.get("scale", {}).get("postgres")
    if scale_pg and len(scale_pg) > 1:
        labels = list(scale_pg)
        first, last = scale_pg[labels[0]], scale_pg[labels[-2] if len(labels) > 2 else labels[-1]]
        ratios["postgres_claim_p50_largest_vs_smallest"] = (
            last["claim_p50_ms"] / first["claim_p50_ms"]
        )
    return ratios


#: jobledger's asyncio API (AsyncLedger), measured by its adapter in the enqueue workload.
ASYNC_ENQUEUE = [
    ("enqueue_async_single_per_s", "async enqueue one by one, jobs/s"),
    ("enqueue_async_concurrent_per_s", "async enqueue, 100 at once, jobs/s"),
    ("enqueue_async_bulk_per_s", "async enqueue in batches of 1,000, jobs/s"),
]

#: What --baseline compares, round by round: (key in a system's rounds, label).
VERSUS = [
    ("enqueue_single_per_s", "enqueue one by one, jobs/s"),
    ("enqueue_bulk_per_s", "enqueue in batches of 1,000, jobs/s"),
    *ASYNC_ENQUEUE,
    ("drain_1p_per_s", "drain, 1 process, jobs/s"),
    ("drain_2p_per_s", "drain, 2 processes, jobs/s"),
]


def _versus(
    results: dict[str, dict[str, Any]], backends: list[str], old_prefix: str
) -> dict[str, dict[str, Any]]:
    """Per backend and metric: the working tree's and the baseline's figure in each round (the
    two were measured one right after the other), their ratio new/old, and its median."""
    versus: dict[str, dict[str, Any]] = {}
    for dialect in backends:
        new = results.get(f"jobledger/{dialect}", {}).get("rounds", {})
        old = results.get(f"{old_prefix}/{dialect}", {}).get("rounds", {})
        for key, _ in VERSUS:
            pairs = [(n, o) for n, o in zip(new.get(key, []), old.get(key, []), strict=False)]
            ratios = [n / o for n, o in pairs if n and o]
            if ratios:
                versus.setdefault(dialect, {})[key] = {
                    "new": [n for n, _ in pairs],
                    "old": [o for _, o in pairs],
                    "ratios": ratios,
                    "median_ratio": statistics.median(ratios),
                }
    return versus


def _render_versus(report: dict[str, Any]) -> list[str]:
    base = report["baseline"]
    lines = [
        "",
        f"new against old: the working tree / jobledger at {base['rev']} "
        f"({base['commit'][:12]}), measured in turn in each round:",
    ]
    labels = dict(VERSUS)
    width = max(len(label) for label in labels.values()) + 2
    for dialect, metrics in base["versus"].items():
        for key, v in metrics.items():
            rounds = "  ".join(
                f"{_fmt(n)}/{_fmt(o)} {r:.3f}"
                for n, o, r in zip(v["new"], v["old"], v["ratios"], strict=False)
            )
            lines.append(
                f"  {dialect:8} {labels[key].ljust(width)} {rounds}  "
                f"median new/old {v['median_ratio']:.3f}"
            )
    return lines


def _metric(r: dict[str, Any], metric: str) -> float | None:
    if metric == "drain":
        return _best_drain(r)
    if metric == "idle_p50_ms":
        return (r.get("idle") or {}).get("p50_ms")
    return r.get(metric)


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float | int):
        return f"{value:,.{digits}f}"
    return str(value)


def render(report: dict[str, Any]) -> str:
    results = report["results"]
    names = list(results)
    rows: list[tuple[str, list[str]]] = []

    def row(label: str, getter: Any, digits: int = 0) -> None:
        rows.append((label, [_fmt(getter(results[n]), digits) for n in names]))

    row("enqueue one by one, jobs/s", lambda r: r.get("enqueue_single_per_s"))
    row("enqueue in batches of 1,000, jobs/s", lambda r: r.get("enqueue_bulk_per_s"))
    for key, label in ASYNC_ENQUEUE:
        if any(r.get(key) for r in results.values()):
            row(label, lambda r, key=key: r.get(key))
    processes_keys = {k for r in results.values() for k in r if not k.startswith("drain_async")}
    for key in sorted(k for k in processes_keys if k.endswith("p_per_s")):
        n = key.split("_")[1]
        rows.append(
            (
                f"drain, {n[:-1]} process(es), jobs/s",
                [
                    _fmt(results[name].get(key))
                    + ("*" if results[name].get(f"drain_{n}_unfinished") else "")
                    for name in names
                ],
            )
        )
    for key in sorted({k for r in results.values() for k in r if k.endswith("peak_rss_mb")}):
        n = key.split("_")[1]
        row(f"worker peak RSS, drain {n[:-1]} proc., MB", lambda r, key=key: r.get(key))
    for key in sorted(k for k in processes_keys if k.endswith("p_worker_cpu_us")):
        n = key.split("_")[1]
        row(f"drain {n[:-1]} proc.: worker CPU µs/job", lambda r, key=key: r.get(key), 1)
        db_key = key.replace("worker", "database")
        row(f"drain {n[:-1]} proc.: database CPU µs/job", lambda r, key=db_key: r.get(key), 1)
        poll_key = key.replace("worker_cpu_us", "poller_cpu")
        row(
            f"drain {n[:-1]} proc.: the bench's poll, % of a core",
            lambda r, key=poll_key: None if r.get(key) is None else 100 * r[key],
            1,
        )
    if any(r.get("drain_async_1p_per_s") for r in results.values()):
        row("drain, async handlers, 1 process, jobs/s", lambda r: r.get("drain_async_1p_per_s"))
        row(
            "drain, async handlers: worker CPU µs/job",
            lambda r: r.get("drain_async_1p_worker_cpu_us"),
            1,
        )
    row("steady state: completed jobs/s", lambda r: (r.get("steady") or {}).get("completed_per_s"))
    for q in ("p50", "p95", "p99"):
        row(
            f"steady state: enqueue→start {q}, ms",
            lambda r, q=q: (r.get("steady") or {}).get(f"{q}_ms"),
            1,
        )
    for q in ("p50", "p95"):
        row(f"idle: enqueue→start {q}, ms", lambda r, q=q: (r.get("idle") or {}).get(f"{q}_ms"), 1)
    width = max(len(label) for label, _ in rows) + 2
    col = max(12, *(len(n) + 2 for n in names))
    lines = [f"jobledger benchmark — {report['date']} ({report['mode']})", ""]
    lines.append("".ljust(width) + "".join(n.rjust(col) for n in names))
    for label, cells in rows:
        lines.append(label.ljust(width) + "".join(c.rjust(col) for c in cells))
    if "floor" in report:
        lines.append("")
        lines.append("floor (jobledger's SQL from one connection, batches of 500):")
        for dialect, f in report["floor"].items():
            lines.append(
                f"  {dialect}: a bare INSERT per call {_fmt(f['enqueue_single_per_s'])} jobs/s, "
                + (
                    f"jobledger's single-enqueue statement alone "
                    f"{_fmt(f['enqueue_statement_per_s'])} jobs/s, "
                    if f.get("enqueue_statement_per_s") is not None
                    else ""
                )
                + (
                    f"ledger.enqueue in the same rounds {_fmt(f['enqueue_call_per_s'])} jobs/s, "
                    if f.get("enqueue_call_per_s") is not None
                    else ""
                )
                + f"enqueue {_fmt(f['enqueue_bulk_per_s'])} jobs/s, "
                f"drain {_fmt(f['drain_per_s'])} jobs/s"
                + (
                    f", idle enqueue→claimed p50 / p95 {f['idle_p50_ms']:.1f} / "
                    f"{f['idle_p95_ms']:.1f} ms"
                    if f.get("idle_p50_ms") is not None
                    else ""
                )
            )
    if "scale" in report:
        lines.append("")
        lines.append("claim latency (10 jobs per claim), p50 / p95 ms:")
        for dialect, cases in report["scale"].items():
            for label, c in cases.items():
                plan = ""
                if "generic_plan_uses_index" in c:
                    plan = f"  generic plan uses the index: {_fmt(c['generic_plan_uses_index'])}"
                lines.append(
                    f"  {dialect:8} {label:32} {_fmt(c['claim_p50_ms'], 2)} / "
                    f"{_fmt(c['claim_p95_ms'], 2)}{plan}"
                )
    if report["ratios"]:
        lines.append("")
        lines.append("ratios:")
        for key, value in report["ratios"].items():
            if isinstance(value, dict):
                lines.append(f"  {key}: {value['ratio']:.2f}x ({value['peer']})")
            else:
                lines.append(f"  {key}: {value:.2f}")
    if report.get("baseline"):
        lines.extend(_render_versus(report))
    if any(r.get(k) for r in results.values() for k in r if k.endswith("_unfinished")):
        lines.append("* did not finish within the drain's time limit: rated by the jobs done")
    for note in report["notes"]:
        lines.append(f"note: {note}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
