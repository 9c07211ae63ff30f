"""``python -m bench --quick`` runs every workload on both backends, so the bench does not rot.
The full benchmark (docs/benchmarks.md) is not part of the suite; this checks that it works."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

from .support.pgcluster import PrivatePostgres
from .support.waiting import run

ROOT = Path(__file__).resolve().parents[1]


def _bench(pg, module: str, *args: str, timeout: float = 120):  # type: ignore[no-untyped-def]
    """``python -m <module> <args>`` on the tests' PostgreSQL server; it must succeed."""
    proc = run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env={**os.environ, "BENCH_POSTGRES_URL": pg.admin_url},
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_quick_bench_runs_every_workload_on_both_backends(pg, tmp_path):
    out = tmp_path / "results.json"
    proc = _bench(pg, "bench", "--quick", "--out", str(out))
    report = json.loads(out.read_text())
    for dialect in ("sqlite", "postgres"):
        r = report["results"][f"jobledger/{dialect}"]
        assert "error" not in r
        for key in (
            "enqueue_single_per_s",
            "enqueue_bulk_per_s",
            "enqueue_async_single_per_s",
            "enqueue_async_concurrent_per_s",
            "enqueue_async_bulk_per_s",
            "drain_1p_per_s",
            "drain_async_1p_per_s",
        ):
            assert r[key] > 0, (dialect, key, r)
        assert r["drain_2p_per_s"] > 0 and r["drain_1p_peak_rss_mb"] > 0
        assert r["steady"]["samples"] > 0 and r["steady"]["p50_ms"] > 0
        assert r["idle"]["samples"] == 5 and r["idle"]["p50_ms"] > 0
        floor = report["floor"][dialect]
        assert floor["drain_per_s"] > 0 and floor["enqueue_single_per_s"] > 0
        assert report["ratios"][f"{dialect}_single_enqueue_vs_bare_insert"] > 0
        assert all(c["claim_p50_ms"] > 0 for c in report["scale"][dialect].values())
    # ledger.enqueue timed in the floor's alternating rounds beside the bare INSERT.
    assert report["ratios"]["postgres_enqueue_call_vs_bare_insert"] > 0
    # A generic plan may scan a table of a thousand rows; with ten thousand it uses the index.
    largest = report["scale"]["postgres"]["10,000 pending + 2,000 done"]
    assert largest["generic_plan_uses_index"] is True
    assert "drain, 2 process(es), jobs/s" in proc.stdout
    assert "async enqueue in batches of 1,000, jobs/s" in proc.stdout
    assert "drain, async handlers, 1 process, jobs/s" in proc.stdout


def test_the_groups_bench_runs_every_case_on_both_backends(pg):
    proc = _bench(
        pg, "bench.groups", "--jobs", "300", "--pending", "300", "--claims", "5", "--rounds", "1"
    )
    rows = [
        line
        for line in proc.stdout.splitlines()
        if line.startswith("| sqlite") or line.startswith("| postgres")
    ]
    assert len(rows) == 6, proc.stdout
    assert all(int(row.split("|")[3].replace(",", "")) > 0 for row in rows), rows


def test_the_held_xmin_groups_bench_runs_both_cases(pg):
    proc = _bench(pg, "bench.groups_held", "--jobs", "400", "--claimed", "200")
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| 1")]
    assert [r.split(" | ")[0] for r in rows] == ["| 1 group", "| 1,000 groups"], proc.stdout
    for row in rows:
        assert all(float(cell) > 0 for cell in row.strip(" |").split(" | ")[3:]), row


def test_the_groups_stream_bench_runs(pg):
    proc = _bench(pg, "bench.groups_stream", "--groups", "50", "--start", "100", "--claims", "520")
    [row] = [line for line in proc.stdout.splitlines() if line.startswith("| 1 | new")]
    assert all(float(cell) > 0 for cell in row.strip(" |").split(" | ")[2:]), row


