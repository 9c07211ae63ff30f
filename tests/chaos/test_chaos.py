"""SPEC §8 drill 7 in CI: 4 worker processes, 3,000 jobs (every other one in one of 40 groups),
workers SIGKILLed at random and at fault points and restarted, and — on PostgreSQL — the server
crashed and restarted mid-run.
Nothing is lost and no effect happens twice. ``bench/chaos.py`` runs it longer."""

from __future__ import annotations

import json

import psycopg
import pytest

from ..support.chaos import ChaosConfig, ChaosRun, run_chaos
from ..support.history import history_dir
from .conftest import FIGURES


def check(run: ChaosRun, tmp_path) -> None:
    f = run.figures
    FIGURES.append(f.line())
    print(f.line())
    assert not run.problems, "\n".join(run.problems[:20]) + "\n" + run.log_tail
    assert f.jobs == 3000 and f.done + f.dead == f.jobs
    assert f.grouped == 1500  # every other job, claimed round 40 groups
    assert f.kills >= 3 and f.restarts == f.kills + f.fault_kills + f.startup_failures
    assert f.attempts >= f.jobs and f.lease_expiries >= 1
    assert f.duplicates == 0 and f.effects == f.done == f.provider_accepted
    # The run's data exports as JSON lines, one object per line.
    path = tmp_path / "history.jsonl"
    lines = run.export_jsonl(path)
    kinds = [json.loads(line)["kind"] for line in path.read_text().splitlines()]
    assert len(kinds) == lines
    assert kinds.count("job") == f.jobs and kinds.count("attempt") == f.attempts
    assert kinds.count("effect") == f.effects
    # The one history checker agrees: nothing lost, no effect twice, no stale completion.
    assert run.history is not None and run.history.ok, run.history and run.history.summary()
    summary = run.history.summary().splitlines()
    FIGURES.append(f"{summary[0]}; {summary[-1].strip()}")


@pytest.mark.slow
def test_chaos_sqlite(tmp_path, request):
    history = history_dir(request, tmp_path)
    run = run_chaos(f"sqlite:///{tmp_path}/chaos.db", tmp_path, ChaosConfig(), history=history)
    check(run, tmp_path)


@pytest.mark.slow
def test_chaos_postgres_with_a_server_restart(tmp_path, private_pg, request):
    history = history_dir(request, tmp_path)
    dbname = f"chaos_{tmp_path.name[-8:].replace('-', '_').lower()}"
    with psycopg.connect(private_pg.url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
    url = private_pg.url.rsplit("/", 1)[0] + f"/{dbname}"
    run = run_chaos(
        url, tmp_path, ChaosConfig(), server=private_pg, say=FIGURES.append, history=history
    )
    check(run, tmp_path)
    assert run.figures.db_restarts == 1
