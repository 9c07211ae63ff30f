"""The delivery loop against real HTTP servers on 127.0.0.1: signatures an independent verifier
accepts, what each answer does to the job, limits, and isolation between subscriptions."""

from __future__ import annotations

import json
import threading
import time

import pytest
import standardwebhooks

from jobledger import JobState
from jobledger._records import LATEST_TIME, AttemptOutcome, QueueSettings, SubscriptionState
from jobledger._services.subscriptions import rotate_secret
from jobledger._webhooks import key_from_webhook_id
from jobledger.push import delivery

from ..support.endpoints import scripted
from ..support.processes import wait_until
from .conftest import TASK, publish, subscribe


def job_state(ledger, job_id):
    return ledger.job(job_id).state


def wait_state(ledger, job_id, state, timeout=15):
    wait_until(
        lambda: job_state(ledger, job_id) is state,
        timeout=timeout,
        what=f"job {job_id} to be {state.value} (it is {job_state(ledger, job_id).value})",
    )


def fast_backoff(ledger, queue="hooks"):
    ledger.backend.api.queue_put(
        QueueSettings(name=queue, backoff_base=0.05, backoff_cap=0.1, max_attempts=10)
    )


def test_deliveries_verify_with_the_standardwebhooks_package(ledger, endpoint, push):
    ep = endpoint()
    sub = subscribe(ledger, ep.url)
    keys = ["4187:2026-W33", "lease-expiry:property-1842:lease-77", "report.v2 Ü%"]
    ids = [publish(ledger, key, customer=i) for i, key in enumerate(keys[:2])]
    # A job with a group says so in a header, encoded as the key is.
    ids.append(
        ledger.enqueue(TASK, {"customer": 2}, key=keys[2], queue="hooks", group="Ülm.tenant").id
    )
    push()
    for job_id in ids:
        wait_state(ledger, job_id, JobState.DONE)
    verifier = standardwebhooks.Webhook(sub.secret)
    by_key = {}
    for request in ep.requests:
        event = verifier.verify(request.body, request.headers)  # raises unless it matches
        by_key[key_from_webhook_id(request.headers["webhook-id"])] = (request, event)
    assert sorted(by_key) == sorted(keys)
    for i, key in enumerate(keys):
        request, event = by_key[key]
        assert event["type"] == TASK
        assert event["data"] == {"customer": i}
        assert event["timestamp"].endswith("Z")
        assert request.headers["content-type"] == "application/json"
        assert request.headers["webhook-signature"].startswith("v1,")
        assert " " not in request.headers["webhook-signature"]
        assert "." not in request.headers["webhook-id"]
        assert abs(int(request.headers["webhook-timestamp"]) - request.at) < 5
        assert request.headers["jobledger-attempt"] == "1"
        group = request.headers.get("jobledger-group")
        assert (None if group is None else key_from_webhook_id(group)) == (
            "Ülm.tenant" if i == 2 else None
        )
    # The plain keys are the webhook-id unchanged; only the one with '.', ' ', '%' is encoded.
    assert by_key[keys[0]][0].headers["webhook-id"] == keys[0]
    assert by_key[keys[2]][0].headers["webhook-id"] == "report%2Ev2%20%C3%9C%25"
    assert [a.outcome.value for a in ledger.history(ids[0]).attempts] == ["done"]
    # The health is written right after each outcome.
    wait_until(lambda: ledger.backend.subscriptions.get(sub.id).delivered == 3, what="the health")
    assert ledger.backend.subscriptions.get(sub.id).health == "healthy"


