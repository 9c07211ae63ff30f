"""``jobledger serve`` as real processes: restarts, several servers on one database, consumers
in other processes and another language, a 100 MB body, and keys kept out of the logs."""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import sqlite3
import sys
import threading
import time

import httpx
import psycopg
import pytest

from jobledger import JobState, Ledger
from jobledger._records import QueueSettings, digest
from jobledger._services.keys import create_api_key

from ..support.http import ServeProcess
from ..support.processes import ROOT, wait_until
from ..support.waiting import run

pytestmark = pytest.mark.slow


@pytest.fixture
def prepared(db_url):
    """A migrated database with queue ``q`` and an admin key."""
    ledger = Ledger(db_url)
    ledger.migrate()
    ledger.backend.api.queue_put(QueueSettings("q", max_attempts=3))
    key, _ = create_api_key(ledger.backend, "admin", ["admin"])
    try:
        yield ledger, key
    finally:
        ledger.close()


@pytest.fixture
def servers():
    started: list[ServeProcess] = []

    def start(url: str, *args: str, faults: str | None = None) -> ServeProcess:
        server = ServeProcess(url, *args, faults=faults)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop(kill=True)


def publish(url, key, body, idempotency_key):
    return httpx.post(
        f"{url}/v1/queue/publish",
        json=body,
        headers={"Authorization": f"Bearer {key}", "Idempotency-Key": idempotency_key},
        timeout=30,
    )


def test_replay_after_a_server_restart(db_url, prepared, servers):
    ledger, key = prepared
    body = {"queue": "q", "payload": {"customer_id": 4187}}
    first = servers(db_url)
    created = publish(first.url, key, body, "4187:2026-W33")
    assert created.status_code == 201
    first.stop(kill=True)  # a crash, not a shutdown
    second = servers(db_url)
    replay = publish(second.url, key, body, "4187:2026-W33")
    assert replay.status_code == 200 and replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json()["message_id"] == created.json()["message_id"]
    other = publish(second.url, key, body | {"payload": {"customer_id": 1}}, "4187:2026-W33")
    assert other.status_code == 422
    assert len(ledger.jobs()) == 1


