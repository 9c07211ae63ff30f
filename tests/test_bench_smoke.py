"""``python -m bench --quick`` runs every workload on both backends, so the bench does not rot.
The full benchmark (docs/benchmarks.md) is not part of the suite; this checks that it works."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from .support.waiting import run

ROOT = Path(__file__).resolve().parents[1]


def test_quick_bench_runs_every_workload_on_both_backends(pg, tmp_path):
    out = tmp_path / "results.json"
    proc = run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out)],
        cwd=ROOT,
        env={**os.environ, "BENCH_POSTGRES_URL": pg.admin_url},
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    for dialect in ("sqlite", "postgres"):
        r = report["results"][f"jobledger/{dialect}"]
        assert "error" not in r
        for key in ("enqueue_single_per_s", "enqueue_bulk_per_s", "drain_1p_per_s"):
            assert r[key] > 0, (dialect, key, r)
        assert r["drain_2p_per_s"] > 0 and r["drain_1p_peak_rss_mb"] > 0
        assert r["steady"]["samples"] > 0 and r["steady"]["p50_ms"] > 0
        assert r["idle"]["samples"] == 5 and r["idle"]["p50_ms"] > 0
        assert report["floor"][dialect]["drain_per_s"] > 0
        assert all(c["claim_p50_ms"] > 0 for c in report["scale"][dialect].values())
    # A generic plan may scan a table of a thousand rows; with ten thousand it uses the index.
    largest = report["scale"]["postgres"]["10,000 pending + 2,000 done"]
    assert largest["generic_plan_uses_index"] is True
    assert "drain, 2 process(es), jobs/s" in proc.stdout


def test_the_groups_bench_runs_every_case_on_both_backends(pg):
    proc = run(
        [sys.executable, "-m", "bench.groups", "--jobs", "300", "--pending", "300"]
        + ["--claims", "5", "--rounds", "1"],
        cwd=ROOT,
        env={**os.environ, "BENCH_POSTGRES_URL": pg.admin_url},
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [
        line
        for line in proc.stdout.splitlines()
        if line.startswith("| sqlite") or line.startswith("| postgres")
    ]
    assert len(rows) == 6, proc.stdout
    assert all(int(row.split("|")[3].replace(",", "")) > 0 for row in rows), rows