def test_retries_honour_retry_after_then_backoff_until_2xx(ledger, endpoint, push):
    fast_backoff(ledger)
    ep = endpoint(
        scripted(
            (429, {"Retry-After": "1"}, b"slow down"),
            (503, {}, b"busy"),
            (502, {}, b""),
            (504, {}, b""),
            (200, {}, b"ok"),
        )
    )
    subscribe(ledger, ep.url)
    job_id = publish(ledger, "k1")
    push()
    wait_state(ledger, job_id, JobState.DONE)
    attempts = ledger.history(job_id).attempts
    assert [a.outcome.value for a in attempts] == ["retry", "retry", "retry", "retry", "done"]
    assert [a.error_class for a in attempts[:4]] == ["HTTP 429", "HTTP 503", "HTTP 502", "HTTP 504"]
    # The class is the status; the message is the body, not the status again.
    assert attempts[0].error_message == "slow down"
    # Retry-After: 1 -> the second attempt could not start sooner than a second later.
    assert (attempts[1].started_at - attempts[0].finished_at).total_seconds() >= 0.99
    ids = {r.headers["webhook-id"] for r in ep.requests}
    assert ids == {"k1"}  # the same id on every attempt
    assert [r.headers["jobledger-attempt"] for r in ep.requests] == ["1", "2", "3", "4", "5"]


def test_a_retry_without_retry_after_waits_its_jittered_backoff_drawn_from_the_hook(
    ledger, endpoint, push
):
    # Full jitter: after attempt n the job waits rng() * min(cap, base * 2 ** (n - 1)). The
    # hook draws 0 for the first three retries (due again at once) and 0.75 for the fourth:
    # 0.75 * 20 * 2 ** 3 = 120 s, inside the ceiling of 160 s.
    ledger.backend.api.queue_put(
        QueueSettings(name="hooks", backoff_base=20, backoff_cap=3600, max_attempts=10)
    )
    draws = iter([0.0, 0.0, 0.0, 0.75])
    drawn: list[float] = []

    def rng() -> float:
        drawn.append(next(draws))
        return drawn[-1]

    ep = endpoint(scripted((503, {}, b"busy")))
    subscribe(ledger, ep.url)
    job_id = publish(ledger, "k1")
    push(rng=rng)
    wait_until(lambda: len(ledger.history(job_id).attempts) == 4, what="four attempts")
    wait_until(
        lambda: ledger.history(job_id).attempts[-1].outcome is AttemptOutcome.RETRY,
        what="the fourth attempt to be recorded as a retry",
    )
    assert drawn == [0.0, 0.0, 0.0, 0.75]
    last = ledger.history(job_id).attempts[-1]
    waited = (ledger.job(job_id).run_at - last.finished_at).total_seconds()
    assert 118 <= waited <= 120.5
    assert ep.count() == 4


def _retried_once(ledger, endpoint, push, retry_after: str):
    """A job pushed to an endpoint that answers 503 with ``retry_after``, once its first
    attempt is recorded as a retry; and the endpoint."""
    ep = endpoint(scripted((503, {"Retry-After": retry_after}, b"busy")))
    subscribe(ledger, ep.url)
    job_id = publish(ledger, "k1")
    push()
    wait_until(
        lambda: [a.outcome for a in ledger.history(job_id).attempts] == [AttemptOutcome.RETRY],
        what="the first attempt to be recorded as a retry",
    )
    return job_id, ep


def test_a_retry_after_is_kept_as_the_job_s_next_run_time(ledger, endpoint, push):
    # The pause is written on the job, not only remembered by this process's lane: another
    # process, or this one restarted, must not deliver it before the endpoint asked.
    job_id, ep = _retried_once(ledger, endpoint, push, "120")
    [attempt] = ledger.history(job_id).attempts
    assert (ledger.job(job_id).run_at - attempt.finished_at).total_seconds() >= 119
    assert ep.count() == 1


@pytest.mark.parametrize("retry_after", ["99999999999999999999", "Fri, 31 Dec 9999 23:59:59 GMT"])
def test_a_retry_after_past_the_latest_time_the_ledger_keeps_is_kept_as_that_time(
    ledger, endpoint, push, retry_after
):
    """An endpoint's Retry-After past what the ledger keeps (or a datetime holds) is recorded
    at once as a retry at the latest time it keeps: never a job left leased until its lease
    runs out because its outcome could not be written."""
    job_id, _ = _retried_once(ledger, endpoint, push, retry_after)
    assert (ledger.job(job_id).state, ledger.job(job_id).run_at) == (JobState.PENDING, LATEST_TIME)


