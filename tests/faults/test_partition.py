"""Network partitions between worker hosts and PostgreSQL (SPEC §2 fencing, §8 drill 7's spirit).

Worker hosts are network namespaces talking to a private PostgreSQL over TCP; a partition drops
their packets (nftables), so connections hang rather than fail — the hard case, where a worker
cannot tell a slow database from a lost one. Every run writes its history and is checked.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from jobledger import JobFilter, JobState, Ledger
from jobledger._records import AttemptOutcome
from jobledger.testing.history import load

from ..apps.fault_app import QUEUE, register
from ..support.history import assert_clean, enqueue
from ..support.pgcluster import PgInstance
from ..support.processes import wait_until
from .conftest import served

pytestmark = [pytest.mark.postgres_only, pytest.mark.slow]

LEASE = 3.0


@pytest.fixture(scope="module")
def server(network, pg_base) -> Iterator[PgInstance]:
    """A private PostgreSQL listening on loopback (the harness) and the hosts' server address."""
    with served(pg_base, network, "partition") as pg:
        yield pg


@pytest.fixture
def urls(server, network) -> tuple[str, str]:
    """(the harness's URL, the hosts' URL) for a fresh schema."""
    schema = f"p_{uuid.uuid4().hex[:10]}"
    harness_url = server.url() + f"?schema={schema}"
    with Ledger(harness_url) as ledger:
        ledger.migrate()
    return harness_url, server.url(network.server_address) + f"?schema={schema}"


@pytest.fixture
def ledger(urls) -> Iterator[Ledger]:
    led = register(Ledger(urls[0]), lease=LEASE)
    try:
        yield led
    finally:
        led.close()


def host_env(provider, tmp_path, **extra: str) -> dict[str, str]:
    return {
        "PROVIDER_URL": provider.url,
        "FAULT_LEASE_SECONDS": str(LEASE),
        "FAULT_GATE_DIR": str(tmp_path),
        **extra,
    }


def test_host_cut_off_mid_lease_is_fenced_when_it_comes_back(
    network, server, urls, ledger, provider, harness, history, start_worker, tmp_path
):
    """h1 holds a job and is cut off; its lease expires; h2 rescues the job and finishes it;
    the partition heals and every late write of h1 is refused by the fencing token."""
    env = host_env(provider, tmp_path)
    h1 = start_worker(
        "h1", urls[1], env, "-c", "2", "--batch-size", "1", wrap=lambda a: network.command("h1", a)
    )
    job = enqueue(ledger, harness, "gated", {"n": 1, "gate": "g1"}, key="gated:1")
    wait_until(lambda: (tmp_path / "g1.waiting").exists(), timeout=60, what="h1 at the gate")
    assert ledger.job(job.id).leased_by == "h1:0"

    # h1 checked that no effect is recorded and waits at the gate: cut it off, then let it go.
    with network.partitioned(["h1"], port=server.port):
        harness.fault("partition", "start", target=["h1"], between="h1 and the database")
        (tmp_path / "g1").touch()
        # The provider is still reachable from h1: the effect happens; recording it hangs.
        wait_until(lambda: "gated:1:email" in provider.accepted, timeout=30, what="h1's call")
        h2 = start_worker("h2", urls[1], env, "-c", "2", wrap=lambda a: network.command("h2", a))
        done = wait_until(
            lambda: (j := ledger.job(job.id)).state is JobState.DONE and j,
            timeout=60,
            what="h2 to rescue and finish the job while h1 is cut off",
        )
        assert done.attempts == 2 and done.leased_by == "h2:1"
    harness.fault("partition", "end", target=["h1"])

    # Healed: h1's hanging writes reach the database and are refused.
    lost = wait_until(
        lambda: [e for e in ledger.history(job.id).events if e.kind == "lease_lost"],
        timeout=60,
        what="h1's late write to be refused",
    )
    assert {e.actor for e in lost} == {"h1:0"}
    assert {e.detail["attempt"] for e in lost} == {1}
    # Work goes on on both hosts once healed.
    more = [enqueue(ledger, harness, "send", {"n": n}, key=f"after:{n}") for n in range(10)]

    def more_done() -> int:
        return sum(ledger.job(j.id).state is JobState.DONE for j in more)

    wait_until(
        lambda: more_done() == len(more),
        timeout=60,
        what="jobs enqueued after the heal to finish",
        progress=more_done,
    )
    for worker in (h1, h2):
        assert worker.stop() == 0, worker.log()

    story = ledger.history(job.id)
    assert [(a.attempt, a.worker, a.outcome) for a in story.attempts] == [
        (1, "h1:0", AttemptOutcome.LEASE_EXPIRED),
        (2, "h2:1", AttemptOutcome.DONE),
    ]
    assert [(e["effect"], e["attempt"]) for e in story.effects] == [("email", 2)]
    # The provider was asked twice under one idempotency key and sent once.
    assert provider.stats()["duplicates"] >= 1
    assert len([k for k in provider.accepted if k.startswith("gated:1")]) == 1

    harness.snapshot(ledger.backend)
    report = assert_clean(history)
    records, _ = load([history])
    mine = [
        (r["event"], r.get("worker"), r.get("attempt")) for r in records if r.get("job") == job.id
    ]
    assert ("claim", "h1:0", 1) in mine and ("claim", "h2:1", 2) in mine
    assert ("lease_lost", "h1:0", 1) in mine and ("complete", "h2:1", 2) in mine
    assert ("complete", "h1:0", 1) not in mine
    assert report.faults == {"partition": 1}


