"""``jobledger outbox``, ``jobledger relay`` and ``jobledger consume`` from the command line."""

from __future__ import annotations

import json

import pytest

from jobledger import Ledger
from jobledger.cli import main

from .conftest import QUEUE


def run(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


@pytest.fixture
def digests(ledger: Ledger) -> Ledger:
    ledger.task(lambda ctx, n: None, name="send_digest", queue=QUEUE)
    for n in range(3):
        ledger.enqueue("send_digest", {"n": n}, key=f"k{n}")
    return ledger


def test_route_status_list_and_unroute(digests, db_url, capsys):
    code, out, err = run(capsys, "outbox", "route", QUEUE, "--url", db_url, "--actor", "ops")
    assert code == 0, err
    assert out.strip() == f"routed {QUEUE} to the broker; 3 pending job(s) queued"
    code, out, _ = run(capsys, "outbox", "route", QUEUE, "--url", db_url, "--actor", "ops")
    assert code == 0 and "already routed (by ops)" in out

    code, out, _ = run(capsys, "outbox", "status", "--url", db_url, "--json")
    data = json.loads(out)
    assert [r["queue"] for r in data["routes"]] == [QUEUE]
    [stats] = data["outbox"]
    assert (stats["unpublished"], stats["due"]) == (3, 3)
    code, out, _ = run(capsys, "outbox", "status", "--url", db_url)
    assert code == 0 and QUEUE in out

    code, out, _ = run(capsys, "outbox", "list", "--url", db_url, "--job", "k1", "--json")
    [record] = json.loads(out)
    assert (record["key"], record["reason"], record["published_at"]) == ("k1", "route", None)
    code, out, _ = run(capsys, "outbox", "list", "--url", db_url)
    assert code == 0 and "k2" in out

    code, out, _ = run(capsys, "outbox", "unroute", QUEUE, "--url", db_url)
    assert code == 0 and out.strip() == f"unrouted {QUEUE}; discarded 3 unpublished record(s)"
    code, _, err = run(capsys, "outbox", "unroute", QUEUE, "--url", db_url)
    assert code == 2 and err.strip() == f"error: queue {QUEUE!r} is not routed to a broker"


def test_relay_once_publishes_what_is_due(digests, db_url, capsys):
    """Against the shared Redis: the relay publishes and marks, then exits."""
    from ..support.brokers import SHARED, answers, cleanup, unique_prefix
    from .conftest import Broker, _unavailable

    host, port = SHARED["redis"]
    if not answers(host, port):
        _unavailable("no Redis")
    broker = Broker("redis", host, port, unique_prefix())
    try:
        run(capsys, "outbox", "route", QUEUE, "--url", db_url)
        code, _, err = run(capsys, "relay", "--to", broker.url(), "--url", db_url, "--once")
        assert code == 0, err
        assert "relay done: published 3" in err
        assert broker.backlog() == 3
        code, out, _ = run(capsys, "outbox", "status", "--url", db_url, "--json")
        assert json.loads(out)["outbox"][0]["unpublished"] == 0
    finally:
        cleanup("redis", host, port, broker.prefix, [QUEUE])


@pytest.mark.parametrize("backend_name", ["sqlite"], indirect=True)
def test_mistakes_are_one_line_errors(digests, db_url, capsys):
    code, out, err = run(capsys, "relay", "--to", "kafka://h:9092", "--url", db_url)
    assert code == 2 and out == ""
    assert err.startswith("error: broker URL 'kafka://h:9092' has unsupported scheme 'kafka'")
    assert len(err.strip().splitlines()) == 1

    code, _, err = run(
        capsys,
        "consume",
        "tests.apps.broker_app:ledger",
        "--from",
        "redis://127.0.0.1:6379",
        "--url",
        db_url,
    )
    assert code == 2 and "are not routed to a broker" in err
    assert len(err.strip().splitlines()) == 1

    code, _, err = run(capsys, "outbox", "prune", "--older-than", "soon", "--url", db_url)
    assert code == 2 and "not a duration" in err

    code, _, err = run(capsys, "outbox", "republish", QUEUE, "--url", db_url)
    assert code == 2 and "is not routed" in err


@pytest.mark.parametrize("scheme", ["amqp", "nats", "redis"])
@pytest.mark.parametrize("backend_name", ["sqlite", "postgres"], indirect=True)
def test_relay_once_with_the_broker_down_gives_up_within_its_timeout(digests, db_url, scheme):
    """A cron job's ``relay --once``: against a closed port it keeps trying for --timeout
    seconds, clean-up and exit included, then exits 2 with one line that says what is still
    due — the same bound every time (issue: 1 s, 25 s and 62 s for the same command)."""
    import signal
    import socket
    import subprocess
    import sys
    import time

    from ..support.processes import handles, wait_exit, wait_until

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: connections are refused
    assert main_route(digests) == 3
    timeout = 2.0
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobledger", "relay", "--once", "--timeout", str(timeout)]
        + ["--to", f"{scheme}://127.0.0.1:{port}", "--url", db_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # The clock starts when the relay is about to publish (its signal handlers are in place):
    # how long the interpreter takes to start is the machine's business, not the relay's.
    wait_until(
        lambda: proc.poll() is not None or handles(proc.pid, signal.SIGTERM),
        60,
        interval=0.01,
        what="the relay to start",
    )
    started = time.monotonic()
    code, _, stderr = wait_exit(proc, 120)
    took = time.monotonic() - started
    assert code == 2, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr
    assert f"within {timeout:g} s" in errors[0] and f"3 records still due ({QUEUE} 3)" in errors[0]
    assert "Traceback" not in stderr
    # The bounded clean-up (at most 2 s each for the broker and the lease) and the exit come
    # on top of the timeout; 62 s or an endless retry would not fit.
    assert took < timeout + 15, f"took {took:.1f} s"


def main_route(ledger: Ledger) -> int:
    from jobledger.brokers.outbox import Outbox

    return Outbox(ledger).route(QUEUE, actor="test").backfilled
