"""The leader role: one holder of a named lease at a time, its token, its term, and the fence
that refuses writes under a lease that has moved (SPEC: one authority per singleton)."""

from __future__ import annotations

import pytest

from jobledger.errors import LeadershipLost

from .conftest import T0, at

TTL = 10.0


@pytest.fixture
def leader(ledger):
    return ledger.backend.leader


def test_two_holders_never_both_hold(leader):
    first = leader.acquire("relay", "host-a", TTL, now=T0)
    assert first is not None and first.holder == "host-a" and first.term == 1
    assert first.valid and first.until == at(TTL) and first.now == T0
    for t in (0, 1, TTL - 0.001):
        assert leader.acquire("relay", "host-b", TTL, now=at(t)) is None
    # The same holder asking again gets nothing either: a lease is renewed, never re-taken.
    assert leader.acquire("relay", "host-a", TTL, now=at(1)) is None
    [held] = leader.leases(now=at(1))
    assert (held.holder, held.token, held.term) == ("host-a", first.token, 1)
    assert held.valid and held.now == at(1)


def test_names_are_independent(leader):
    relay = leader.acquire("relay", "host-a", TTL, now=T0)
    cohort = leader.acquire("scheduler:default", "host-b", TTL, now=T0)
    assert relay is not None and cohort is not None and relay.token != cohort.token
    assert [lease.name for lease in leader.leases(now=T0)] == ["relay", "scheduler:default"]


def test_an_expired_lease_moves_with_a_higher_term_and_a_new_token(leader):
    first = leader.acquire("relay", "host-a", TTL, now=T0)
    second = leader.acquire("relay", "host-b", TTL, now=at(TTL))
    assert first is not None and second is not None
    assert second.holder == "host-b" and second.term == first.term + 1
    assert second.token != first.token and second.acquired_at == at(TTL)
    third = leader.acquire("relay", "host-a", TTL, now=at(3 * TTL))
    assert third is not None and third.term == 3
    [row] = leader.leases(now=at(3 * TTL))
    assert (row.holder, row.term) == ("host-a", 3)


def test_a_renewal_extends_a_held_lease(leader):
    first = leader.acquire("relay", "host-a", TTL, now=T0)
    assert first is not None
    renewed = leader.renew(first, TTL, now=at(8))
    assert renewed is not None and renewed.token == first.token and renewed.term == first.term
    assert renewed.until == at(8 + TTL) and renewed.renewed_at == at(8)
    assert renewed.acquired_at == T0
    # Past the first lease's end, the renewed one still holds.
    assert leader.acquire("relay", "host-b", TTL, now=at(TTL + 1)) is None
    assert leader.acquire("relay", "host-b", TTL, now=at(8 + TTL)) is not None


def test_a_renewal_with_a_stale_token_fails_and_changes_nothing(leader):
    first = leader.acquire("relay", "host-a", TTL, now=T0)
    assert first is not None
    # Expired, not yet taken: too late to renew.
    assert leader.renew(first, TTL, now=at(TTL)) is None
    second = leader.acquire("relay", "host-b", TTL, now=at(TTL + 1))
    assert second is not None
    assert leader.renew(first, TTL, now=at(TTL + 2)) is None
    assert leader.release(first, now=at(TTL + 2)) is False
    [row] = leader.leases(now=at(TTL + 2))
    assert (row.holder, row.token, row.until) == ("host-b", second.token, at(2 * TTL + 1))


def test_a_release_frees_the_lease_at_once(leader):
    first = leader.acquire("relay", "host-a", TTL, now=T0)
    assert first is not None
    assert leader.release(first, now=at(2)) is True
    assert leader.release(first, now=at(2)) is False  # released already
    [row] = leader.leases(now=at(2))
    assert not row.valid
    second = leader.acquire("relay", "host-b", TTL, now=at(2))
    assert second is not None and second.term == 2


def test_fence_passes_for_the_holder_and_refuses_a_moved_lease(leader):
    first = leader.acquire("relay", "host-a", TTL, now=T0)
    assert first is not None
    leader.fence(first, now=at(TTL - 1))
    with pytest.raises(LeadershipLost):
        leader.fence(first, now=at(TTL))  # expired, though nobody took it yet
    second = leader.acquire("relay", "host-b", TTL, now=at(TTL))
    assert second is not None
    with pytest.raises(LeadershipLost):
        leader.fence(first, now=at(TTL + 1))
    leader.fence(second, now=at(TTL + 1))


def test_fence_in_a_transaction_refuses_what_it_guards(ledger, leader):
    """A write fenced in the caller's transaction: refused, the transaction rolls back."""
    first = leader.acquire("relay", "host-a", TTL, now=T0)
    assert first is not None
    assert leader.acquire("relay", "host-b", TTL, now=at(TTL)) is not None
    with pytest.raises(LeadershipLost), ledger.backend.transaction() as conn:
        leader.fence(first, now=at(TTL), conn=conn)
    with ledger.backend.transaction() as conn:
        leader.fence(leader.leases(now=at(TTL))[0], now=at(TTL), conn=conn)
