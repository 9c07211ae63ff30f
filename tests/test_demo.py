"""``jobledger demo`` and the README's quick tour run on a fresh machine and tell the truth."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime

import pytest

from jobledger import Ledger
from jobledger.testing.demo.app import register
from jobledger.testing.demo.story import DemoReport, _problems, _tally, _this_weeks_tick
from jobledger.testing.fakeprovider import FakeProvider

from .support.processes import ROOT
from .support.waiting import run as run_patiently


def run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("JOBLEDGER_URL", None)
    return run_patiently([sys.executable, *args], text=True, env=env, timeout=timeout, cwd=ROOT)


def check_report(report: dict) -> None:
    assert report["problems"] == []
    active = report["active_customers"]
    assert report["customers"] == 60 and active == 54
    assert (report["scheduled"], report["scheduled_again"]) == (active, 0)
    assert (report["jobs"], report["done"], report["dead"]) == (active, active - 1, 1)
    assert report["provider_accepted"] == report["effects_recorded"] == report["done"]
    assert report["provider_duplicate_sends"] == 0
    # The timeout after acceptance is always retried and absorbed; the crash may add more.
    assert report["provider_repeats_absorbed"] >= 1 and report["provider_timeouts"] == 1
    assert report["killed_holding"] >= 1 and report["lease_expiries"] >= report["killed_holding"]
    # A 429 answer is a retry, unless the worker that got it was the one killed.
    assert 0 < report["retries"]["HTTP 429"] <= report["provider_rate_limited"]
    assert report["attempts"] >= report["jobs"] + report["lease_expiries"]
    [dead] = report["dead_jobs"]
    assert "HTTP 400" in dead["error"] and dead["attempts"] >= 1


@pytest.mark.parametrize(
    ("now", "tick"),
    [
        # Monday 00:21 in Berlin (Sunday 23:21 UTC): this week's tick is still to come.
        ("2026-12-06T23:21:00+00:00", "2026-11-30T05:00:00+00:00"),
        ("2026-12-07T04:59:59+00:00", "2026-11-30T05:00:00+00:00"),
        ("2026-12-07T05:00:00+00:00", "2026-12-07T05:00:00+00:00"),
        ("2026-12-13T22:59:00+00:00", "2026-12-07T05:00:00+00:00"),
        # Across the change to summer time (Berlin at UTC+2 from 2027-03-28).
        ("2027-03-29T03:00:00+00:00", "2027-03-22T05:00:00+00:00"),
        ("2027-03-29T04:00:00+00:00", "2027-03-29T04:00:00+00:00"),
    ],
)
def test_the_demos_tick_is_the_latest_monday_6_am_in_berlin_never_one_to_come(now, tick):
    got = _this_weeks_tick(datetime.fromisoformat(now))
    assert got == datetime.fromisoformat(tick)
    assert got <= datetime.fromisoformat(now)


@pytest.mark.slow
def test_demo_on_a_throw_away_sqlite_file():
    proc = run("-m", "jobledger", "demo", "--customers", "60", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    check_report(report)
    assert report["database"] == "a throw-away SQLite file"


@pytest.mark.slow
def test_demo_on_postgres(pg):
    proc = run("-m", "jobledger", "demo", "--customers", "60", "--json", "--url", pg.url)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    check_report(report)
    schema = report["database"].split("schema=")[1]
    import psycopg

    with psycopg.connect(pg.url) as conn:  # the demo dropped its schema
        assert not conn.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)
        ).fetchall()


def test_demo_refuses_an_existing_sqlite_file(tmp_path):
    (tmp_path / "busy.db").write_bytes(b"")
    proc = run("-m", "jobledger", "demo", "--url", f"sqlite:///{tmp_path}/busy.db")
    assert proc.returncode == 2 and "fresh database" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_report_catches_a_duplicate_send(tmp_path):
    """The report's checks can fail: a message sent twice under two keys is caught."""
    with FakeProvider() as provider, Ledger(f"sqlite:///{tmp_path}/d.db") as ledger:
        task = register(ledger, provider.url)
        ledger.enqueue_many(task, [{"payload": {"customer_id": c, "week": "W"}} for c in (1, 2)])
        for key in ("a", "b"):  # the same message, two idempotency keys
            provider._handle(key, {"to": "customer-1", "week": "W"})
        report = DemoReport(
            database="x",
            week="W",
            customers=2,
            active_customers=2,
            scheduled=2,
            scheduled_again=0,
            workers=2,
            killed_worker="pid 1",
            killed_holding=1,
            restarts=1,
            **_tally(ledger, provider),
        )
        report.problems = _problems(report, "2:W")
    assert any("duplicate messages sent" in p for p in report.problems), report.problems
    assert any("done" in p for p in report.problems)


def test_quick_tour_runs():
    proc = run("examples/quick_tour.py", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "created=True" in proc.stdout and "created=False" in proc.stdout
    assert "is done after 1 attempt" in proc.stdout


def test_quick_tour_async_runs():
    """The README's async twin of the tour (examples/quick_tour_async.py)."""
    proc = run("examples/quick_tour_async.py", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "created=True" in proc.stdout and "created=False" in proc.stdout
    assert "is done after 1 attempt" in proc.stdout