def test_after_a_retry_after_the_subscription_sends_nothing_until_then(ledger, endpoint, push):
    # Retry-After speaks for the endpoint, not for one job: a job that is due must wait too.
    ep = endpoint(scripted((429, {"Retry-After": "2"}, b"slow down"), (200, {}, b"ok")))
    subscribe(ledger, ep.url, concurrency=1)
    jobs = [publish(ledger, "k1"), publish(ledger, "k2")]
    push()
    for job_id in jobs:
        wait_state(ledger, job_id, JobState.DONE)
    first, second = ep.requests[:2]
    assert second.at - first.at >= 1.99


def test_a_retry_after_holds_the_subscription_back_at_most_the_longest_hold(
    ledger, endpoint, push, monkeypatch
):
    """An endpoint that asks for years: its job waits that long (in the ledger), but the
    subscription's other jobs are tried again after ``LONGEST_HOLD`` (here a second), where
    the lane stayed silent until the process restarted."""
    monkeypatch.setattr(delivery, "LONGEST_HOLD", 1.0)
    ep = endpoint(
        scripted((429, {"Retry-After": "99999999999999999999"}, b"later"), (200, {}, b"ok"))
    )
    subscribe(ledger, ep.url, concurrency=1)
    held, other = publish(ledger, "k1"), publish(ledger, "k2")
    push()
    wait_state(ledger, other, JobState.DONE)
    first, second = ep.requests[:2]
    assert second.at - first.at >= 0.99
    assert (ledger.job(held).state, ledger.job(held).run_at) == (JobState.PENDING, LATEST_TIME)


def test_an_answer_with_a_nul_in_its_body_is_recorded_with_it_visible(ledger, endpoint, push):
    """An endpoint's answer whose body holds U+0000: the retry is recorded with it written as
    ``\\x00``, and so is the reason of a 410 that disables the subscription, on both backends
    (PostgreSQL cannot store a NUL: the outcome, and the disabling, were never written)."""
    ep = endpoint(scripted((503, {}, b"busy\x00now"), (410, {}, b"gone\x00for good")))
    sub = subscribe(ledger, ep.url)
    job_id = publish(ledger, "k1")
    push()
    wait_until(
        lambda: ledger.backend.subscriptions.get(sub.id).state is SubscriptionState.DISABLED,
        what="the subscription to be disabled",
    )
    retried = ledger.history(job_id).attempts[0]
    assert retried.outcome is AttemptOutcome.RETRY and "busy\\x00now" in retried.error_message
    assert "gone\\x00for good" in ledger.backend.subscriptions.get(sub.id).state_reason


def test_gone_disables_the_subscription_and_gives_the_job_back(ledger, endpoint, push):
    ep = endpoint(scripted((410, {}, b"gone"), (200, {}, b"ok")))
    sub = subscribe(ledger, ep.url)
    first = publish(ledger, "k1")
    service = push()
    wait_until(
        lambda: ledger.backend.subscriptions.get(sub.id).state is SubscriptionState.DISABLED,
        what="the subscription to be disabled",
    )
    disabled = ledger.backend.subscriptions.get(sub.id)
    assert "410" in disabled.state_reason and disabled.state_actor == "push"
    assert disabled.health == "disabled"
    wait_state(ledger, first, JobState.PENDING)  # given back once the subscription is disabled
    [attempt] = ledger.history(first).attempts
    assert attempt.outcome.value == "released"  # not charged to the budget
    assert ledger.job(first).budget_left == 10
    second = publish(ledger, "k2")
    wait_until(lambda: service.counters.disabled, what="the observers to hear of it")
    assert [c.subscription_id for c in service.counters.disabled] == [sub.id]
    assert ep.count() == 1
    ledger.backend.subscriptions.set_state(sub.id, SubscriptionState.ACTIVE, "ops", "fixed")
    wait_state(ledger, first, JobState.DONE)
    wait_state(ledger, second, JobState.DONE)


