"""A worker process's connections to PostgreSQL stay within ``pool_size``, every role counted
(docs/deployment.md, "Connections"): idle and draining a backlog with more threads than
connections, directly and through PgBouncer in transaction mode. Each role names its
connections (``application_name`` ``jobledger-<role>``), which is how they are counted here.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from jobledger import Ledger
from jobledger.backends.url import DatabaseURL

from .apps.budget_app import register
from .support.connections import HARNESS, ConnectionSampler
from .support.pgbouncer import PgBouncer
from .support.postgres import PostgresServer, with_database, with_query
from .support.processes import wait_until, worker_process

pytestmark = pytest.mark.postgres_only

APP = "tests.apps.budget_app:ledger"
BUDGET = 6
JOBS = 1500
WAITERS = 3
ROLES = {
    "jobledger-pool",
    "jobledger-quick",
    "jobledger-listen",
    "jobledger-results",
    "jobledger-probe",
}


@contextmanager
def fresh_database(pg: PostgresServer) -> Iterator[tuple[str, str]]:
    """(its name, a direct URL) of a database nothing else uses, so that every session in it
    is the test's."""
    name = f"jl_budget_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg.admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name, with_database(pg.admin_url, name)
    finally:
        with psycopg.connect(pg.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _backlog(url: str) -> None:
    with register(Ledger(url)) as ledger:
        ledger.migrate()
        ledger.enqueue_many("work", [{"payload": {"n": n}, "key": f"w{n}"} for n in range(JOBS)])
        # Waiting on results of jobs due later holds the results LISTEN session too.
        for n in range(WAITERS):
            ledger.enqueue("work", {"n": n, "follow": False}, key=f"late{n}", delay=2 + n)
            ledger.enqueue("waits", {"key": f"late{n}"}, key=f"wait{n}")


def _done(url: str) -> int:
    with psycopg.connect(url, autocommit=True, application_name=HARNESS) as conn:
        row = conn.execute("SELECT count(*) FROM jobledger_jobs WHERE state = 'done'").fetchone()
    return int(row[0]) if row else 0


def _drain(url: str, direct: str, sampler: ConnectionSampler, *options: str) -> None:
    """A worker process with 24 threads (four times its budget) drains the backlog, then idles."""
    total = JOBS + JOBS // 10 + 2 * WAITERS
    # Warnings only: a line per job would fill the unread pipe and stall the worker.
    proc = worker_process(
        APP,
        url,
        *("-c", "24", "--batch-size", "8", "--log-level", "warning", *options),
        env={"BUDGET_WORK_SECONDS": "0.002"},
    )
    try:
        with sampler:
            wait_until(
                lambda: _done(direct) >= total,
                timeout=60,
                what="the worker to drain the backlog",
                progress=lambda: _done(direct),
            )
            loaded = sampler.peak
            idle_from = sampler.samples
            wait_until(lambda: sampler.samples > idle_from + 20, timeout=30, what="idle samples")
            idle = sampler.last
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
        print(err[-2000:])
    print(
        f"under load: {dict(loaded.server)} clients={loaded.client_total}; idle: {dict(idle.server)}"
    )
    assert sampler.samples > 50
    assert loaded.client_total <= BUDGET, (dict(loaded.server), loaded.pooler_clients)
    assert set(sampler.role_peaks) <= ROLES, sampler.role_peaks
    # Every role counted above was there: the pool grew past one connection and both
    # LISTEN sessions were open at once with it.
    assert sampler.role_peaks["jobledger-listen"] == 1
    assert sampler.role_peaks["jobledger-results"] == 1
    assert idle.client_total <= BUDGET


def test_budget_splits_pool_size_among_the_roles():
    budget = DatabaseURL.parse(f"postgresql://h/db?pool_size={BUDGET}").connection_budget
    assert (budget.pool, budget.quick, budget.listen_sessions, budget.PROBES) == (2, 1, 2, 1)
    assert budget.bound == BUDGET
    polling = DatabaseURL.parse("postgresql://h/db?pool_size=6&pooler=transaction")
    assert polling.connection_budget.statements == 5  # no LISTEN without a listen URL
    small = DatabaseURL.parse("postgresql://h/db?pool_size=2").connection_budget
    assert (small.pool, small.quick, small.bound) == (1, 1, 5)  # each pool keeps one
    named = DatabaseURL.parse("postgresql://h/db?application_name=billing")
    assert named.role("pool") == {} and DatabaseURL.parse("postgresql://h/db").role("pool") == {
        "application_name": "jobledger-pool"
    }


def test_a_worker_process_stays_within_pool_size_directly(pg):
    with fresh_database(pg) as (name, direct):
        _backlog(direct)
        url = with_query(direct, pool_size=str(BUDGET))
        _drain(url, direct, ConnectionSampler(pg.admin_url, name))


def test_a_worker_process_stays_within_pool_size_through_pgbouncer(pg, tmp_path: Path):
    with fresh_database(pg) as (name, direct), PgBouncer(pg.url, tmp_path, pool_size=2) as bouncer:
        _backlog(direct)
        url = with_query(bouncer.url(direct), pool_size=str(BUDGET), pooler="transaction")
        sampler = ConnectionSampler(pg.admin_url, name, pgbouncer_admin=bouncer.admin_url)
        _drain(url, direct, sampler, "--listen-url", direct)
        # PgBouncer's own server sessions stay within its pool.
        assert sampler.peak.pooler_servers <= 2