def test_two_servers_publishing_one_key_at_once_make_one_job(db_url, prepared, servers):
    ledger, key = prepared
    urls = [servers(db_url).url, servers(db_url).url]
    answers: list[tuple[str, httpx.Response]] = []
    keys = [f"order-{n}" for n in range(10)]
    barrier = threading.Barrier(4)

    def go(n: int) -> None:
        with httpx.Client(timeout=30) as client:
            barrier.wait()
            for k in keys:
                response = client.post(
                    f"{urls[n % 2]}/v1/queue/publish",
                    json={"queue": "q", "payload": {"order": k}},
                    headers={"Authorization": f"Bearer {key}", "Idempotency-Key": k},
                )
                answers.append((k, response))

    threads = [threading.Thread(target=go, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    wait_until(
        lambda: not any(t.is_alive() for t in threads),
        30,
        interval=0.05,
        what="the publishers",
        progress=lambda: len(answers),
    )
    assert len(answers) == 40
    for k in keys:
        codes = sorted(r.status_code for kk, r in answers if kk == k)
        assert codes.count(201) == 1 and set(codes) <= {200, 201, 409}, (k, codes)
        ids = {r.json()["message_id"] for kk, r in answers if kk == k and r.status_code < 300}
        assert len(ids) == 1
    assert sorted(j.key for j in ledger.jobs()) == sorted(keys)


def _advisory_locks(pg_url: str) -> int:
    """Publish's key locks held in this test's database (the one-key form, objsubid 1): other
    databases on the server, and the groups' two-key locks, do not count."""
    with psycopg.connect(pg_url) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchone()[0]


def _sqlite_write_locked(path: str) -> bool:
    conn = sqlite3.connect(path, timeout=0)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        conn.close()


def test_a_key_in_flight_in_another_server_process(db_url, prepared, servers, backend_name):
    """PostgreSQL: the first publish holds the key's advisory lock inside its transaction, so the
    same key at another server is answered 409 at once. SQLite: the first holds the database's
    write lock, so the second waits for it and is answered as a replay. One job either way."""
    ledger, key = prepared
    slow = servers(db_url, faults="publish.in_transaction=sleep:2@1")
    fast = servers(db_url)
    body = {"queue": "q", "payload": {"n": 1}}
    first: dict[str, httpx.Response] = {}
    thread = threading.Thread(target=lambda: first.update(r=publish(slow.url, key, body, "k")))
    thread.start()
    if backend_name == "postgres":
        wait_until(lambda: _advisory_locks(ledger.url.conninfo) > 0, what="the key's lock")
        second = publish(fast.url, key, body, "k")
        assert second.status_code == 409, second.text
        assert second.json()["type"] == "urn:jobledger:problem:key-in-flight"
    else:
        wait_until(lambda: _sqlite_write_locked(ledger.url.path), what="the write lock")
        second = publish(fast.url, key, body, "k")
        assert second.status_code == 200, second.text
    wait_until(lambda: not thread.is_alive(), 30, interval=0.05, what="the first publish")
    assert first["r"].status_code == 201
    retry = publish(fast.url, key, body, "k")
    assert retry.status_code == 200 and retry.json() == first["r"].json()
    assert len(ledger.jobs()) == 1


def test_a_consumer_in_another_process_pulls_acks_and_nacks(db_url, prepared, servers):
    ledger, key = prepared
    server = servers(db_url)
    plan = {"a": "ack", "b": "retry-once", "c": "permanent", "d": "ack", "e": "retry-once"}
    for k, do in plan.items():
        assert publish(server.url, key, {"queue": "q", "payload": {"do": do}}, k).status_code == 201
    consumer_key, _ = create_api_key(ledger.backend, "consumer", ["consume:q"])
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    consumer = run(
        [sys.executable, "-m", "tests.apps.http_consumer", server.url, consumer_key, "q", "5"],
        cwd=ROOT,
        env=env,
        text=True,
        timeout=90,
    )
    assert consumer.returncode == 0, consumer.stderr
    summary = json.loads(consumer.stdout)
    assert summary["finished"] == {"a": "done", "b": "done", "c": "dead", "d": "done", "e": "done"}
    assert summary["deliveries"] == 7
    states = {j.key: (j.state, j.attempts) for j in ledger.jobs()}
    assert states == {
        "a": (JobState.DONE, 1),
        "b": (JobState.DONE, 2),
        "c": (JobState.DEAD, 1),
        "d": (JobState.DONE, 1),
        "e": (JobState.DONE, 2),
    }
    [b] = [j for j in ledger.jobs() if j.key == "b"]
    attempts = ledger.backend.history.attempts(b.id)
    assert [a.outcome.value for a in attempts] == ["retry", "done"]
    assert all(a.worker.endswith(":py-proc") for a in attempts)


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_a_client_in_another_language(db_url, prepared, servers):
    """JavaScript with fetch: declare a queue, publish with Idempotency-Keys through 429s,
    receive, ack, nack, and redrive a dead letter."""
    ledger, admin = prepared
    server = servers(db_url)
    publisher, _ = create_api_key(
        ledger.backend, "js-publisher", ["publish:js-orders"], rate_per_second=2, burst=2
    )
    consumer, _ = create_api_key(ledger.backend, "js-consumer", ["consume:js-orders"])
    client = run(
        [
            "node",
            str(ROOT / "tests" / "clients" / "flow.mjs"),
            server.url,
            admin,
            publisher,
            consumer,
        ],
        text=True,
        timeout=120,
    )
    assert client.returncode == 0, client.stderr + client.stdout
    stats = json.loads(client.stdout.strip().splitlines()[-1])
    assert stats["rateLimited"] >= 1 and stats["replayed"]
    jobs = {j.key: j for j in ledger.jobs() if j.queue == "js-orders"}
    assert sorted(jobs) == [f"order-{n}" for n in range(1, 6)]
    assert all(j.state is JobState.DONE for j in jobs.values())
    assert jobs["order-3"].attempts == 2
    dead_one = jobs["order-4"]
    assert stats["redriven"] == [str(dead_one.id)]
    [event] = ledger.backend.history.events(dead_one.id)
    assert event.kind == "redrive" and event.actor.startswith("node-operator via apikey:")
    outcomes = [a.outcome.value for a in ledger.backend.history.attempts(dead_one.id)]
    assert outcomes == ["dead", "done"]


def _send_until_answered(sock: socket.socket, chunk: bytes, limit: int) -> tuple[bytes, int]:
    """Send ``chunk`` repeatedly (at most ``limit`` bytes) until the server answers; return the
    answer and how much was sent."""
    sent = 0
    sock.setblocking(False)
    while sent < limit:
        readable, writable, _ = select.select([sock], [sock], [], 5)
        if readable:
            break
        if writable:
            try:
                sent += sock.send(chunk)
            except (BlockingIOError, InterruptedError):
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
    sock.setblocking(True)
    sock.settimeout(10)
    answer = b""
    try:
        while part := sock.recv(65536):
            answer += part
    except (ConnectionResetError, TimeoutError):
        pass
    return answer, sent


def test_a_100_mb_body_is_refused_quickly_with_bounded_memory(db_url, prepared, servers):
    ledger, key = prepared
    server = servers(db_url)
    host, port = server.url.removeprefix("http://").split(":")
    # Warm up so that the baseline includes what any request costs.
    assert publish(server.url, key, {"queue": "q", "payload": {}}, "warm").status_code == 201
    baseline = server.rss_peak_kib()
    hundred_mb = 100 * 1024 * 1024
    head = (
        f"POST /v1/queue/publish HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
        "Content-Type: application/json\r\n"
    )
    chunk = b'{"queue":"q","payload":{"blob":"' + b"a" * 65500
    # 1. With Content-Length: refused from the header, before the body is read.
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        start = time.monotonic()
        sock.sendall(f"{head}Content-Length: {hundred_mb}\r\n\r\n".encode())
        answer, sent = _send_until_answered(sock, chunk, hundred_mb)
        took = time.monotonic() - start
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert took < 5 and sent < 16 * 1024 * 1024, (took, sent)
    print(f"Content-Length 100 MB: 413 after {took * 1000:.0f} ms, {sent} body bytes sent")
    # 2. Chunked, no Content-Length: refused once 256 KiB have arrived.
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        start = time.monotonic()
        sock.sendall(f"{head}Transfer-Encoding: chunked\r\n\r\n".encode())
        framed = b"%x\r\n%s\r\n" % (len(chunk), chunk)
        answer, sent = _send_until_answered(sock, framed, hundred_mb)
        took = time.monotonic() - start
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert took < 5 and sent < 16 * 1024 * 1024, (took, sent)
    print(f"chunked 100 MB: 413 after {took * 1000:.0f} ms, {sent} body bytes sent")
    grown_mib = (server.rss_peak_kib() - baseline) / 1024
    print(f"server peak RSS {baseline / 1024:.1f} MiB before, grew {grown_mib:.1f} MiB")
    assert grown_mib < 32, f"peak memory grew by {grown_mib:.1f} MiB"
    # The server is still fine.
    assert publish(server.url, key, {"queue": "q", "payload": {}}, "after").status_code == 201
    assert len(ledger.jobs()) == 2


def test_keys_never_appear_in_logs(db_url, prepared, servers):
    ledger, admin = prepared
    server = servers(db_url, "--log-level", "debug")
    revoked, record = create_api_key(ledger.backend, "old", ["admin"])
    ledger.backend.api.key_revoke(record.id)
    unknown = "jlk_0123456789_" + "x" * 43
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for secret in (admin, revoked, unknown):
            headers = {"Authorization": f"Bearer {secret}", "Idempotency-Key": "k"}
            client.post("/v1/queue/publish", json={"queue": "q", "payload": {}}, headers=headers)
            client.post("/v1/queue/publish", content=b"{bad", headers=headers)
            client.put("/v1/queues/-bad", json={}, headers=headers)
            client.get("/v1/messages/1", headers={"Authorization": f"Token {secret}"})
            client.post("/v1/queue/receive", json={"queue": "q"}, headers=headers)
    server.stop()
    output = server.output
    assert '"POST /v1/queue/publish HTTP/1.1" 201' in output  # the access log was on
    for secret in (admin, revoked, unknown):
        assert secret not in output
        assert secret.split("_", 2)[2] not in output
    assert digest(admin) not in output