def test_other_4xx_is_dead_with_the_body_kept_truncated(ledger, endpoint, push):
    ep = endpoint(scripted((400, {}, b"x" * 10_000)))
    subscribe(ledger, ep.url)
    job_id = publish(ledger, "k1")
    push()
    wait_state(ledger, job_id, JobState.DEAD)
    job = ledger.job(job_id)
    assert job.last_error_class == "HTTP 400"
    # The first body_kept (2000) characters, marked as cut.
    assert job.last_error == "x" * 2000 + "…"
    assert ep.count() == 1


def test_a_redirect_is_a_failure_and_never_followed(ledger, endpoint, push):
    fast_backoff(ledger)
    elsewhere = endpoint()
    ep = endpoint(scripted((302, {"Location": elsewhere.url}, b""), (200, {}, b"")))
    subscribe(ledger, ep.url)
    job_id = publish(ledger, "k1")
    push()
    wait_state(ledger, job_id, JobState.DONE)
    first = ledger.history(job_id).attempts[0]
    assert first.outcome.value == "retry" and first.error_class == "HTTP 302"
    assert "not followed" in first.error_message and elsewhere.url in first.error_message
    assert elsewhere.count() == 0


def test_timeouts_and_refused_connections_are_retried(ledger, endpoint, push):
    fast_backoff(ledger)
    release = threading.Event()

    def slow_once(request, n):
        if n == 1:
            release.wait(60)
        return 200, {}, b"ok"

    slow = endpoint(slow_once)
    subscribe(ledger, slow.url, timeout_seconds=0.3)
    closed = endpoint()
    closed.stop()  # nothing listens on its port any more
    subscribe(ledger, closed.url, queue="closed")
    timed = publish(ledger, "t1")
    refused = publish(ledger, "r1", queue="closed")
    push()
    wait_state(ledger, timed, JobState.DONE)
    release.set()
    first = ledger.history(timed).attempts[0]
    assert first.error_class == "Timeout" and "0.3 s" in first.error_message
    wait_until(lambda: ledger.job(refused).attempts >= 2, what="the refused job to be retried")
    job = ledger.job(refused)
    assert job.state in (JobState.PENDING, JobState.LEASED)
    assert job.last_error_class == "ConnectError"


def test_private_addresses_are_refused_unless_allow_listed(ledger, endpoint, push):
    ep = endpoint()
    by_ip = subscribe(ledger, ep.url)
    by_name = subscribe(ledger, f"http://localhost:{ep.port}/hooks", queue="byname")
    secure = subscribe(ledger, f"https://127.0.0.1:{ep.port}/hooks", queue="secure")
    jobs = [publish(ledger, "a"), publish(ledger, "b", queue="byname")]
    jobs.append(publish(ledger, "c", queue="secure"))
    push(allow_networks=())
    for job_id in jobs:
        wait_until(lambda j=job_id: ledger.job(j).last_error_class, what="a refusal")
    assert ep.count() == 0  # nothing was sent anywhere
    for job_id in jobs:
        job = ledger.job(job_id)
        assert job.last_error_class == "TargetRefused", job.last_error
        assert "127.0.0.1 is a loopback address" in job.last_error or "::1" in job.last_error
    # The name was resolved and its address judged: DNS cannot smuggle a private target in.
    wait_until(
        lambda: all(s.last_error for s in ledger.backend.subscriptions.all()),
        what="the refusals on the subscriptions' health",
    )
    health = {s.id: s for s in ledger.backend.subscriptions.all()}
    assert "loopback" in health[by_name.id].last_error
    assert health[by_ip.id].consecutive_failures >= 1 and health[secure.id].last_status is None


