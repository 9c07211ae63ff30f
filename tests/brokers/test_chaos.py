"""The issue's "done when": the same digest workload through each broker, with the relay, a
consumer and the broker each killed once (SIGKILL) — and no job lost, no effect twice.

Each broker runs on one backend here (the relay's and the consumers' code is the same on both,
and test_delivery.py runs every broker on both): RabbitMQ and Redis on PostgreSQL, NATS on
SQLite. The broker is a private server of the test's own, killed and started again on the same
port with its data; the shared brokers are never touched.
"""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from jobledger import JobState, Ledger
from jobledger.brokers.outbox import Outbox

from ..support.brokers import jobledger_process, unique_prefix
from ..support.processes import killed_by_sigkill, terminate, wait_exit, wait_until
from .conftest import QUEUE

pytestmark = pytest.mark.slow

APP = "tests.apps.broker_app:ledger"
CUSTOMERS = 120
WEEKS = ("2026-W33", "2026-W34")


def app_connection(ledger: Ledger):
    if ledger.url.dialect == "sqlite":
        return sqlite3.connect(ledger.url.sqlite_path)
    return psycopg.connect(ledger.url.conninfo)


def enqueue_week(ledger: Ledger, week: str) -> None:
    """Half the week's digests in the application's own transaction, half in one batch."""
    half = CUSTOMERS // 2
    conn = app_connection(ledger)
    try:
        for c in range(half):
            ledger.enqueue("send_digest", {"customer_id": c, "week": week}, conn=conn)
        conn.commit()
    finally:
        conn.close()
    ledger.enqueue_many(
        "send_digest",
        [{"payload": {"customer_id": c, "week": week}} for c in range(half, CUSTOMERS)],
    )


@pytest.mark.parametrize(
    ("broker_kind", "backend_name"),
    [("rabbitmq", "postgres"), ("nats", "sqlite"), ("redis", "postgres")],
    indirect=True,
)
def test_digests_survive_the_relay_a_consumer_and_the_broker_each_killed_once(
    db_url, private_broker, provider
):
    ledger = Ledger(db_url)
    ledger.migrate()
    ledger.task(
        lambda ctx, customer_id, week: None,
        name="send_digest",
        queue=QUEUE,
        key="{customer_id}:{week}",
    )
    box = Outbox(ledger)
    box.route(QUEUE, actor="chaos")
    url = private_broker.url(unique_prefix())
    env = {"PROVIDER_URL": provider.url, "BROKER_LEASE_SECONDS": "10", "HANDLER_SECONDS": "0.005"}
    relay_args = ("relay", "--to", url, "--batch-size", "10", "--poll-interval", "0.05")
    consume_args = ("consume", APP, "--from", url, "--rescue-interval", "0.2")

    def done() -> int:
        return sum(s.counts.get("done", 0) for s in ledger.stats() if s.queue == QUEUE)

    enqueue_week(ledger, WEEKS[0])
    relay = jobledger_process(
        db_url, *relay_args, "--lease-seconds", "1", faults="relay.after_publish=kill@3"
    )
    victim = jobledger_process(
        db_url, *consume_args, "-c", "1", env=env, faults="consumer.before_ack=kill@10"
    )
    processes = [relay, victim]
    try:
        # The relay dies after the broker confirmed its third batch, before marking it.
        code, _, err = wait_exit(relay, 60)
        assert killed_by_sigkill(code), err
        relay = jobledger_process(db_url, *relay_args, "--lease-seconds", "1")
        processes.append(relay)
        # A consumer dies after writing its 10th outcome, before acknowledging its message. It
        # consumes alone until then: with a second consumer beside it, the broker may hand the
        # other one every remaining message before this one reaches its tenth.
        code, _, err = wait_exit(victim, 60)
        assert killed_by_sigkill(code), err
        survivor = jobledger_process(db_url, *consume_args, "-c", "4", env=env)
        processes.append(survivor)

        # The broker dies mid-run; the next week is enqueued while it is down.
        wait_until(
            lambda: done() >= CUSTOMERS // 2, 60, what="half of the first week", progress=done
        )
        private_broker.kill()
        enqueue_week(ledger, WEEKS[1])
        wait_until(
            lambda: any(s.due for s in box.status()), 30, what="the outbox to wait for the broker"
        )
        private_broker.start()

        total = CUSTOMERS * len(WEEKS)
        wait_until(
            lambda: done() == total, 60, interval=0.1, what="every digest done", progress=done
        )

        def unpublished() -> int:
            return sum(s.unpublished for s in box.status())

        wait_until(lambda: not unpublished(), 30, what="the outbox", progress=unpublished)
    finally:
        for proc in processes:
            terminate(proc)
    for proc in (relay, survivor):
        code, _, err = wait_exit(proc, 60)
        assert code == 0, err
        print(err.strip().splitlines()[-1])

    jobs = ledger.jobs()
    assert len(jobs) == total and all(j.state is JobState.DONE for j in jobs)
    assert all(j.attempts == 1 for j in jobs), "a job ran twice"
    keys = {f"{c}:{w}" for c in range(CUSTOMERS) for w in WEEKS}
    assert {j.key for j in jobs} == keys
    effects = [e for j in jobs for e in ledger.backend.effects.all(QUEUE, j.key)]
    assert sorted(e["key"] for e in effects) == sorted(keys), "an effect is missing or doubled"
    stats = provider.stats()
    assert stats["accepted"] == total and stats["requests"] == total, stats
    assert stats["duplicates"] == 0
    ledger.close()
