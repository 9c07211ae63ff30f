"""Subscriptions as stored, on each backend; and cron tasks whose target is a URL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import standardwebhooks

from jobledger import ConfigError, JobState, NotFound, PayloadError, Schedule
from jobledger._records import SubscriptionState
from jobledger._services.subscriptions import create_subscription, rotate_secret
from jobledger.errors import SubscriptionExists
from jobledger.push import HttpTarget, cron

from ..support.processes import wait_until
from .conftest import subscribe

T0 = datetime(2026, 8, 9, 12, 0, tzinfo=UTC)


def test_a_subscription_as_stored(ledger):
    backend = ledger.backend
    sub = create_subscription(
        backend, "hooks", "https://hooks.example/in", rate_per_second=5, timeout_seconds=3, now=T0
    )
    assert sub.secret.startswith("whsec_") and sub.burst == 5.0 and sub.created_at == T0
    assert sub.health == "new" and sub.state is SubscriptionState.ACTIVE
    assert sub.secret not in str(sub.public()) and "secret" not in sub.public()
    assert sub.secret not in repr(sub)  # never in a log line or a traceback
    with pytest.raises(SubscriptionExists, match=sub.id):
        create_subscription(backend, "hooks", "https://other.example/")
    backend.subscriptions.record(sub.id, False, 503, "HTTP 503: busy", T0 + timedelta(seconds=1))
    failing = backend.subscriptions.get(sub.id)
    assert (failing.health, failing.consecutive_failures, failing.last_status) == (
        "failing",
        1,
        503,
    )
    backend.subscriptions.record(sub.id, True, 200, None, T0 + timedelta(seconds=2))
    healthy = backend.subscriptions.get(sub.id)
    assert (healthy.health, healthy.delivered, healthy.failed) == ("healthy", 1, 1)
    assert healthy.last_error == "HTTP 503: busy"  # what went wrong last stays visible
    assert healthy.last_success_at == T0 + timedelta(seconds=2)
    rotated = rotate_secret(backend, sub.id, overlap=timedelta(hours=1), now=T0)
    assert rotated.previous_until == T0 + timedelta(hours=1)
    assert rotated.signing_secrets(T0) == [rotated.secret, sub.secret]
    assert rotated.signing_secrets(T0 + timedelta(hours=1)) == [rotated.secret]
    paused = backend.subscriptions.set_state(sub.id, SubscriptionState.PAUSED, "ops", "deploy", T0)
    assert (paused.health, paused.state_actor, paused.state_reason) == ("paused", "ops", "deploy")
    assert [s.id for s in backend.subscriptions.all()] == [sub.id]
    assert backend.subscriptions.delete(sub.id).id == sub.id
    with pytest.raises(NotFound):
        backend.subscriptions.get(sub.id)
    with pytest.raises(NotFound):
        backend.subscriptions.delete(sub.id)
    with pytest.raises(NotFound):
        rotate_secret(backend, sub.id)


def test_subscription_and_key_ids_or_texts_no_backend_can_keep_are_refused_alike(ledger):
    """A text with U+0000: PostgreSQL refused it (a one-line ConfigError), SQLite stored it or
    found nothing. An id no row can have finds nothing on both; an actor or a reason with one
    is refused, and nothing changes."""
    sub = ledger.subscriptions.create("hooks", "https://hooks.example/in", now=T0)
    for call in (
        lambda: ledger.subscriptions.get(sub.id + "\x00"),
        lambda: ledger.subscriptions.delete("\x00"),
        lambda: ledger.subscriptions.rotate(sub.id + "\x00"),
        lambda: ledger.keys.revoke("k\x00"),
    ):
        with pytest.raises(NotFound):
            call()
    for actor, reason in (("ops\x00", None), ("ops", "deploy\x00"), (7, None)):
        with pytest.raises(ConfigError):
            ledger.subscriptions.set_state(sub.id, SubscriptionState.PAUSED, actor, reason)
    with pytest.raises(ConfigError, match="^a subscription's id must be a text"):
        ledger.subscriptions.set_state(7, SubscriptionState.PAUSED, "ops")
    assert ledger.subscriptions.get(sub.id).state is SubscriptionState.ACTIVE


@pytest.mark.parametrize(
    "overlap", [timedelta(days=30, seconds=1), timedelta(seconds=-1), 3600, None]
)
def test_a_rotation_s_overlap_is_0_to_30_days_else_nothing_changes(ledger, overlap):
    backend = ledger.backend
    sub = create_subscription(backend, "hooks", "https://hooks.example/in", now=T0)
    with pytest.raises(ConfigError, match="^the overlap must be between 0 and 30 days$"):
        rotate_secret(backend, sub.id, overlap=overlap, now=T0)
    kept = backend.subscriptions.get(sub.id)
    assert (kept.secret, kept.previous_until) == (sub.secret, None)
    widest = rotate_secret(backend, sub.id, overlap=timedelta(days=30), now=T0)
    assert widest.previous_until == T0 + timedelta(days=30)
    assert widest.signing_secrets(T0) == [widest.secret, sub.secret]


def test_cron_ticks_are_pushed_with_the_tick_key_as_webhook_id(ledger, endpoint, push):
    ep = endpoint()
    ledger.schedules.add(
        Schedule("nightly-report", "30 2 * * *", tz="Europe/Berlin", target=HttpTarget(ep.url))
    )
    scheduler = ledger.scheduler(name="s1")
    scheduler.run_once(T0)
    # No subscription for the target's queue yet: the tick fails, says why, and waits.
    failed = scheduler.run_once(T0 + timedelta(days=1))
    assert failed.ticks == [] and "no subscription" in failed.errors[0]
    assert "cron.nightly-report" in failed.errors[0]
    sub = subscribe(ledger, ep.url, queue="cron.nightly-report")
    [tick] = scheduler.run_once(T0 + timedelta(days=1, minutes=5)).ticks
    assert tick.jobs_created == 1
    [job] = ledger.jobs()
    assert job.key == "nightly-report:2026-08-10" and job.queue == "cron.nightly-report"
    push()
    wait_until(lambda: ledger.job(job.id).state is JobState.DONE, what="the tick's delivery")
    [request] = ep.requests
    event = standardwebhooks.Webhook(sub.secret).verify(request.body, request.headers)
    assert request.headers["webhook-id"] == "nightly-report:2026-08-10"
    assert event["type"] == "schedule.nightly-report"
    assert event["data"] == {
        "schedule": "nightly-report",
        "tick": "2026-08-10T00:30Z",
        "local": "2026-08-10T02:30+02:00",
    }


def test_a_cron_target_creates_its_subscription_or_refuses_another_url(ledger):
    secret = "whsec_" + "A" * 43 + "="
    target = HttpTarget("https://reports.example/nightly", queue="reports", secret=secret)
    ledger.schedules.add(Schedule("nightly", "0 3 * * *", target=target))
    other = HttpTarget("https://elsewhere.example/", queue="reports")
    ledger.schedules.add(Schedule("weekly", "0 3 * * MON", target=other, key="w:{date}"))
    scheduler = ledger.scheduler(name="s1")
    scheduler.run_once(T0)
    result = scheduler.run_once(T0 + timedelta(days=1))
    [sub] = ledger.backend.subscriptions.all()
    assert (sub.queue, sub.url, sub.secret) == (
        "reports",
        "https://reports.example/nightly",
        secret,
    )
    assert any("posts to https://reports.example/nightly" in e for e in result.errors), (
        result.errors
    )
    with pytest.raises(ConfigError, match="https://"):
        HttpTarget("ftp://reports.example/")


def test_a_cron_target_whose_subscription_another_scheduler_makes_meanwhile_uses_that_one(
    ledger, monkeypatch
):
    """Two schedulers (two regions) prepare the same tick: both find no subscription, and the
    other creates it first. This one's create is refused as a duplicate; it takes the one that
    exists, and the tick enqueues its job — one subscription, no failed tick."""
    secret = "whsec_" + "A" * 43 + "="
    target = HttpTarget("https://reports.example/nightly", queue="reports", secret=secret)
    ledger.schedules.add(Schedule("nightly", "0 3 * * *", target=target))
    create = cron.create_subscription
    made = []

    def the_other_first(backend, queue, url, **options):
        made.append(create(backend, queue, url, **options))  # the other scheduler's
        return create(backend, queue, url, **options)

    monkeypatch.setattr(cron, "create_subscription", the_other_first)
    scheduler = ledger.scheduler(name="s1")
    scheduler.run_once(T0)
    result = scheduler.run_once(T0 + timedelta(days=1))
    assert result.errors == [] and [t.jobs_created for t in result.ticks] == [1]
    assert [s.id for s in ledger.backend.subscriptions.all()] == [made[0].id]
    [job] = ledger.jobs()
    assert (job.queue, job.key) == ("reports", "nightly:2026-08-10")


def test_a_cron_targets_settings_are_checked_when_it_is_built():
    url = "https://reports.example/nightly"
    with pytest.raises(ConfigError, match="payload must be a dict, a function of the tick"):
        HttpTarget(url, payload=["not", "a", "dict"])
    with pytest.raises(PayloadError, match="not valid JSON"):
        HttpTarget(url, payload={"ratio": float("nan")})
    # A schedule's name of 200 characters makes no event type (schedule.<name> is too long):
    # the schedule is refused, saying to give one.
    name = "n" * 200
    with pytest.raises(ConfigError, match="pass event_type="):
        Schedule(name, "0 3 * * *", target=HttpTarget(url, queue="reports"))
    named = HttpTarget(url, queue="reports", event_type="report.nightly")
    Schedule(name, "0 3 * * *", target=named)
    assert named.task == "report.nightly"
    # Nor does it make a queue (cron.<name>): refused the same way, saying to give one.
    with pytest.raises(ConfigError, match="pass queue="):
        Schedule(name, "0 3 * * *", target=HttpTarget(url, event_type="report.nightly"))