def test_tls_is_verified_and_a_configured_ca_is_trusted(ledger, endpoint, push, tmp_path):
    from ..support.endpoints import make_ca

    ca, cert, key = make_ca(tmp_path)
    ep = endpoint(tls=(cert, key))
    sub = subscribe(ledger, ep.url)
    job_id = publish(ledger, "k1")
    untrusting = push()
    wait_until(lambda: ledger.job(job_id).last_error_class, what="the TLS failure")
    job = ledger.job(job_id)
    assert job.last_error_class == "TLSError" and "CERTIFICATE_VERIFY_FAILED" in job.last_error
    assert ep.count() == 0
    untrusting.stop()
    fast_backoff(ledger)
    push(ca_file=str(ca))
    wait_state(ledger, job_id, JobState.DONE)
    [request] = ep.requests
    standardwebhooks.Webhook(sub.secret).verify(request.body, request.headers)


def test_secret_rotation_signs_with_both_secrets_during_the_overlap(ledger, endpoint, push):
    ep = endpoint()
    sub = subscribe(ledger, ep.url)
    rotated = rotate_secret(ledger.backend, sub.id)
    assert rotated.previous_secret == sub.secret and rotated.secret != sub.secret
    first = publish(ledger, "k1")
    service = push()
    wait_state(ledger, first, JobState.DONE)
    [request] = ep.requests
    assert len(request.headers["webhook-signature"].split(" ")) == 2
    for secret in (sub.secret, rotated.secret):  # a receiver with either one verifies
        standardwebhooks.Webhook(secret).verify(request.body, request.headers)
    service.stop()
    from datetime import timedelta

    rotate_secret(ledger.backend, sub.id, overlap=timedelta(0))
    newest = ledger.backend.subscriptions.get(sub.id)
    second = publish(ledger, "k2")
    push()
    wait_state(ledger, second, JobState.DONE)
    last = ep.requests[-1]
    assert len(last.headers["webhook-signature"].split(" ")) == 1
    standardwebhooks.Webhook(newest.secret).verify(last.body, last.headers)
    for stale in (sub.secret, rotated.secret):
        with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
            standardwebhooks.Webhook(stale).verify(last.body, last.headers)


def test_a_slow_endpoint_does_not_delay_a_fast_one(ledger, endpoint, push):
    gate = threading.Event()

    def stuck(request, n):
        gate.wait(30)
        return 200, {}, b""

    slow = endpoint(stuck)
    fast = endpoint()
    subscribe(ledger, slow.url, queue="slow", concurrency=1, timeout_seconds=30)
    subscribe(ledger, fast.url, queue="fast")
    slow_jobs = [publish(ledger, f"s{i}", queue="slow") for i in range(3)]
    fast_jobs = [publish(ledger, f"f{i}", queue="fast") for i in range(10)]
    push()
    try:
        for job_id in fast_jobs:
            wait_state(ledger, job_id, JobState.DONE)
        # Every fast delivery finished while the slow endpoint still holds its first request.
        assert slow.count() == 1 and not gate.is_set()
    finally:
        gate.set()
    for job_id in slow_jobs:
        wait_state(ledger, job_id, JobState.DONE)


def test_concurrency_and_rate_limits_per_subscription(ledger, endpoint, push):
    lock = threading.Lock()
    state = {"now": 0, "peak": 0}

    def counting(request, n):
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.05)
        with lock:
            state["now"] -= 1
        return 200, {}, b""

    bounded = endpoint(counting)
    paced = endpoint()
    subscribe(ledger, bounded.url, queue="bounded", concurrency=2)
    subscribe(ledger, paced.url, queue="paced", rate_per_second=10, burst=1)
    bounded_jobs = [publish(ledger, f"b{i}", queue="bounded") for i in range(8)]
    paced_jobs = [publish(ledger, f"p{i}", queue="paced") for i in range(6)]
    push()
    for job_id in bounded_jobs + paced_jobs:
        wait_state(ledger, job_id, JobState.DONE)
    assert state["peak"] == 2
    times = sorted(r.at for r in paced.requests)
    # 10 per second, no burst: six deliveries take at least half a second.
    assert times[-1] - times[0] >= 0.45


