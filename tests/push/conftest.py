"""Fixtures for the push tests: endpoints on 127.0.0.1, delivery loops, subscriptions."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from jobledger import Ledger
from jobledger._records import Subscription
from jobledger._services.subscriptions import create_subscription
from jobledger.push import PushService, PushSettings

from ..support.endpoints import Endpoint, Responder, ok

TASK = "hook.event"


@pytest.fixture
def endpoint() -> Iterator[Any]:
    """``endpoint(responder=ok, tls=None)`` starts an endpoint, stopped after the test."""
    started: list[Endpoint] = []

    def start(responder: Responder = ok, tls: Any = None) -> Endpoint:
        ep = Endpoint(responder, tls)
        started.append(ep)
        return ep

    yield start
    for ep in started:
        ep.stop()


def fast_settings(**overrides: Any) -> PushSettings:
    options: dict[str, Any] = {
        "allow_networks": ("127.0.0.1",),
        "poll_interval": 0.05,
        "refresh_interval": 0.2,
        "rescue_interval": 0.5,
        "grace": 2.0,
    }
    options.update(overrides)
    return PushSettings(**options)


@pytest.fixture
def push(ledger: Ledger) -> Iterator[Any]:
    """``push(**settings)`` starts a delivery loop on the test's ledger (fast polling, 127.0.0.1
    allow-listed unless told otherwise; ``rng`` draws its retries' jitter), stopped after the
    test."""
    services: list[PushService] = []

    def start(
        target: Ledger | None = None, *, rng: Callable[[], float] | None = None, **overrides: Any
    ) -> PushService:
        extra = {} if rng is None else {"rng": rng}
        service = PushService(target or ledger, fast_settings(**overrides), **extra)
        service.start()
        services.append(service)
        return service

    yield start
    for service in services:
        service.stop()


def subscribe(ledger: Ledger, url: str, queue: str = "hooks", **options: Any) -> Subscription:
    return create_subscription(ledger.backend, queue, url, **options)


def publish(ledger: Ledger, key: str, queue: str = "hooks", **payload: Any) -> int:
    return ledger.enqueue(TASK, payload or {"n": key}, key=key, queue=queue).id