def test_the_working_tree_against_a_baseline_revision_in_turn(tmp_path):
    """``--baseline REV``: jobledger at REV (here HEAD, so the two sides are the same code)
    unpacked once into a cache, measured in turn with the working tree by the same adapter."""
    commit = run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], text=True).stdout.strip()
    out = tmp_path / "results.json"
    argv = [sys.executable, "-m", "bench", "--quick", "--baseline", "HEAD"]
    argv += ["--only", "drain,enqueue", "--backends", "sqlite", "--processes", "1"]
    env = {**os.environ, "BENCH_BASELINE_DIR": str(tmp_path / "cache")}
    proc = run([*argv, "--out", str(out)], cwd=ROOT, env=env, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["baseline"]["commit"] == commit
    results = report["results"]
    assert results["jobledger/sqlite"]["source"] == str(ROOT / "src" / "jobledger")
    assert results["jobledger@HEAD/sqlite"]["source"] == str(
        tmp_path / "cache" / commit / "src" / "jobledger"
    )
    versus = report["baseline"]["versus"]["sqlite"]
    for key in ("enqueue_single_per_s", "enqueue_bulk_per_s", "drain_1p_per_s"):
        assert len(versus[key]["ratios"]) == 1 and versus[key]["median_ratio"] > 0, versus
    assert "new against old" in proc.stdout and "median new/old" in proc.stdout

    unknown = run([*argv, "--baseline", "no-such-rev"], cwd=ROOT, env=env, text=True)
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("error: --baseline no-such-rev:"), unknown.stderr


def test_the_pressure_bench_reports_every_phase_of_both_scenarios(pg, tmp_path):
    """``python -m bench.pressure --quick``: a held xmin (idle in transaction, then a
    REPEATABLE READ reader) for a few seconds; the report has every phase's figures."""
    out = tmp_path / "pressure.json"
    proc = _bench(pg, "bench.pressure", "--quick", "--peers", "", "--out", str(out), timeout=180)
    report = json.loads(out.read_text())
    runs = {(r["system"], r["scenario"]): r for r in report["runs"]}
    assert set(runs) == {("jobledger", "idle"), ("jobledger", "rr")}
    for r in runs.values():
        result = r["result"]
        assert result["enqueued"] > 0
        for phase in ("clean", "held", "recover"):
            figures = result[phase]
            assert figures["completed_per_s"] > 0 and figures["p95_ms"] > 0, (phase, figures)
            assert figures["claims"] > 0 and figures["claim_p95_ms"] > 0, (phase, figures)
            assert figures["relations"]["jobledger_jobs"]["bytes"] > 0
            assert "jobledger_jobs_due" in figures["relations"]
        assert "recovered_after_s" in result and "size_after_vs_clean" in result
    assert runs[("jobledger", "rr")]["result"]["rr_scans"] > 0
    assert "back to clean figures" in proc.stdout


def test_the_sqlite_lock_bench_times_the_write_lock_and_each_thread(tmp_path):
    """``python -m bench.sqlite_lock``: a small drain; the lock's holders, the waits and each
    thread's CPU are all reported, and the run alone beside it."""
    out = tmp_path / "lock.json"
    proc = run(
        [sys.executable, "-m", "bench.sqlite_lock", "--jobs", "2000", "--rounds", "1"]
        + ["--out", str(out)],
        cwd=ROOT,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [r] = json.loads(out.read_text())["rounds"]
    drain, alone = r["drain"], r["alone"]
    assert drain["jobs_per_s"] > 0 and 0 < drain["lock_held_share"] <= 1
    assert drain["claim_in_lock_us"] > 0 and drain["completion_in_lock_us"] > 0
    assert {"fetch loop", "completer", "runners", "process"} <= set(drain["cpu_us"])
    assert all(v > 0 for v in drain["cpu_us"].values()), drain["cpu_us"]
    assert alone["claim_in_lock_us"] > 0 and alone["completion_in_lock_us"] > 0
    assert "write lock held" in proc.stdout


def test_the_index_cost_bench_drains_each_variant_of_the_jobs_table(tmp_path):
    """``python -m bench.index_cost``: each variant of the jobs table is drained whole, and a
    variant without an index writes less WAL per job than the table as migrated (the index's
    entries are what it no longer writes). On a private server: the WAL it reads is the whole
    server's, and on the shared one the tests running beside it wrote into it too (the
    variant without the unique key once measured 1,335 bytes a job against 1,292)."""
    out = tmp_path / "index_cost.json"
    server = PrivatePostgres()
    try:
        proc = _bench(
            SimpleNamespace(admin_url=server.url),
            "bench.index_cost",
            *("--jobs", "2000", "--rounds", "1", "--out", str(out)),
            timeout=180,
        )
    finally:
        server.close()
    rounds = json.loads(out.read_text())["rounds"]
    assert set(rounds) == {
        "migrated",
        "unique_key",
        "plain_key",
        "key_no_dedup",
        "leased",
        "triggers",
        "keys_table",
    }
    for name, [figures] in rounds.items():
        assert figures["jobs"] == 2000, (name, figures)
        assert figures["wal_bytes"] > 0 and figures["wall_us"] > 0, (name, figures)
    for without in ("unique_key", "leased", "keys_table"):
        assert rounds[without][0]["wal_bytes"] < rounds["migrated"][0]["wal_bytes"], without
    assert "without the unique key (queue, key)" in proc.stdout


def test_the_single_parts_bench_measures_every_variant_of_the_single_enqueue(pg, tmp_path):
    """``python -m bench.single_parts``: every variant of the single enqueue's statement is
    sent (each call inserts its row), beside the whole call and the call's Python alone."""
    out = tmp_path / "single_parts.json"
    proc = _bench(
        pg, "bench.single_parts", "--rounds", "2", "--calls", "5", "--out", str(out), timeout=120
    )
    [figures] = json.loads(out.read_text())["runs"]
    assert set(figures) == {
        "bare",
        "bare_notify",
        "bare_on_conflict",
        "statement",
        "as_ctes",
        "no_notify",
        "no_key_probe",
        "no_tombstone_probe",
        "call",
        "python_us",
    }
    assert all(us > 0 for us in figures.values()), figures
    assert "jobledger's statement, every check" in proc.stdout