def test_observers_counters_and_structured_logs(ledger, endpoint, push, caplog):
    fast_backoff(ledger)
    ep = endpoint(scripted((503, {}, b""), (200, {}, b"")))
    sub = subscribe(ledger, ep.url)
    seen = []

    class Recorder:
        def on_push_delivery(self, report):
            seen.append(report)

    ledger.observers.append(Recorder())
    job_id = ledger.enqueue(TASK, {"n": 1}, key="k1", queue="hooks", correlation_id="corr-7").id
    with caplog.at_level("INFO", logger="jobledger.push"):
        service = push()
        wait_state(ledger, job_id, JobState.DONE)
        wait_until(lambda: len(seen) == 2, what="two reports")
    assert [(r.status, r.status_class, r.outcome) for r in seen] == [
        (503, "5xx", "retry"),
        (200, "2xx", "done"),
    ]
    assert all(r.correlation_id == "corr-7" and r.subscription_id == sub.id for r in seen)
    assert service.counters.total(status_class="2xx") == 1
    assert service.counters.total(outcome="retry", queue="hooks") == 1
    lines = [r for r in caplog.records if r.name == "jobledger.push" and hasattr(r, "job_id")]
    assert [(r.status, r.status_class, r.attempt) for r in lines] == [
        (503, "5xx", 1),
        (200, "2xx", 2),
    ]
    assert all(r.correlation_id == "corr-7" and r.subscription == sub.id for r in lines)
    assert all(r.queue == "hooks" and r.key == "k1" and r.duration >= 0 for r in lines)
    assert [r.headers.get("jobledger-correlation-id") for r in ep.requests] == ["corr-7"] * 2
    body = json.loads(ep.requests[0].body)
    assert set(body) == {"type", "timestamp", "data"}


def test_deliveries_are_counted_in_prometheus_metrics(ledger, endpoint, push):
    """jobledger_push_deliveries_total{queue,status_class}: fed by the metrics' observer."""
    from jobledger.observability.metrics import metrics_for

    fast_backoff(ledger)
    metrics = metrics_for(ledger)
    ep = endpoint(scripted((503, {}, b""), (200, {}, b"")))
    subscribe(ledger, ep.url)
    job_id = publish(ledger, "m1")
    push()
    wait_state(ledger, job_id, JobState.DONE)

    def count(status_class: str) -> float | None:
        return metrics.registry.get_sample_value(
            "jobledger_push_deliveries_total", {"queue": "hooks", "status_class": status_class}
        )

    wait_until(lambda: count("2xx") == 1, what="the 2xx delivery counted")
    assert count("5xx") == 1


SENDER = """
import sys
from jobledger import Ledger
from jobledger.push import PushService, PushSettings
settings = PushSettings(allow_networks=("127.0.0.1",), poll_interval=0.05, lease_margin=0.5)
PushService(Ledger(sys.argv[1]), settings).run()
"""


@pytest.mark.slow
def test_a_sender_killed_mid_delivery_delivers_again_with_the_same_id(ledger, endpoint, push):
    import os
    import subprocess
    import sys

    from ..support.processes import ROOT, wait_exit

    ep = endpoint()
    sub = subscribe(ledger, ep.url, timeout_seconds=1)
    job_id = publish(ledger, "4187:2026-W33")
    env = dict(os.environ, JOBLEDGER_FAULTS="push.before_outcome=kill")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, "-c", SENDER, ledger.url.raw],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    code, out, _ = wait_exit(proc, 30)
    assert code == -9, out  # killed after the answer, before the outcome
    assert ep.count() == 1 and job_state(ledger, job_id) is JobState.LEASED
    push(lease_margin=0.5)  # its rescuer returns the job once the lease expired
    wait_state(ledger, job_id, JobState.DONE)
    attempts = ledger.history(job_id).attempts
    assert [a.outcome.value for a in attempts] == ["lease_expired", "done"]
    first, second = ep.requests
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == "4187:2026-W33"
    assert second.headers["jobledger-attempt"] == "2"
    for request in (first, second):
        standardwebhooks.Webhook(sub.secret).verify(request.body, request.headers)
    assert json.loads(first.body) == json.loads(second.body)  # the same event, signed anew


