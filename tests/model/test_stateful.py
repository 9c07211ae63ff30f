"""Random operation histories checked against the reference model, on both backends.

Hypothesis drives enqueue, claim, heartbeat, complete, fail, release, rescue, redrive, resolve
and cancel — with stale tokens and duplicate keys — at a chosen ``now``, and after every step
asserts that the backend's jobs and attempts agree with ``reference.LedgerModel``. Shrunk
counter-examples become regular tests in test_regressions.py.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from jobledger import InvalidTransition, JobFilter, KeyConflict, Ledger
from jobledger._records import Failure, Lease

from .reference import Conflict, LedgerModel

T0 = datetime(2026, 1, 5, tzinfo=UTC)
KEYS = st.sampled_from([f"k{i}" for i in range(4)])
# Mostly the current lease; sometimes a stale one (a worker that lost its lease writing late).
STALE = st.sampled_from([False, False, False, True])
PAYLOADS = st.sampled_from([{"v": 1}, {"v": 2}])
_examples = itertools.count()


def when(t: float) -> datetime:
    return T0 + timedelta(seconds=t)


class LedgerMachine(RuleBasedStateMachine):
    """One example = one fresh queue in a shared database (cheap isolation per example)."""

    url: str = ""

    @initialize()
    def setup(self) -> None:
        self.ledger = Ledger(self.url)
        self.backend = self.ledger.backend
        self.queue = f"m{next(_examples)}_{uuid.uuid4().hex[:6]}"
        # A small budget, so that histories reach "budget spent" often.
        self.ledger.task(
            lambda ctx, v: None, name="t", queue=self.queue, max_attempts=2, lease_seconds=30
        )
        self.model = LedgerModel(max_attempts=2, lease_seconds=30.0)
        self.now = 0.0
        self.leases: dict[int, list[Lease]] = {}
        for key in ("k0", "k1"):
            self.enqueue(key, {"v": 1}, 0, 0)

    def teardown(self) -> None:
        if hasattr(self, "ledger"):
            self.ledger.close()

    # -- the clock -------------------------------------------------------------------------------

    @rule(seconds=st.sampled_from([1, 10, 29, 31, 45, 100]))
    def advance(self, seconds: int) -> None:
        self.now += seconds

    # -- operations --------------------------------------------------------------------------------

    @rule(
        key=KEYS,
        payload=PAYLOADS,
        delay=st.sampled_from([0, 0, 5, 60]),
        priority=st.sampled_from([0, 0, 1]),
    )
    def enqueue(self, key: str, payload: dict, delay: int, priority: int) -> None:
        try:
            got = self.ledger.enqueue(
                "t", payload, key=key, delay=delay, priority=priority, now=when(self.now)
            )
        except KeyConflict:
            with pytest.raises(Conflict):
                self.model.enqueue(None, key, payload, self.now + delay, priority)
            return
        expected = self.model.enqueue(
            got.id if got.created else None, key, payload, self.now + delay, priority
        )
        assert (got.id, got.created) == expected

    @rule(limit=st.integers(1, 3))
    def claim(self, limit: int) -> None:
        claimed = self.backend.jobs.claim([self.queue], "w", limit, now=when(self.now))
        tokens = {j.id: j.lease_token for j in claimed}
        expected = self.model.claim(self.now, limit, tokens)
        assert [j.id for j in claimed] == expected
        for job in claimed:
            assert job.lease_until == when(self.now + 30)
            self.leases.setdefault(job.id, []).append(Lease(job.id, job.lease_token, job.attempt))

    @rule(retry=st.booleans(), delay=st.sampled_from([0, 20]))
    def work_one(self, retry: bool, delay: int) -> None:
        """A worker's whole cycle: claim one job, then fail it (retry or not) at once."""
        before = set(self.model.jobs[j].token for j in self.model.jobs)
        self.claim(1)
        fresh = [leases[-1] for leases in self.leases.values() if leases[-1].token not in before]
        for lease in fresh:
            [result] = self.backend.jobs.fail(
                [Failure(lease, retry, when(self.now + delay), "E", "x")], now=when(self.now)
            )
            expected = self.model.fail(lease.job_id, lease.token, retry, self.now + delay)
            assert (None if result.state is None else result.state.value) == expected

    def _pick(self, data_index: int, stale: bool) -> Lease | None:
        if not self.leases:
            return None
        job_id = sorted(self.leases)[data_index % len(self.leases)]
        history = self.leases[job_id]
        return history[0] if stale else history[-1]

    @precondition(lambda self: bool(self.leases))
    @rule(i=st.integers(0, 10), stale=STALE)
    def heartbeat(self, i: int, stale: bool) -> None:
        lease = self._pick(i, stale)
        held = self.backend.jobs.heartbeat([lease], now=when(self.now))
        assert (lease.job_id in held) == self.model.heartbeat(lease.job_id, lease.token, self.now)

    @precondition(lambda self: bool(self.leases))
    @rule(i=st.integers(0, 10), stale=STALE)
    def complete(self, i: int, stale: bool) -> None:
        lease = self._pick(i, stale)
        refused = self.backend.jobs.complete([lease], now=when(self.now))
        assert (refused == []) == self.model.complete(lease.job_id, lease.token)

    @precondition(lambda self: bool(self.leases))
    @rule(i=st.integers(0, 10), stale=STALE, retry=st.booleans(), delay=st.sampled_from([0, 20]))
    def fail(self, i: int, stale: bool, retry: bool, delay: int) -> None:
        lease = self._pick(i, stale)
        [result] = self.backend.jobs.fail(
            [Failure(lease, retry, when(self.now + delay), "E", "boom")], now=when(self.now)
        )
        expected = self.model.fail(lease.job_id, lease.token, retry, self.now + delay)
        assert (None if result.state is None else result.state.value) == expected

    @precondition(lambda self: bool(self.leases))
    @rule(i=st.integers(0, 10), stale=STALE)
    def release(self, i: int, stale: bool) -> None:
        lease = self._pick(i, stale)
        refused = self.backend.jobs.release([lease], now=when(self.now))
        assert (refused == []) == self.model.release(lease.job_id, lease.token)

    @rule()
    def rescue(self) -> None:
        rescued = self.backend.jobs.rescue(now=when(self.now))
        mine = {r.job_id: r.state.value for r in rescued if r.queue == self.queue}
        assert mine == self.model.rescue(self.now)

    @precondition(lambda self: bool(self.model.jobs))
    @rule(i=st.integers(0, 10))
    def redrive(self, i: int) -> None:
        job_id = sorted(self.model.jobs)[i % len(self.model.jobs)]
        moved = self.backend.history.redrive([job_id], "op", "model", now=when(self.now))
        assert (moved == [job_id]) == self.model.redrive(job_id, self.now)

    @precondition(lambda self: bool(self.model.jobs))
    @rule(i=st.integers(0, 10), to=st.sampled_from(["done", "pending"]))
    def resolve(self, i: int, to: str) -> None:
        job_id = sorted(self.model.jobs)[i % len(self.model.jobs)]
        try:
            self.backend.history.resolve(job_id, to, "op", "model", now=when(self.now))
            ok = True
        except InvalidTransition:
            ok = False
        assert ok == self.model.resolve(job_id, to, self.now)

    @precondition(lambda self: bool(self.model.jobs))
    @rule(i=st.integers(0, 10))
    def cancel(self, i: int) -> None:
        job_id = sorted(self.model.jobs)[i % len(self.model.jobs)]
        try:
            self.backend.history.cancel(job_id, "op", "model", now=when(self.now))
            ok = True
        except InvalidTransition:
            ok = False
        assert ok == self.model.cancel(job_id)

    # -- agreement -------------------------------------------------------------------------------

    @invariant()
    def backend_agrees_with_model(self) -> None:
        if not hasattr(self, "model"):
            return
        rows = {j.id: j for j in self.backend.history.find(JobFilter(queue=self.queue))}
        assert set(rows) == set(self.model.jobs)
        for job_id, expected in self.model.jobs.items():
            row = rows[job_id]
            actual = (
                row.key,
                row.payload,
                row.state.value,
                row.attempts,
                row.attempt_limit,
                row.run_at,
                row.lease_until if row.state.value == "leased" else None,
                row.lease_token if row.attempts else None,
            )
            wanted = (
                expected.key,
                expected.payload,
                expected.state,
                expected.attempts,
                expected.attempt_limit,
                when(expected.run_at),
                None if expected.lease_until is None else when(expected.lease_until),
                expected.token,
            )
            assert actual == wanted, f"job {job_id}"
            attempts = self.backend.history.attempts(job_id)
            assert [a.lease_token for a in attempts] == expected.tokens
            assert [
                None if a.outcome is None else a.outcome.value for a in attempts
            ] == expected.outcomes


def _run(url: str, examples: int) -> None:
    LedgerMachine.url = url
    runner = LedgerMachine.TestCase
    runner.settings = settings(
        max_examples=examples,
        stateful_step_count=50,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    runner("runTest").runTest()


def test_model_agrees_with_backend(db_url: str) -> None:
    ledger = Ledger(db_url)
    ledger.migrate()
    ledger.close()
    _run(db_url, examples=300 if "sqlite" in db_url else 150)
