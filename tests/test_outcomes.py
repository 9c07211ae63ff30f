"""One failure, whatever the transport: ``_runtime.outcomes.failure`` builds it from a handler's
exception or from a decision already made (an HTTP answer to a push, a consumer's nack), by the
one retry policy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest

from jobledger import Backoff, Permanent, Retry
from jobledger._records import ClaimedJob, Lease
from jobledger._runtime.outcomes import failure, timed_out
from jobledger.policy import Decision, classify_status
from jobledger.push import decide

NOW = datetime(2026, 8, 10, 6, 0, tzinfo=UTC)
FIXED = Backoff(base=4, cap=60, jitter=False)


def job(attempt: int = 3, group: str | None = None) -> tuple[ClaimedJob, Lease]:
    claimed = ClaimedJob(1, "q", "k", "t", {}, attempt, "tok", NOW, 60.0, NOW, 0, None, 5, group)
    return claimed, Lease(1, "tok", attempt)


def _raising(status: int, headers: dict[str, str], body: str = "") -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "https://provider.example/send")
    response = httpx.Response(status, headers=headers, text=body, request=request)
    return httpx.HTTPStatusError("provider said no", request=request, response=response)


@pytest.mark.parametrize(
    ("status", "headers", "retry", "after"),
    [
        (429, {"Retry-After": "30"}, True, 30.0),
        (503, {}, True, 16.0),  # attempt 3 of a fixed backoff of 4 s: 4 * 2^2
        (500, {}, True, 16.0),
        (400, {}, False, None),
        (404, {}, False, None),
    ],
)
def test_an_http_answer_means_the_same_from_a_handler_and_to_a_push(status, headers, retry, after):
    claimed, lease = job()
    raised = failure(claimed, lease, _raising(status, headers), FIXED, NOW)
    answered = decide(status, {k.lower(): v for k, v in headers.items()}, b"", now=NOW)
    assert answered.action == ("retry" if retry else "dead")
    pushed = failure(
        claimed,
        lease,
        Decision(retry, answered.delay, answered.error_class or "", answered.message or ""),
        FIXED,
        NOW,
    )
    for f in (raised, pushed):
        assert f.retry is retry
        assert f.run_at == (None if after is None else NOW + timedelta(seconds=after))
    verdict = classify_status(status, headers, NOW)
    assert verdict is not None and (verdict.retry, verdict.delay) == (
        retry,
        30.0 if "Retry-After" in headers else None,
    )


def test_explicit_outcomes_and_the_group_pause():
    claimed, lease = job(group="tenant-7")
    later = failure(claimed, lease, Retry("slow down", after=90, scope="group"), FIXED, NOW)
    assert later.run_at == NOW + timedelta(seconds=90) and later.pause_group_until == later.run_at
    never = failure(claimed, lease, Permanent("bad address"), FIXED, NOW)
    assert not never.retry and never.run_at is None and never.error_class == "Permanent"
    crashed = failure(claimed, lease, ValueError("boom"), FIXED, NOW)
    assert crashed.retry and crashed.error_class == "ValueError" and "boom" in crashed.message
    assert crashed.traceback and "ValueError: boom" in crashed.traceback


def test_a_timeout_is_a_transient_failure_of_its_own_kind():
    claimed, lease = job(attempt=1)
    f = failure(claimed, lease, timed_out(2.5), FIXED, NOW)
    assert f.timed_out and f.retry and f.error_class == "Timeout"
    assert f.run_at == NOW + timedelta(seconds=4) and "2.5 s" in f.message


class _Unreadable:
    """A response whose status cannot be read (a client library's lazy property that fails)."""

    @property
    def status_code(self) -> int:
        raise RuntimeError("the connection was closed before the status line")


class _ProviderError(Exception):
    response = _Unreadable()


def test_an_exception_whose_outcome_cannot_be_read_is_a_transient_failure_that_says_so():
    """``classify`` raised here, and the worker's runner then wrote no outcome at all: the
    job stayed leased, its lease renewed, for as long as the worker ran."""
    claimed, lease = job(attempt=1)
    f = failure(claimed, lease, _ProviderError("timed out"), FIXED, NOW)
    assert f.retry and f.error_class == "_ProviderError"
    assert f.message.startswith("_ProviderError (its outcome could not be read: RuntimeError(")
    assert f.run_at == NOW + timedelta(seconds=4) and "timed out" in (f.traceback or "")


@pytest.mark.parametrize(
    ("after", "seconds"),
    [
        (timedelta(minutes=5), 300.0),
        ("120", 120.0),
        (-5, -5),  # before now: as soon as a worker claims it
        (float("inf"), float("inf")),  # the latest time the ledger keeps
    ],
    ids=repr,
)
def test_a_retry_after_a_timedelta_or_a_retry_after_header_is_in_seconds(after, seconds):
    assert Retry(after=after).after == seconds


def test_a_retry_after_an_http_date_is_the_seconds_until_it():
    when = datetime.now(UTC) + timedelta(hours=1)
    header = when.strftime("%a, %d %b %Y %H:%M:%S GMT")
    assert 3590 <= Retry(after=header).after <= 3600


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: Retry(after=datetime(2030, 1, 1)), ValueError, "pass an aware datetime"),
        (lambda: Retry(after=float("nan")), TypeError, "Retry(after=nan): pass seconds"),
        (lambda: Retry(after=True), TypeError, "Retry(after=True): pass seconds"),
        (lambda: Retry(after=[30]), TypeError, "Retry(after=[30]): pass seconds"),
        (lambda: Retry(after="soon"), ValueError, "neither a number of seconds nor an HTTP date"),
        (lambda: Retry(7), TypeError, "Retry's reason must be a text, got 7"),
        (lambda: Retry("x", error_class=429), TypeError, "Retry's error_class must be a text"),
        (lambda: Permanent(7), TypeError, "Permanent's reason must be a text, got 7"),
        (lambda: Permanent("x", error_class=b"E"), TypeError, "Permanent's error_class must be"),
    ],
    ids=[
        "naive",
        "nan",
        "bool",
        "list",
        "unreadable-text",
        "retry-reason",
        "retry-class",
        "permanent-reason",
        "permanent-class",
    ],
)
def test_an_outcome_made_of_what_no_outcome_can_hold_is_refused_where_it_is_made(
    make, error, message
):
    """In the handler, where it fails the attempt as any other exception of the handler does
    (tests/conformance/test_retries.py), not later, where its outcome could not be written."""
    with pytest.raises(error) as raised:
        make()
    assert message in str(raised.value)
