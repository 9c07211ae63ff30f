"""The subscriptions role: one push subscription per queue, its state changes with who and why,
secret rotation with an overlap, and the delivery health it keeps."""

from __future__ import annotations

import pytest

from jobledger._records import Subscription, SubscriptionState
from jobledger.errors import NotFound, SubscriptionExists

from .conftest import T0, at


@pytest.fixture
def subs(ledger):
    return ledger.backend.subscriptions


def sub(queue: str = "hooks", sub_id: str = "sub_1", **kw) -> Subscription:
    return Subscription(
        id=sub_id, queue=queue, url=f"https://example.com/{queue}", secret="c2VjcmV0", **kw
    )


def test_a_subscription_is_stored_as_given_and_one_queue_has_one(subs):
    stored = subs.insert(sub(rate_per_second=5.0, burst=10.0, concurrency=4), now=T0)
    assert (stored.id, stored.queue, stored.url, stored.secret) == (
        "sub_1",
        "hooks",
        "https://example.com/hooks",
        "c2VjcmV0",
    )
    assert (stored.rate_per_second, stored.burst, stored.concurrency) == (5.0, 10.0, 4)
    assert stored.state is SubscriptionState.ACTIVE and stored.created_at == T0
    assert stored.updated_at == T0 and (stored.delivered, stored.failed) == (0, 0)
    assert subs.get("sub_1") == stored
    with pytest.raises(SubscriptionExists) as raised:
        subs.insert(sub(sub_id="sub_2"), now=at(1))
    assert "sub_1" in str(raised.value)
    subs.insert(sub("alerts", "sub_3"), now=at(2))
    assert [s.queue for s in subs.all()] == ["alerts", "hooks"]


def test_state_changes_record_who_and_why(subs):
    subs.insert(sub(), now=T0)
    paused = subs.set_state("sub_1", SubscriptionState.PAUSED, "ops:ana", "endpoint moving", at(5))
    assert paused.state is SubscriptionState.PAUSED
    assert (paused.state_actor, paused.state_reason, paused.state_changed_at) == (
        "ops:ana",
        "endpoint moving",
        at(5),
    )
    assert paused.updated_at == at(5)
    active = subs.set_state("sub_1", SubscriptionState.ACTIVE, "ops:ben", None, at(6))
    assert active.state is SubscriptionState.ACTIVE and active.state_actor == "ops:ben"
    with pytest.raises(NotFound):
        subs.set_state("nope", SubscriptionState.PAUSED, "ops:ana", None, at(7))


def test_a_rotation_keeps_the_old_secret_signing_for_the_overlap_only(subs):
    subs.insert(sub(), now=T0)
    rotated = subs.rotate("sub_1", "bmV3LXNlY3JldA==", 3600, now=at(10))
    assert rotated.secret == "bmV3LXNlY3JldA==" and rotated.previous_secret == "c2VjcmV0"
    assert rotated.previous_until == at(3610)
    assert rotated.signing_secrets(at(3609)) == ["bmV3LXNlY3JldA==", "c2VjcmV0"]
    assert rotated.signing_secrets(at(3610)) == ["bmV3LXNlY3JldA=="]
    at_once = subs.rotate("sub_1", "dGhpcmQ=", 0, now=at(20))
    assert at_once.previous_secret is None and at_once.previous_until is None
    with pytest.raises(NotFound):
        subs.rotate("nope", "eA==", 0, now=at(21))


def test_delivery_outcomes_keep_the_health_of_a_subscription(subs):
    subs.insert(sub(), now=T0)
    subs.record("sub_1", True, 200, None, now=at(1))
    subs.record("sub_1", False, 503, "HTTP 503: try later", now=at(2))
    subs.record("sub_1", False, None, "connection refused", now=at(3))
    failing = subs.get("sub_1")
    assert (failing.delivered, failing.failed, failing.consecutive_failures) == (1, 2, 2)
    assert (failing.last_status, failing.last_error) == (None, "connection refused")
    assert (failing.last_success_at, failing.last_failure_at, failing.last_attempt_at) == (
        at(1),
        at(3),
        at(3),
    )
    subs.record("sub_1", True, 204, None, now=at(4))
    healthy = subs.get("sub_1")
    assert healthy.consecutive_failures == 0 and healthy.last_status == 204
    assert healthy.last_error == "connection refused"  # what went wrong last stays
    subs.record("nope", True, 200, None, now=at(5))  # an unknown id changes nothing
    assert [s.id for s in subs.all()] == ["sub_1"]


def test_a_deleted_subscription_is_returned_once_and_then_gone(subs):
    subs.insert(sub(), now=T0)
    gone = subs.delete("sub_1")
    assert gone.id == "sub_1" and gone.queue == "hooks"
    with pytest.raises(NotFound):
        subs.get("sub_1")
    with pytest.raises(NotFound):
        subs.delete("sub_1")
    assert subs.insert(sub(sub_id="sub_2"), now=at(1)).queue == "hooks"  # the queue is free