def test_a_stop_that_abandons_a_request_in_flight_gives_the_job_back_uncharged(
    ledger, endpoint, push
):
    gate = threading.Event()

    def stuck(request, n):
        if n == 1:
            gate.wait(30)  # answers 200 only once the sender has given up on it
        return 200, {}, b""

    ep = endpoint(stuck)
    sub = subscribe(ledger, ep.url, timeout_seconds=30)
    job_id = publish(ledger, "4187:2026-W33")
    service = push(grace=0.2)
    try:
        wait_until(lambda: ep.count() == 1, what="the first request")
        service.stop()
        # Abandoned past the grace: released, uncharged, due again; never done without a 2xx.
        job = ledger.job(job_id)
        assert job.state is JobState.PENDING and job.budget_left == 10
        [attempt] = ledger.history(job_id).attempts
        assert attempt.outcome is AttemptOutcome.RELEASED
        assert service.counters.by_outcome() == {(sub.id, "hooks", "released"): 1}
    finally:
        gate.set()
    # The endpoint's late 200 changes nothing; the next loop delivers it with the same id.
    assert job_state(ledger, job_id) is JobState.PENDING
    push()
    wait_state(ledger, job_id, JobState.DONE)
    first, second = ep.requests
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == "4187:2026-W33"
    assert [a.outcome.value for a in ledger.history(job_id).attempts] == ["released", "done"]


def test_a_database_gone_mid_delivery_loses_no_job_and_the_lanes_go_on(tmp_path, endpoint, caplog):
    """SQLite made unreadable while a request is in flight: the 2xx's outcome waits for the
    database, the lanes' claims fail and are retried, and once it is back the job is done
    and later ones are delivered."""
    from jobledger import Ledger
    from jobledger.errors import BackendUnavailable
    from jobledger.push import PushService

    from ..support.outage import SqliteCut
    from .conftest import fast_settings

    def done(job_id):
        try:
            return job_state(ledger, job_id) is JobState.DONE
        except BackendUnavailable:  # until this process sees the database back
            return False

    cut = SqliteCut(tmp_path)
    ledger = Ledger(cut.url)
    ledger.migrate()
    gate = threading.Event()
    service = None

    def held(request, n):
        if n == 1:
            gate.wait(30)
        return 200, {}, b""

    try:
        ep = endpoint(held)
        subscribe(ledger, ep.url, timeout_seconds=30)
        first = publish(ledger, "k1")
        service = PushService(ledger, fast_settings())
        service.start()
        wait_until(lambda: ep.count() == 1, what="the first request")
        cut.cut()
        gate.set()  # the 200 arrives while the database is away
        for logged in ("claim failed", "cannot read subscriptions"):  # the lane's, the loop's
            wait_until(
                lambda: any(logged in r.getMessage() for r in caplog.records),  # noqa: B023
                what=f"a log line saying {logged!r}",
            )
        cut.restore()
        wait_until(lambda: done(first), what="the first job to be done")
        second = publish(ledger, "k2")
        wait_until(lambda: done(second), what="the second job to be done")
        assert [r.headers["webhook-id"] for r in ep.requests] == ["k1", "k2"]
        assert [a.outcome.value for a in ledger.history(first).attempts] == ["done"]
    finally:
        gate.set()
        if service is not None:
            service.stop()
        ledger.close()
