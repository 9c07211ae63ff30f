"""Several worker processes from code (``jobledger.WorkerProcesses``), real processes on every
backend: they drain a backlog and stop, a burst run ends by itself, a child that dies is
reported (and replaced when it had been running), SIGTERM to the parent is passed on."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from jobledger import JobState, Ledger, WorkerProcesses
from jobledger._runtime import processes as processes_mod

from ..support.processes import ROOT, wait_until

APP = "tests.apps.drill_app:ledger"


def _env(barrier: Path | None = None) -> dict[str, str]:
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if barrier is not None:
        env["DRILL_START_BARRIER"] = str(barrier)
    return env


def _ready(barrier: Path) -> int:
    return len(list(barrier.parent.glob(f"{barrier.name}.ready.*")))


def _backlog(ledger: Ledger, n: int) -> None:
    ledger.task(lambda ctx, n: None, name="noop", queue="drill")
    ledger.enqueue_many("noop", [{"payload": {"n": i}, "key": f"n{i}"} for i in range(n)])


def _done(ledger: Ledger) -> int:
    return sum(j.state is JobState.DONE for j in ledger.jobs())


def _pids_of_attempts(ledger: Ledger) -> set[int]:
    workers = {a.worker for j in ledger.jobs() for a in ledger.history(j.id).attempts}
    return {int(w.split(":")[1]) for w in workers if w}


def _up(procs: WorkerProcesses, barrier: Path, n: int) -> None:
    """Wait until ``n`` children have imported the app, then let them all start together."""
    wait_until(lambda: _ready(barrier) >= n, timeout=60, what=f"{n} worker processes up")
    barrier.touch()


@pytest.mark.slow
def test_processes_from_code_drain_a_backlog_and_stop(ledger, db_url, tmp_path):
    _backlog(ledger, 300)
    barrier = tmp_path / "start"
    procs = WorkerProcesses(
        APP, processes=2, url=db_url, concurrency=2, poll_interval=0.05, env=_env(barrier)
    )
    with procs:
        assert procs.running and len(procs.pids) == 2
        started = set(procs.pids)
        _up(procs, barrier, 2)
        wait_until(
            lambda: _done(ledger) == 300,
            timeout=60,
            what="the backlog drained",
            progress=lambda: _done(ledger),
        )
    assert not procs.running and procs.status == 0
    assert sorted(e.pid for e in procs.exits) == sorted(started)
    assert all(e.code == 0 and not e.restarted for e in procs.exits)
    assert all(j.attempts == 1 for j in ledger.jobs())
    ran = _pids_of_attempts(ledger)
    assert ran <= started
    if ledger.url.dialect == "postgres":
        # SQLite does not share its write lock fairly between processes (docs/backends.md).
        assert ran == started
    assert procs.stop() == 0, "stop is idempotent"


@pytest.mark.slow
def test_burst_processes_end_when_nothing_is_due(ledger, db_url, tmp_path):
    _backlog(ledger, 100)
    procs = WorkerProcesses(APP, processes=2, url=db_url, burst=True, env=_env()).start()
    wait_until(
        lambda: not procs.running, timeout=60, what="burst end", progress=lambda: _done(ledger)
    )
    assert procs.wait(timeout=0) == 0
    assert _done(ledger) == 100 and len(procs.exits) == 2


@pytest.mark.slow
def test_a_child_that_dies_is_reported_and_replaced(ledger, db_url, tmp_path, monkeypatch, caplog):
    # Replaced however soon it dies (5 s of life are asked for otherwise).
    monkeypatch.setattr(processes_mod, "MIN_LIFETIME", 0.0)
    barrier = tmp_path / "start"
    barrier.touch()
    procs = WorkerProcesses(APP, processes=2, url=db_url, poll_interval=0.05, env=_env(barrier))
    with procs:
        wait_until(lambda: _ready(barrier) >= 2, timeout=60, what="2 worker processes up")
        victim = procs.pids[0]
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: procs.exits, what="the death noticed")
        [died] = procs.exits
        assert died.pid == victim and died.code == -signal.SIGKILL and died.restarted
        assert len(procs.pids) == 2 and victim not in procs.pids
        wait_until(lambda: _ready(barrier) >= 3, timeout=60, what="the replacement up")
    assert procs.status == 0, "a child replaced is not a failure"
    assert f"worker process {victim} exited with -9; starting another" in caplog.text


def test_a_child_that_cannot_start_is_reported_and_not_replaced(tmp_path, caplog):
    procs = WorkerProcesses(
        "tests.apps.no_such_app:ledger",
        processes=1,
        url=f"sqlite:///{tmp_path}/ledger.db",
        env=_env(),
    ).start()
    wait_until(lambda: not procs.running, timeout=60, what="the child's exit")
    assert procs.wait() == 2
    [failed] = procs.exits
    assert failed.code == 2 and not failed.restarted
    assert f"worker process {failed.pid} exited with 2" in caplog.text


@pytest.mark.slow
def test_run_passes_sigterm_on_to_the_processes(ledger, db_url, tmp_path):
    started, go = tmp_path / "started", tmp_path / "go"
    ledger.task(lambda ctx, n: None, name="send", queue="drill")
    jobs = [ledger.enqueue("send", {"n": n}, key=f"block{n}").id for n in range(2)]
    env = {**_env(), "LIFECYCLE_STARTED": str(started), "LIFECYCLE_GO": str(go)}
    procs = WorkerProcesses(
        "tests.apps.lifecycle_app:ledger",
        processes=2,
        url=db_url,
        concurrency=1,
        poll_interval=0.05,
        env=env,
    )
    before = signal.getsignal(signal.SIGTERM)

    def terminate_when_up() -> None:
        # Each child runs one blocking job: both are up, with their signal handlers in place.
        wait_until(
            lambda: len({ledger.job(i).leased_by for i in jobs} - {None}) == 2,
            timeout=60,
            what="each worker process to hold one job",
        )
        wait_until(lambda: signal.getsignal(signal.SIGTERM) is not before, what="the forwarder")
        os.kill(os.getpid(), signal.SIGTERM)
        go.touch()

    helper = threading.Thread(target=terminate_when_up, daemon=True)
    helper.start()
    try:
        assert procs.run() == 0  # in the main thread: SIGTERM is passed on, not taken
    finally:
        go.touch()
    helper.join(10)
    assert signal.getsignal(signal.SIGTERM) is before
    assert len(procs.exits) == 2 and all(e.code == 0 for e in procs.exits)
    assert all(ledger.job(i).state is JobState.DONE for i in jobs)


@pytest.mark.slow
def test_stop_from_another_thread_ends_run(ledger, db_url, tmp_path):
    barrier = tmp_path / "start"
    barrier.touch()
    procs = WorkerProcesses(APP, processes=2, url=db_url, poll_interval=0.05, env=_env(barrier))

    def stop_when_up() -> None:
        wait_until(lambda: _ready(barrier) >= 2, timeout=60, what="2 worker processes up")
        procs.stop(timeout=60)

    helper = threading.Thread(target=stop_when_up, daemon=True)
    helper.start()
    assert procs.run() == 0
    helper.join(60)
    assert not procs.running and len(procs.exits) == 2


def test_a_bad_app_path_is_refused():
    with pytest.raises(ValueError, match="MODULE:LEDGER"):
        WorkerProcesses("tests.apps.drill_app")
    with pytest.raises(ValueError, match="processes must be"):
        WorkerProcesses(APP, processes=0)
    with pytest.raises(ValueError, match="processes must be .* got True"):
        WorkerProcesses(APP, processes=True)
