"""PostgreSQL failover: a primary and a streaming replica started here, the primary killed and
the replica promoted while workers run. Workers and the harness name both servers in one
libpq multi-host URL with ``target_session_attrs=read-write``, so they reconnect to whichever
accepts writes.

With synchronous replication nothing acknowledged is lost; with asynchronous replication an
acknowledged enqueue can be — the second test shows both, and that the checker sees it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobledger import JobState, Ledger
from jobledger._records import AttemptOutcome
from jobledger.testing.fakeprovider import FakeProvider
from jobledger.testing.history import HistoryRecorder, check_paths, load

from ..apps.fault_app import QUEUE, register
from ..support.history import assert_clean, enqueue
from ..support.pgcluster import PgInstance
from ..support.processes import wait_until

pytestmark = [pytest.mark.postgres_only, pytest.mark.slow]

LEASE = 3.0


class Pair:
    """A primary and its streaming standby, and the URL that finds whichever takes writes."""

    def __init__(self, base: Path, synchronous: bool):
        self.primary = PgInstance(base, f"primary-{'sync' if synchronous else 'async'}")
        self.standby = PgInstance(base, f"standby-{'sync' if synchronous else 'async'}")
        self.primary.initdb({"synchronous_standby_names": "replica1" if synchronous else ""})
        self.primary.start()
        self.standby.standby_of(self.primary, "replica1")
        self.standby.start()
        wanted = "sync" if synchronous else "async"
        wait_until(
            lambda: self.primary.query(
                "SELECT 1 FROM pg_stat_replication WHERE application_name = 'replica1' "
                "AND state = 'streaming' AND sync_state = %s",
                (wanted,),
            ),
            timeout=60,
            what=f"the standby to stream ({wanted})",
        )

    def url(self, schema: str) -> str:
        hosts = f"127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
        return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write&schema={schema}"

    def close(self) -> None:
        self.standby.remove()
        self.primary.remove()


@pytest.fixture
def pair_factory(pg_base) -> Iterator:
    made: list[Pair] = []

    def make(synchronous: bool) -> Pair:
        made.append(Pair(pg_base, synchronous))
        return made[-1]

    yield make
    for pair in made:
        pair.close()


def test_failover_loses_no_acknowledged_work_and_rescues_leases_held_across_it(
    pair_factory, harness, history, start_worker, tmp_path
):
    pair = pair_factory(synchronous=True)
    url = pair.url("failover")
    ledger = register(Ledger(url), lease=LEASE)
    ledger.migrate()
    env = {"PROVIDER_URL": "", "FAULT_LEASE_SECONDS": str(LEASE), "FAULT_GATE_DIR": str(tmp_path)}
    with (
        HistoryRecorder(history, host="provider") as effects,
        FakeProvider(history=effects) as provider,
    ):
        env["PROVIDER_URL"] = provider.url
        # A worker beside the primary, which dies with it, holding a job across the switch.
        doomed = start_worker("w0", url, env, "-c", "1", "--batch-size", "1")
        held = enqueue(ledger, harness, "gated", {"n": 0, "gate": "g0"}, key="held:0")
        wait_until(lambda: ledger.job(held.id).leased_by == "w0:0", timeout=60, what="w0's claim")
        survivors = [
            start_worker(f"w{i}", url, env, "-c", "3", "--batch-size", "2") for i in (1, 2)
        ]

        stop = threading.Event()
        acknowledged: list[int] = []

        def enqueuer() -> None:
            n = 0
            while not stop.is_set():
                key = f"stream:{n}"
                # An application retries an enqueue whose outcome it does not know: same key.
                while (job := enqueue(ledger, harness, "send", {"n": n}, key=key)) is None:
                    if stop.wait(0.1):
                        return
                acknowledged.append(job.id)
                n += 1
                stop.wait(0.03)

        feeder = threading.Thread(target=enqueuer, daemon=True)
        feeder.start()
        try:
            wait_until(
                lambda: counts(ledger).get("done", 0) >= 40,
                timeout=60,
                what="work under way before the failover",
                progress=lambda: counts(ledger).get("done", 0),
            )
            harness.fault("primary_killed", target=f"127.0.0.1:{pair.primary.port}")
            doomed.kill()
            pair.primary.kill()
            harness.fault("worker_killed", target="w0:0")
            # No primary for longer than a lease (detecting a dead primary takes time): the
            # leases of running jobs run out, enqueues and outcome writes fail and are retried.
            time.sleep(LEASE + 1)
            promoted_at = time.time()
            pair.standby.promote()
            harness.fault("promoted", target=f"127.0.0.1:{pair.standby.port}")

            def resumed() -> set[str]:
                records, _ = load([history])
                return {
                    r["worker"]
                    for r in records
                    if r["event"] == "complete" and r["t"] > promoted_at
                }

            wait_until(
                lambda: resumed() >= {"w1:1", "w2:2"},
                timeout=90,
                interval=0.5,
                what="both survivors to work again",
                progress=lambda: len(resumed()),
            )
        finally:
            stop.set()
            feeder.join()
        # The held job's lease survived the switch; it expires and is rescued on the new primary.
        (tmp_path / "g0").touch()
        wait_until(
            lambda: not counts(ledger).get("pending") and not counts(ledger).get("leased"),
            timeout=60,
            interval=0.2,
            what="every job to finish",
            progress=lambda: counts(ledger).get("done", 0),
        )
        for worker in survivors:
            assert worker.stop() == 0, worker.log()
        harness.snapshot(ledger.backend)
        story = ledger.history(held.id)
        ledger.close()

    assert [(a.attempt, a.worker, a.outcome) for a in story.attempts][0] == (
        1,
        "w0:0",
        AttemptOutcome.LEASE_EXPIRED,
    )
    assert story.job.state is JobState.DONE and story.attempts[-1].worker in ("w1:1", "w2:2")
    report = assert_clean(history)
    assert report.figures["jobs_acknowledged"] == len(acknowledged) + 1
    assert report.ledger["state_done"] == len(acknowledged) + 1
    assert provider.stats()["accepted"] == len(acknowledged) + 1


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_what_a_lagging_replica_loses(mode, pair_factory, request, tmp_path):
    """The replica falls behind (it is stopped); enqueues go on; the primary dies; the replica is
    promoted. Synchronous: no enqueue is acknowledged while the replica lags, so nothing
    acknowledged is lost. Asynchronous: the acknowledged enqueues are gone, and enqueueing the
    same keys again makes second jobs for them — the checker reports both. (That history is
    kept out of the ones CI checks: its violations are the expected result.)"""
    if mode == "sync":
        history = request.getfixturevalue("history")
    else:
        history = tmp_path / "history-async"
        history.mkdir()
    harness = HistoryRecorder(history, host="harness")
    pair = pair_factory(synchronous=mode == "sync")
    url = pair.url("lag")
    ledger = register(Ledger(url), lease=LEASE)
    ledger.migrate()
    before = [enqueue(ledger, harness, "send", {"n": n}, key=f"before:{n}") for n in range(5)]
    lsn = pair.primary.query("SELECT pg_current_wal_lsn()")[0][0]
    wait_until(
        lambda: pair.standby.query("SELECT pg_last_wal_replay_lsn() >= %s", (lsn,))[0][0],
        timeout=30,
        what="the replica to catch up",
    )
    pair.standby.stop()
    harness.fault("replica_stopped")

    keys = [f"during:{n}" for n in range(10)]
    done = threading.Event()

    def writes() -> None:
        for n, key in enumerate(keys):
            if enqueue(ledger, harness, "send", {"n": n}, key=key) is None:
                break
        done.set()

    writer = threading.Thread(target=writes, daemon=True)
    writer.start()
    if mode == "sync":
        # The first commit waits for the replica, and will never be acknowledged.
        wait_until(
            lambda: pair.primary.query(
                "SELECT 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
            ),
            timeout=30,
            what="a commit to wait for the replica",
        )
    else:
        assert done.wait(30), "asynchronous enqueues should not wait for the replica"
    pair.primary.kill()
    harness.fault("primary_killed")
    writer.join(60)
    assert not writer.is_alive()
    pair.standby.start()
    pair.standby.promote()
    harness.fault("promoted")
    # The application enqueues the same keys again, as it would after any doubt.
    for n, key in enumerate(keys):
        wait_until(
            lambda n=n, key=key: enqueue(ledger, harness, "send", {"n": n}, key=key),
            timeout=60,
            interval=0.2,
            what="the new primary to take enqueues",
        )
    harness.snapshot(ledger.backend, expect_final=False)
    harness.close()
    ledger.close()

    report = check_paths([history], history.name)
    print(report.summary())
    assert all(j is not None for j in before)
    kinds = {k: len(v) for k, v in report.by_kind().items()}
    if mode == "sync":
        assert kinds == {}, report.summary()
        assert report.figures["enqueue_unknown"] >= 1  # the one that waited for the replica
    else:
        assert kinds == {"lost_job": len(keys), "key_with_several_jobs": len(keys)}, (
            report.summary()
        )


def counts(ledger: Ledger) -> dict[str, int]:
    return next((s.counts for s in ledger.stats() if s.queue == QUEUE), {})
