"""Faults at scale: many worker hosts through PgBouncer (transaction mode) against one private
PostgreSQL, LISTEN on the server directly, while the harness keeps enqueueing. One run per
fault — PgBouncer restarted mid-run, one host cut off for longer than a lease, one host
SIGKILLed while it holds leases — and every run's history passes the checker: nothing lost, no
effect twice, no completion by a stale token.

``JOBLEDGER_FAULT_HOSTS`` hosts, default 8 (the three runs take about 80 s on two cores, within
CI's budget; a smaller number makes a quicker local run).
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jobledger import JobFilter, JobState, Ledger
from jobledger.testing.history import HistoryRecorder

from ..apps.fault_app import QUEUE, register
from ..support import netns
from ..support.history import assert_clean, enqueue
from ..support.pgbouncer import PgBouncer, pgbouncer_binary
from ..support.pgcluster import PgInstance
from ..support.processes import wait_until
from .conftest import require, served

pytestmark = [pytest.mark.postgres_only, pytest.mark.slow]

LEASE = 3.0
HOSTS = int(os.environ.get("JOBLEDGER_FAULT_HOSTS", "8"))


@pytest.fixture(scope="module")
def hosts() -> list[str]:
    return [f"w{i}" for i in range(HOSTS)]


@pytest.fixture(scope="module")
def network(hosts) -> Iterator[netns.Network]:
    require(netns.unavailable())
    with netns.Network(hosts) as net:
        yield net


@pytest.fixture(scope="module")
def server(network, pg_base) -> Iterator[PgInstance]:
    with served(pg_base, network, "hosts", {"max_connections": "200"}) as pg:
        yield pg


@pytest.fixture
def bouncer(server, network) -> Iterator[PgBouncer]:
    pgbouncer_binary()  # skips, or fails under JOBLEDGER_REQUIRE_PGBOUNCER, without one
    with PgBouncer(
        server.url(), Path(tempfile.mkdtemp()), pool_size=8, listen=network.server_address
    ) as b:
        yield b


class Setup:
    """A fresh schema; the harness's URL (direct, loopback) and the hosts' (through PgBouncer,
    with a direct listen URL)."""

    def __init__(self, server: PgInstance, network: netns.Network, bouncer: PgBouncer):
        schema = f"h_{uuid.uuid4().hex[:10]}"
        self.harness_url = server.url() + f"?schema={schema}"
        with Ledger(self.harness_url) as ledger:
            ledger.migrate()
        direct = server.url(network.server_address) + f"?schema={schema}"
        self.listen_url = direct
        self.hosts_url = bouncer.url(direct) + "&pooler=transaction&pool_size=5"


@pytest.fixture
def setup(server, network, bouncer) -> Setup:
    return Setup(server, network, bouncer)


@pytest.fixture
def ledger(setup) -> Iterator[Ledger]:
    led = register(Ledger(setup.harness_url), lease=LEASE)
    try:
        yield led
    finally:
        led.close()


def counts(ledger: Ledger) -> dict[str, int]:
    return next((s.counts for s in ledger.stats() if s.queue == QUEUE), {})


class Feeder:
    """Enqueues a job every 20 ms on a thread until stopped, recording each outcome."""

    def __init__(self, ledger: Ledger, harness: HistoryRecorder):
        self.ledger, self.harness = ledger, harness
        self.acknowledged: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            if job := enqueue(self.ledger, self.harness, "send", {"n": n}, key=f"stream:{n}"):
                self.acknowledged.append(job.id)
            n += 1
            self._stop.wait(0.02)

    def __enter__(self) -> Feeder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _run(
    network, hosts, setup, ledger, provider, harness, history, start_worker, tmp_path,
    fault: Callable[[list], str | None],
) -> None:  # fmt: skip
    """Workers on every host; work under way; ``fault(workers)`` (returns the host whose worker
    it killed, if any); every job finished; the history checked."""
    env = {
        "PROVIDER_URL": provider.url,
        "FAULT_LEASE_SECONDS": str(LEASE),
        "FAULT_GATE_DIR": str(tmp_path),
        "FAULT_WORK_SECONDS": "0.1",
    }
    workers = [
        start_worker(
            h,
            setup.hosts_url,
            env,
            "-c",
            "3",
            "--batch-size",
            "2",
            "--listen-url",
            setup.listen_url,
            wrap=lambda a, h=h: network.command(h, a),
        )  # fmt: skip
        for h in hosts
    ]
    with Feeder(ledger, harness) as feeder:
        wait_until(
            lambda: counts(ledger).get("done", 0) >= 10 * len(hosts),
            timeout=90,
            what="work under way on the hosts",
            progress=lambda: counts(ledger).get("done", 0),
        )
        killed = fault(workers)
        done_at_heal = counts(ledger).get("done", 0)
        # Work goes on after the fault: at least as much again as before it.
        wait_until(
            lambda: counts(ledger).get("done", 0) >= done_at_heal + 10 * len(hosts),
            timeout=90,
            what="work to go on after the fault",
            progress=lambda: counts(ledger).get("done", 0),
        )
    wait_until(
        lambda: not counts(ledger).get("pending") and not counts(ledger).get("leased"),
        timeout=90,
        interval=0.2,
        what="every job to finish",
        progress=lambda: counts(ledger).get("done", 0),
    )
    for worker in workers:
        if worker.name != killed:
            assert worker.stop() == 0, worker.log()
    harness.snapshot(ledger.backend)
    report = assert_clean(history)
    assert report.figures["jobs_acknowledged"] == len(feeder.acknowledged)
    assert report.ledger is not None
    assert report.ledger["state_done"] == report.ledger["jobs"] >= len(feeder.acknowledged)
    assert provider.stats()["accepted"] == report.ledger["jobs"]


def test_pgbouncer_restarted_mid_run(
    network, hosts, setup, bouncer, ledger, provider, harness, history, start_worker, tmp_path
):
    """PgBouncer stops (every client connection through it breaks) and starts again."""

    def restart(workers: list) -> None:
        harness.fault("pgbouncer_restart", "start", target=["pgbouncer"])
        bouncer.restart()
        harness.fault("pgbouncer_restart", "end", target=["pgbouncer"])

    _run(network, hosts, setup, ledger, provider, harness, history, start_worker, tmp_path,
         restart)  # fmt: skip


def test_one_host_cut_off_longer_than_a_lease(
    network, hosts, setup, ledger, provider, harness, history, start_worker, tmp_path
):
    """One host loses the database, the pooler and the provider for longer than a lease while
    it holds leases; the others rescue its jobs; healed, its late writes are refused."""
    host = hosts[-1]

    def cut(workers: list) -> None:
        leased = wait_until(
            lambda: _leased_by(ledger, host), timeout=60, what=f"{host} to hold leases"
        )
        with network.partitioned([host]):
            harness.fault("partition", "start", target=[host], between=f"{host} and the servers")
            cut_at = time.time()
            wait_until(
                lambda: all(ledger.job(j).state is not JobState.LEASED
                            or ledger.job(j).leased_by != leased[j] for j in leased),
                timeout=60,
                what=f"the jobs {host} held to be rescued",
            )  # fmt: skip
            wait_until(lambda: time.time() - cut_at > LEASE + 1, timeout=30, what="a lease")
        harness.fault("partition", "end", target=[host])

    _run(network, hosts, setup, ledger, provider, harness, history, start_worker, tmp_path, cut)


def test_one_host_killed_holding_leases(
    network, hosts, setup, ledger, provider, harness, history, start_worker, tmp_path
):
    """One host's worker is SIGKILLed while it holds leases; the others rescue its jobs."""
    host = hosts[0]

    def kill(workers: list) -> str:
        wait_until(lambda: _leased_by(ledger, host), timeout=60, what=f"{host} to hold leases")
        worker = next(w for w in workers if w.name == host)
        harness.fault("sigkill", "instant", target=[host])
        worker.kill()
        return host

    _run(network, hosts, setup, ledger, provider, harness, history, start_worker, tmp_path, kill)


def _leased_by(ledger: Ledger, host: str) -> dict[int, str]:
    """The jobs leased by ``host``'s worker now, with the worker's name."""
    leased = ledger.jobs(JobFilter(queue=QUEUE, states=(JobState.LEASED,)))
    return {
        j.id: j.leased_by
        for j in leased
        if j.leased_by is not None and j.leased_by.split(":")[0] == host
    }
