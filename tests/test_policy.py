"""The retry policy: backoff, Retry-After, classification (pure functions)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest

from jobledger import (
    Backoff,
    ConfigError,
    Permanent,
    Retry,
    check_response,
    parse_retry_after,
)
from jobledger.policy import classify, classify_status

NOW = datetime(2026, 8, 10, 6, 0, tzinfo=UTC)


def test_backoff_ceiling_doubles_and_caps():
    b = Backoff(base=2, cap=60, jitter=False)
    assert [b.delay(n) for n in range(1, 8)] == [2, 4, 8, 16, 32, 60, 60]
    assert Backoff().ceiling(10_000) == 3600


def test_full_jitter_stays_between_zero_and_the_ceiling():
    b = Backoff(base=2, cap=60)
    assert b.delay(3, rng=lambda: 0.0) == 0.0
    assert b.delay(3, rng=lambda: 0.999) == pytest.approx(7.992)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base": 0},
        {"base": 10, "cap": 5},
        {"base": float("inf"), "cap": float("inf")},
        {"base": float("nan")},
        {"base": True},
        {"base": "2"},
        {"cap": "60"},
        {"cap": None},
    ],
    ids=str,
)
def test_bad_backoff(kwargs):
    """Refused when built, with a message that names the setting: never a TypeError from a
    comparison (a text, None) or a base that makes every delay infinite."""
    with pytest.raises(ConfigError, match=r"^backoff (base|cap) must be"):
        Backoff(**kwargs)


def test_retry_after_seconds_and_http_date():
    assert parse_retry_after("120", NOW) == 120
    assert parse_retry_after("Mon, 10 Aug 2026 06:01:30 GMT", NOW) == 90
    assert parse_retry_after("Mon, 10 Aug 2026 05:00:00 GMT", NOW) == 0
    assert parse_retry_after("soon", NOW) is None and parse_retry_after(None) is None


@pytest.mark.parametrize("value", ["Mon, 10 Aug 2026 06:01:30", "Mon, 10 Aug 2026 06:01:30 -0000"])
def test_retry_after_date_without_a_time_zone_is_read_as_gmt(value):
    # HTTP-dates are always GMT (RFC 9110 5.6.7); a sender that leaves the zone out, or writes
    # -0000, still means GMT, and the wait is counted from there instead of the value failing.
    assert parse_retry_after(value, NOW) == 90
    decision = classify_status(503, {"Retry-After": value}, now=NOW)
    assert decision is not None and decision.retry is True and decision.delay == 90
    assert parse_retry_after("Mon, 10 Aug 2026 08:01:30 +0200", NOW) == 90


@pytest.mark.parametrize(
    "status, retry",
    [
        (429, True),
        (502, True),
        (503, True),
        (504, True),
        (500, True),
        (408, True),
        (409, True),
        (425, True),
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (422, False),
        (301, True),
    ],
)
def test_status_classes(status, retry):
    assert classify_status(status).retry is retry
    assert classify_status(204) is None


@pytest.mark.parametrize("status", [501, 505, 507, 511, 599])
def test_every_5xx_is_transient_not_only_the_listed_ones(status):
    # Docs promise "429 and 5xx retry": a 5xx that is not in the named set (a 501 from a
    # half-deployed provider, a 507) is the server's trouble, not the request's, so it must not
    # send the job to the dead letters at once.
    decision = classify_status(status)
    assert decision is not None and decision.retry is True


def test_classify_exceptions():
    assert classify(Retry("wait", after=30)).delay == 30
    assert classify(Retry("wait", after=NOW + timedelta(seconds=45)), NOW).delay == 45
    assert classify(Permanent("no")).retry is False
    assert classify(TimeoutError("slow")).retry is True
    assert classify(ValueError("anything else")).error_class == "ValueError"


def test_an_exception_whose_message_cannot_be_read_is_classified_by_its_class():
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise ValueError("no")

    decision = classify(Unprintable())
    assert (decision.retry, decision.error_class, decision.message) == (
        True,
        "test_an_exception_whose_message_cannot_be_read_is_classified_by_its_class.<locals>"
        ".Unprintable",
        "test_an_exception_whose_message_cannot_be_read_is_classified_by_its_class.<locals>"
        ".Unprintable (its message could not be read: ValueError)",
    )


def test_httpx_status_error_is_classified_with_retry_after():
    request = httpx.Request("POST", "https://provider.example/send")
    response = httpx.Response(429, headers={"Retry-After": "17"}, request=request)
    decision = classify(httpx.HTTPStatusError("429", request=request, response=response), NOW)
    assert decision.retry and decision.delay == 17 and decision.error_class == "HTTPStatusError"
    gone = httpx.Response(400, request=request)
    assert classify(httpx.HTTPStatusError("400", request=request, response=gone)).retry is False


def test_check_response():
    request = httpx.Request("POST", "https://provider.example/send")
    check_response(httpx.Response(200, request=request))
    with pytest.raises(Retry) as err:
        check_response(httpx.Response(503, headers={"Retry-After": "5"}, request=request))
    assert err.value.after == 5 and err.value.error_class == "HTTP 503"
    with pytest.raises(Permanent) as perm:
        check_response(httpx.Response(400, text="bad address", request=request))
    assert "bad address" in perm.value.reason