def test_database_cut_off_from_every_host_longer_than_a_lease(
    network, server, urls, ledger, provider, harness, history, start_worker, tmp_path
):
    """Every host loses the database while jobs are running, for longer than any lease; the
    harness keeps enqueueing. Healed: work resumes on every host, nothing is lost, no effect
    happens twice."""
    env = host_env(provider, tmp_path, FAULT_WORK_SECONDS="0.1")
    hosts = ["h1", "h2", "h3"]
    workers = [
        start_worker(
            h,
            urls[1],
            env,
            "-c",
            "3",
            "--batch-size",
            "2",
            wrap=lambda a, h=h: network.command(h, a),
        )
        for h in hosts
    ]
    stop = threading.Event()
    acknowledged: list[int] = []

    def enqueuer() -> None:
        n = 0
        while not stop.is_set():
            if job := enqueue(ledger, harness, "send", {"n": n}, key=f"stream:{n}"):
                acknowledged.append(job.id)
            n += 1
            stop.wait(0.03)

    feeder = threading.Thread(target=enqueuer, daemon=True)
    feeder.start()
    try:
        wait_until(
            lambda: counts(ledger).get("done", 0) >= 30 and counts(ledger).get("leased", 0) > 0,
            timeout=60,
            what="work under way on the hosts",
            progress=lambda: counts(ledger).get("done", 0),
        )
        with network.partitioned(hosts, port=server.port):
            harness.fault("partition", "start", target=hosts, between="every host and the database")
            cut_at = time.time()
            leased_at_cut = counts(ledger).get("leased", 0)
            # Hold the partition for longer than a lease, and until every lease held at the
            # cut has expired by the database's clock: no host could renew any of them.
            wait_until(
                lambda: time.time() - cut_at > LEASE + 1 and not _unexpired_leases(ledger),
                timeout=60,
                what="every lease to expire during the partition",
            )
            cut_for = time.time() - cut_at
        harness.fault("partition", "end", target=hosts)
        healed_at = time.time()
        assert leased_at_cut > 0 and cut_for > LEASE

        def resumed() -> set[str]:
            records, _ = load([history])
            return {
                r["worker"].split(":")[0]
                for r in records
                if r["event"] == "complete" and r["t"] > healed_at
            }

        wait_until(
            lambda: resumed() == set(hosts),
            timeout=90,
            interval=0.5,
            what="every host to complete work again",
            progress=lambda: len(resumed()),
        )
    finally:
        stop.set()
        feeder.join()
    wait_until(
        lambda: not counts(ledger).get("pending") and not counts(ledger).get("leased"),
        timeout=60,
        interval=0.2,
        what="every job to finish",
        progress=lambda: counts(ledger).get("done", 0),
    )
    for worker in workers:
        assert worker.stop() == 0, worker.log()
    harness.snapshot(ledger.backend)
    report = assert_clean(history)
    assert report.figures["jobs_acknowledged"] == len(acknowledged)
    # Every job done (an enqueue whose outcome was unknown may have made one more), each with
    # exactly one message sent.
    assert report.ledger["state_done"] == report.ledger["jobs"] >= len(acknowledged)
    assert provider.stats()["accepted"] == report.ledger["jobs"]


def counts(ledger: Ledger) -> dict[str, int]:
    return next((s.counts for s in ledger.stats() if s.queue == QUEUE), {})


def _unexpired_leases(ledger: Ledger) -> list:
    """Leased jobs whose lease has not run out yet (this machine's clock is the database's)."""
    now = datetime.now(UTC)
    leased = ledger.jobs(JobFilter(queue=QUEUE, states=(JobState.LEASED,)))
    return [j for j in leased if j.lease_until is not None and j.lease_until > now]
