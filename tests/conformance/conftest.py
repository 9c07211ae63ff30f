"""Helpers for the conformance suite: one explicit clock, and shortcuts to make jobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobledger import Ledger
from jobledger._records import ClaimedJob, Lease

from ..support.async_api import AsyncDriven

T0 = datetime(2026, 8, 10, 6, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """T0 plus some seconds: the suite's clock."""
    return T0 + timedelta(seconds=seconds)


def lease_of(job: ClaimedJob) -> Lease:
    return Lease(job.id, job.lease_token, job.attempt)


@pytest.fixture
def tasks(ledger: Ledger):
    """A few tasks registered on the test's ledger."""

    @ledger.task(queue="q", max_attempts=3, lease_seconds=30)
    def work(ctx, n: int = 0) -> None:
        pass

    @ledger.task(queue="other", max_attempts=3, lease_seconds=30)
    def elsewhere(ctx, n: int = 0) -> None:
        pass

    return {"work": work, "elsewhere": elsewhere}


def enqueue(ledger: Ledger, n: int, *, now: datetime = T0, queue: str = "q", **kw) -> int:
    job_id, created = ledger.enqueue("work", {"n": n}, key=f"k{n}", queue=queue, now=now, **kw)
    assert created
    return job_id


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest, ledger: Ledger):
    """The ledger of the test through each API in turn: the ``Ledger`` itself, then an
    ``AsyncLedger`` over it driven on an event loop (tests/support/async_api.py). A case that
    takes ``api`` checks the same behaviour of both, written once."""
    if request.param == "sync":
        yield ledger
        return
    driven = AsyncDriven(ledger)
    try:
        yield driven
    finally:
        driven.close()
