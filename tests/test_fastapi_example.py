"""examples/fastapi_app.py, served by uvicorn on a free port and driven over HTTP, on every
backend: a signup enqueues its welcome job in the request's transaction, the worker of the
service's lifespan runs it, and SIGTERM stops the service and its worker cleanly."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import httpx
import pytest

from jobledger import JobState, Ledger

from .support.processes import ROOT, wait_exit, wait_until

pytest.importorskip("fastapi")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}/docs", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_service_enqueues_in_its_transaction_and_its_lifespan_worker_runs_the_jobs(db_url):
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "JOBLEDGER_URL": db_url}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "examples.fastapi_app:app", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    emails = [f"user{n}@example.com" for n in range(5)]
    try:
        wait_until(lambda: _answers(base) or proc.poll() is not None, timeout=60, what="uvicorn")
        assert proc.poll() is None, proc.communicate()
        for email in emails:
            answer = httpx.post(f"{base}/signups", json={"email": email}, timeout=30)
            assert answer.status_code == 201 and answer.json()["created"], answer.text
        again = httpx.post(f"{base}/signups", json={"email": emails[0]}, timeout=30)
        assert again.status_code == 201 and not again.json()["created"], "one key, one job"

        def welcomed() -> int:
            return sum(
                httpx.get(f"{base}/signups/{email}", timeout=30).json()["welcomed"]
                for email in emails
            )

        wait_until(lambda: welcomed() == len(emails), what="welcomed", progress=welcomed)
        assert httpx.get(f"{base}/signups/nobody@example.com", timeout=30).status_code == 404
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code, _out, err = wait_exit(proc, 60)
    # uvicorn shuts down gracefully (the lifespan's worker stopped), then ends by the signal.
    assert code in (0, -signal.SIGTERM), err
    assert "Application shutdown complete" in err, err
    ledger = Ledger(db_url)
    try:
        jobs = ledger.jobs()
        assert sorted(j.key for j in jobs) == sorted(f"welcome:{e}" for e in emails)
        assert all(j.state is JobState.DONE and j.attempts == 1 for j in jobs)
    finally:
        ledger.close()
