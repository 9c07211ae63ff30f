"""``jobledger drill``: SPEC §8 drills 1–5 pass on each backend, clean up after themselves, and
a broken guarantee makes the command fail."""

from __future__ import annotations

import json
import os
import sys

import pytest

from jobledger.testing.fakeprovider import FakeProvider

from ..support.processes import ROOT
from ..support.waiting import run


@pytest.mark.slow
def test_drill_passes_and_cleans_up(ledger, db_url):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("JOBLEDGER_URL", None)
    proc = run(
        [sys.executable, "-m", "jobledger", "drill", "--url", db_url, "--json"],
        text=True,
        env=env,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["passed"] is True
    assert [d["number"] for d in report["drills"]] == [1, 2, 3, 4, 5]
    for drill in report["drills"]:
        assert drill["passed"], drill
        assert not any(line.startswith("FAILED") for line in drill["evidence"]), drill
    assert ledger.jobs() == []  # the drills deleted their jobs


class ForgetfulProvider(FakeProvider):
    """A provider that ignores Idempotency-Key: every request sends a message."""

    def _handle(self, key, body):
        return super()._handle(None, body)


def test_a_broken_guarantee_fails_the_drill(cli, tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path}/jobs.db"
    assert cli("migrate", "--url", url).code == 0
    monkeypatch.setattr("jobledger.testing.drill.runner.FakeProvider", ForgetfulProvider)
    run = cli("drill", "--url", url, "--only", "3", "--only", "1")
    assert run.code == 1, run.out + run.err
    assert "drill 1" in run.out and "drill 3" in run.out
    assert "FAILED" in run.out and "1 of 2 drills failed" in run.out
    assert "Traceback" not in run.out + run.err
