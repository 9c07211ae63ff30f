"""Fixtures for the broker tests: a broker (shared, with names of the test's own), a private
broker to kill, the fake provider, and helpers to run relays and consumers.

Without a broker the tests skip, unless ``JOBLEDGER_REQUIRE_BROKERS=1`` (set by CI), where a
missing broker fails them.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from jobledger import Ledger
from jobledger.brokers.consumer import BrokerConsumer
from jobledger.brokers.relay import Relay
from jobledger.testing.fakeprovider import FakeProvider

from ..support.brokers import (
    BROKERS,
    PRIVATE,
    SHARED,
    PrivateBroker,
    answers,
    backlog,
    broker_url,
    cleanup,
    unique_prefix,
)
from ..support.processes import wait_until

QUEUE = "digests"


def _unavailable(reason: str) -> None:
    if os.environ.get("JOBLEDGER_REQUIRE_BROKERS") == "1":
        pytest.fail(f"{reason} (JOBLEDGER_REQUIRE_BROKERS=1)")
    pytest.skip(reason)


@dataclass
class Broker:
    """A broker for one test: where it is, and the prefix of every name the test creates."""

    kind: str
    host: str
    port: int
    prefix: str = field(default_factory=unique_prefix)

    def url(self, **options: Any) -> str:
        return broker_url(self.kind, self.host, self.port, self.prefix, **options)

    def backlog(self, queue: str = QUEUE) -> int:
        return backlog(self.kind, self.host, self.port, self.prefix, queue)


@pytest.fixture(params=BROKERS)
def broker_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def broker(broker_kind: str) -> Iterator[Broker]:
    """The machine's shared broker of this kind, with names unique to the test."""
    host, port = SHARED[broker_kind]
    if not answers(host, port):
        _unavailable(f"no {broker_kind} on {host}:{port}")
    handle = Broker(broker_kind, host, port)
    try:
        yield handle
    finally:
        cleanup(broker_kind, host, port, handle.prefix, [QUEUE])


@pytest.fixture
def private_broker(broker_kind: str) -> Iterator[PrivateBroker]:
    """A broker of the test's own, which it may kill and restart."""
    binary = {"rabbitmq": "rabbitmq-server", "nats": "nats-server", "redis": "redis-server"}
    if shutil.which(binary[broker_kind]) is None:
        _unavailable(f"{binary[broker_kind]} is not installed")
    server = PRIVATE[broker_kind]()
    try:
        yield server.start()
    finally:
        server.close()


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    with FakeProvider() as p:
        yield p


class Running:
    """Relays and consumers running in threads of the test process; stopped at the end."""

    def __init__(self) -> None:
        self._threads: list[tuple[Any, threading.Thread]] = []

    def relay(self, ledger: Ledger, url: str, **options: Any) -> Relay:
        options.setdefault("poll_interval", 0.02)
        options.setdefault("lease_seconds", 1.0)
        relay = Relay(ledger, url, **options)
        self._start(relay, relay.run)
        return relay

    def consumer(self, ledger: Ledger, url: str, **options: Any) -> BrokerConsumer:
        options.setdefault("rescue_interval", 0.1)
        options.setdefault("grace_seconds", 5.0)
        consumer = BrokerConsumer(ledger, url, **options)
        self._start(consumer, consumer.run)
        return consumer

    def _start(self, runner: Any, target: Any) -> None:
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        self._threads.append((runner, thread))

    def stop(self, runner: Any) -> None:
        for item in list(self._threads):
            if item[0] is runner:
                runner.stop()
                wait_until(lambda t=item[1]: not t.is_alive(), 20, what=f"{runner!r} to stop")
                self._threads.remove(item)

    def stop_all(self) -> None:
        for runner, _ in list(self._threads):
            self.stop(runner)


@pytest.fixture
def running() -> Iterator[Running]:
    run = Running()
    try:
        yield run
    finally:
        run.stop_all()
