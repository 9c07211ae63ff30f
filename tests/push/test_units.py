"""Pure parts of push delivery: Standard Webhooks signing and verification (checked against the
standardwebhooks package both ways), webhook ids, what each answer means, and the SSRF guard."""

from __future__ import annotations

import asyncio
import base64
import math
import re
import socket
from datetime import UTC, datetime

import httpcore
import pytest
import standardwebhooks

from jobledger import ConfigError
from jobledger._records import validate_url
from jobledger._services.subscriptions import create_subscription
from jobledger._webhooks import (
    WebhookVerificationError,
    event_body,
    generate_secret,
    key_from_webhook_id,
    secret_bytes,
    sign,
    signature_header,
    verify_webhook,
    webhook_id,
)
from jobledger.push import AddressPolicy, PushSettings, TargetRefused, decide, status_class
from jobledger.push.delivery import _error_of
from jobledger.push.guard import GuardedNetworkBackend, plain_http

# The example of the Standard Webhooks specification's reference libraries.
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SPEC_TS = 1614265330
SPEC_BODY = b'{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_signature_matches_the_specification_example():
    assert sign(SPEC_SECRET, SPEC_ID, SPEC_TS, SPEC_BODY) == SPEC_SIGNATURE
    assert (
        verify_webhook(
            [SPEC_SECRET],
            {
                "webhook-id": SPEC_ID,
                "webhook-timestamp": str(SPEC_TS),
                "webhook-signature": SPEC_SIGNATURE,
            },
            SPEC_BODY,
            now=SPEC_TS + 10,
        )
        == SPEC_ID
    )


def test_our_signatures_and_theirs_agree_both_ways():
    secret = generate_secret()
    assert len(secret_bytes(secret)) == 32
    body = event_body("invoice.paid", datetime(2026, 8, 10, tzinfo=UTC), {"id": "ü"})
    assert (
        body
        == '{"type":"invoice.paid","timestamp":"2026-08-10T00:00:00Z","data":{"id":"ü"}}'.encode()
    )
    now = datetime.now(UTC)
    stamp = int(now.timestamp())
    ours = sign(secret, "k:1", stamp, body)
    theirs = standardwebhooks.Webhook(secret).sign("k:1", now, body.decode())
    assert ours == theirs
    headers = {"webhook-id": "k:1", "webhook-timestamp": str(stamp), "webhook-signature": ours}
    standardwebhooks.Webhook(secret).verify(body, headers)
    assert verify_webhook([secret], headers, body) == "k:1"


def test_verifying_with_no_secret_is_a_configuration_error():
    """An empty list of secrets (a setting left empty) verifies nothing, not even a delivery
    signed as the specification's example is: it is the operator's mistake, raised as
    ConfigError, never answered as a bad signature the sender would be blamed for."""
    headers = {
        "webhook-id": SPEC_ID,
        "webhook-timestamp": str(SPEC_TS),
        "webhook-signature": SPEC_SIGNATURE,
    }
    for secrets in ([], (), iter([])):
        with pytest.raises(ConfigError, match="at least one secret"):
            verify_webhook(secrets, headers, SPEC_BODY, now=SPEC_TS)


def test_one_secret_may_be_given_alone():
    """A secret given as a string is that one secret, as the receiver takes it: not its
    characters, each refused as a secret that does not start with whsec_."""
    headers = {
        "webhook-id": SPEC_ID,
        "webhook-timestamp": str(SPEC_TS),
        "webhook-signature": SPEC_SIGNATURE,
    }
    assert verify_webhook(SPEC_SECRET, headers, SPEC_BODY, now=SPEC_TS) == SPEC_ID
    assert verify_webhook([SPEC_SECRET], headers, SPEC_BODY, now=SPEC_TS) == SPEC_ID


def test_rotation_header_carries_one_signature_per_secret():
    old, new = generate_secret(), generate_secret()
    header = signature_header([new, old], "k", 1_700_000_000, b"{}")
    first, second = header.split(" ")
    assert first == sign(new, "k", 1_700_000_000, b"{}")
    assert second == sign(old, "k", 1_700_000_000, b"{}")
    for secret in (old, new):
        verify_webhook(
            [secret],
            {"webhook-id": "k", "webhook-timestamp": "1700000000", "webhook-signature": header},
            b"{}",
            now=1_700_000_100,
        )


@pytest.mark.parametrize(
    ("headers", "now", "reason"),
    [
        ({"webhook-timestamp": "1", "webhook-signature": "v1,x"}, 1, "missing-header"),
        (
            {"webhook-id": "k", "webhook-timestamp": "1.5", "webhook-signature": "v1,x"},
            1,
            "invalid-header",
        ),
        (
            {"webhook-id": "k", "webhook-timestamp": "-1", "webhook-signature": "v1,x"},
            1,
            "invalid-header",
        ),
        # Digits only in ASCII: U+00B2 (a byte of a latin-1 header) is a digit to str.isdigit
        # that int() refuses, and Arabic-Indic digits are ones it reads.
        (
            {"webhook-id": "k", "webhook-timestamp": "\u00b2", "webhook-signature": "v1,x"},
            1,
            "invalid-header",
        ),
        (
            {"webhook-id": "k", "webhook-timestamp": "\u0661", "webhook-signature": "v1,x"},
            1,
            "invalid-header",
        ),
        (
            {"webhook-id": "k", "webhook-timestamp": "1" * 13, "webhook-signature": "v1,x"},
            1,
            "invalid-header",
        ),
        (
            {"webhook-id": "k", "webhook-timestamp": "1000", "webhook-signature": "v1,x"},
            1301,
            "timestamp-too-old",
        ),
        (
            {"webhook-id": "k", "webhook-timestamp": "1301", "webhook-signature": "v1,x"},
            1000,
            "timestamp-too-new",
        ),
        (
            {"webhook-id": "k", "webhook-timestamp": "1000", "webhook-signature": "v1 v2,a v1,!!"},
            1000,
            "no-matching-signature",
        ),
        (
            {"webhook-id": "k", "webhook-timestamp": "1000", "webhook-signature": "v1a,AAAA"},
            1000,
            "no-matching-signature",
        ),
    ],
)
def test_verification_refuses_with_a_reason(headers, now, reason):
    with pytest.raises(WebhookVerificationError) as caught:
        verify_webhook([generate_secret()], headers, b"{}", now=now)
    assert caught.value.reason == reason


@pytest.mark.parametrize(("now", "one_second_more"), [(700, 699), (1300, 1301)])
def test_a_timestamp_exactly_five_minutes_away_either_way_verifies(now, one_second_more):
    # The tolerance is inclusive: a receiver whose clock is five minutes behind or ahead of the
    # sender's must still accept the delivery, as the specification's libraries do.
    secret = generate_secret()
    headers = {
        "webhook-id": "k",
        "webhook-timestamp": "1000",
        "webhook-signature": sign(secret, "k", 1000, b"{}"),
    }
    assert verify_webhook([secret], headers, b"{}", now=now) == "k"
    with pytest.raises(WebhookVerificationError):
        verify_webhook([secret], headers, b"{}", now=one_second_more)


def test_a_signature_of_another_body_id_or_time_does_not_verify():
    secret = generate_secret()
    good = sign(secret, "k", 1000, b"{}")
    for msg_id, stamp, body in (("k2", 1000, b"{}"), ("k", 1001, b"{}"), ("k", 1000, b"{} ")):
        with pytest.raises(WebhookVerificationError):
            verify_webhook(
                [secret],
                {"webhook-id": msg_id, "webhook-timestamp": str(stamp), "webhook-signature": good},
                body,
                now=1000,
            )


def test_only_a_v1_signature_is_checked_as_the_hmac():
    # Other versions (``v1a`` is the specification's asymmetric one) are skipped, not read as
    # HMAC: a valid digest under another label does not verify.
    secret = generate_secret()
    digest = sign(secret, "k", 1000, b"{}").removeprefix("v1,")
    for label in ("v1a", "v2", "V1", ""):
        headers = {
            "webhook-id": "k",
            "webhook-timestamp": "1000",
            "webhook-signature": f"{label},{digest}",
        }
        with pytest.raises(WebhookVerificationError, match="no-matching-signature"):
            verify_webhook([secret], headers, b"{}", now=1000)


def test_title_case_header_names_verify_too():
    # The docstring promises lower-case or title-case names: a plain dict from a framework that
    # keeps the sender's case.
    secret = generate_secret()
    headers = {
        "Webhook-Id": "k",
        "Webhook-Timestamp": "1000",
        "Webhook-Signature": sign(secret, "k", 1000, b"{}"),
    }
    assert verify_webhook([secret], headers, b"{}", now=1000) == "k"


def test_secrets_of_24_to_64_bytes_are_accepted():
    for size in (24, 64):
        secret = "whsec_" + base64.b64encode(bytes(range(size))).decode()
        assert secret_bytes(secret) == bytes(range(size))


@pytest.mark.parametrize(
    "secret",
    [
        "",
        "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "whsec_!!!",
        "whsec_" + base64.b64encode(b"x" * 8).decode(),
        "whsec_" + base64.b64encode(b"x" * 65).decode(),
    ],
)
def test_bad_secrets_are_refused(secret):
    with pytest.raises(ConfigError):
        secret_bytes(secret)


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("4187:2026-W33", "4187:2026-W33"),
        (
            "lease-expiry:property-1842:lease-77:2026-08-10",
            "lease-expiry:property-1842:lease-77:2026-08-10",
        ),
        ("a.b", "a%2Eb"),
        ("50%", "50%25"),
        ("a b", "a%20b"),
        ("Ü", "%C3%9C"),
    ],
)
def test_webhook_ids_never_contain_the_separator_and_round_trip(key, expected):
    assert webhook_id(key) == expected
    assert key_from_webhook_id(expected) == key


@pytest.mark.parametrize(
    ("status", "headers", "action", "delay"),
    [
        (200, {}, "done", None),
        (204, {}, "done", None),
        (429, {"retry-after": "7"}, "retry", 7.0),
        (429, {}, "retry", None),
        (502, {}, "retry", None),
        (503, {"retry-after": "30"}, "retry", 30.0),
        (504, {}, "retry", None),
        (500, {}, "retry", None),
        (408, {}, "retry", None),
        (410, {}, "disable", None),
        (400, {}, "dead", None),
        (401, {}, "dead", None),
        (404, {}, "dead", None),
        (422, {}, "dead", None),
        (301, {"location": "https://elsewhere"}, "retry", None),
        (307, {}, "retry", None),
    ],
)
def test_what_each_answer_means(status, headers, action, delay):
    decision = decide(status, headers, b"body")
    assert (decision.action, decision.delay) == (action, delay)
    if action != "done":
        assert decision.error_class == f"HTTP {status}"


def test_an_http_date_retry_after_is_honoured():
    now = datetime(2026, 8, 10, 6, 0, tzinfo=UTC)
    decision = decide(503, {"retry-after": "Mon, 10 Aug 2026 06:01:00 GMT"}, b"", now=now)
    assert decision.delay == 60.0


def test_status_classes():
    assert [status_class(s) for s in (200, 302, 404, 503)] == ["2xx", "3xx", "4xx", "5xx"]
    assert status_class(None, "Timeout") == "timeout"
    assert status_class(None, "TargetRefused") == "refused"
    assert status_class(None, "TLSError") == "network"


@pytest.mark.parametrize(
    ("ip", "refused"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("fd00::1", "private"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("100.64.0.1", "non-public"),
        ("::ffff:127.0.0.1", "loopback"),
        # Not assigned for use on the internet: unallocated space, and NAT64's prefix, whose
        # addresses carry an IPv4 one (here 127.0.0.1) that a NAT64 gateway would reach.
        ("4000::1", "reserved"),
        ("64:ff9b::7f00:1", "reserved"),
        ("93.184.216.34", None),
        ("2606:4700::1111", None),
    ],
)
def test_the_address_policy(ip, refused):
    why = AddressPolicy().refusal(ip)
    assert (why is None) if refused is None else (f"a {refused} address" in why)


def test_allow_listed_networks_and_plain_http():
    policy = AddressPolicy.parse(["127.0.0.1", "10.0.0.0/8"])
    assert policy.refusal("127.0.0.1") is None and policy.refusal("10.9.9.9", plain=True) is None
    assert "loopback" in policy.refusal("127.0.0.2")
    assert "plain http" in policy.refusal("93.184.216.34", plain=True)
    with pytest.raises(ConfigError, match="not an IP address"):
        AddressPolicy.parse(["localhost"])


def test_the_guard_judges_the_address_it_connects_to():
    """DNS rebinding: whatever a name resolved to before, the connection goes only to an
    address checked now; a name resolving to a private address is refused without connecting."""
    answers = {"hooks.example": ["10.0.0.7"], "mixed.example": ["10.0.0.7", "127.0.0.1"]}
    connected = []

    async def resolve(host, port):
        return answers[host]

    class Inner:
        async def connect_tcp(self, host, port, *args):
            connected.append(host)
            raise httpcore.ConnectError("test: not really connecting")

    async def attempt(policy, host):
        guard = GuardedNetworkBackend(policy, resolve)
        guard._inner = Inner()
        token = plain_http.set(False)
        try:
            await guard.connect_tcp(host, 443)
        finally:
            plain_http.reset(token)

    with pytest.raises(TargetRefused, match="10.0.0.7 is a private address"):
        asyncio.run(attempt(AddressPolicy(), "hooks.example"))
    assert connected == []
    with pytest.raises(httpcore.ConnectError):
        asyncio.run(attempt(AddressPolicy.parse(["127.0.0.1"]), "mixed.example"))
    assert connected == ["127.0.0.1"]  # only the allowed one of its addresses


def test_a_name_that_does_not_resolve_is_a_connection_error():
    """A host whose name has no address (a typo, a domain gone) fails as a connection does,
    naming the host, and connects nowhere: the delivery is retried as after any connection
    error, not refused as a forbidden target."""
    connected = []
    unknown = socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    async def resolve(host, port):
        raise unknown

    class Inner:
        async def connect_tcp(self, host, port, *args):
            connected.append(host)
            raise AssertionError("connected")

    guard = GuardedNetworkBackend(AddressPolicy(), resolve)
    guard._inner = Inner()
    with pytest.raises(httpcore.ConnectError) as caught:
        asyncio.run(guard.connect_tcp("hooks.invalid", 443))
    why = f"cannot resolve hooks.invalid: {unknown}"
    assert str(caught.value) == why and connected == []
    assert _error_of(caught.value, 10) == ("ConnectError", f"cannot connect: {why}")


@pytest.mark.parametrize(
    "url",
    [
        "ftp://x/y",
        "https://",
        "https://user:pw@x/",
        "https://x/#frag",
        "https://x:0/",
        "https://x y/",
        "https://999.1.1.1/",
        "x" * 2001,
        42,
        # Half of a surrogate pair: stored, each driver raised its own UnicodeEncodeError.
        "https://hooks.example/\ud800",
        "https://hooks\udcff.example/",
    ],
)
def test_subscription_urls_are_checked(url):
    with pytest.raises(ConfigError):
        validate_url(url)


@pytest.mark.parametrize(
    "url, why",
    [
        ("https://hooks.example:99999/x", "Port out of range 0-65535"),
        ("https://hooks.example:abc/x", "Port could not be cast to integer value as 'abc'"),
        ("https://hooks.example:-1/x", "Port could not be cast to integer value as '-1'"),
    ],
)
def test_a_subscription_url_with_an_invalid_port_is_refused_naming_it(ledger, url, why):
    # The port is read when the URL is checked, so a bad one is a ConfigError when the
    # subscription is created, not an error of every delivery later.
    with pytest.raises(ConfigError) as caught:
        create_subscription(ledger.backend, "q", url)
    assert str(caught.value) == f"subscription URL {url!r} is invalid: {why}"
    assert ledger.backend.subscriptions.all() == []


def test_subscription_settings_are_checked(ledger):
    url = "https://hooks.example/x"
    for options, message in (
        ({"timeout_seconds": 0}, "timeout_seconds"),
        ({"timeout_seconds": 61}, "timeout_seconds"),
        ({"concurrency": 0}, "concurrency"),
        ({"rate_per_second": -1}, "rate_limit"),
        ({"burst": 3}, "needs a rate"),
        ({"secret": "whsec_short"}, "secret"),
        ({"timeout_seconds": "5"}, "timeout_seconds must be a number, got '5'"),
        ({"timeout_seconds": True}, "timeout_seconds must be a number, got True"),
        ({"timeout_seconds": math.inf}, "timeout_seconds must be a number, got inf"),
        ({"rate_per_second": "8"}, "rate_limit must be a number, got '8'"),
        ({"rate_per_second": 1, "burst": False}, "burst must be a number, got False"),
    ):
        with pytest.raises(ConfigError, match=message):
            create_subscription(ledger.backend, "q", url, **options)
    with pytest.raises(ConfigError, match="queue name"):
        create_subscription(ledger.backend, "bad queue", url)
    assert ledger.backend.subscriptions.all() == []


def test_subscription_limits_at_their_bounds_and_the_default_burst(ledger):
    # Both ends of each range are allowed; a rate given without a burst bursts at the rate, but
    # never below the one delivery a burst must allow.
    url = "https://hooks.example/x"
    widest = create_subscription(
        ledger.backend, "a", url, timeout_seconds=60, concurrency=100, rate_per_second=5, burst=1
    )
    assert (widest.timeout_seconds, widest.concurrency, widest.burst) == (60.0, 100, 1.0)
    slow = create_subscription(ledger.backend, "b", url, concurrency=1, rate_per_second=0.5)
    assert (slow.rate_per_second, slow.burst) == (0.5, 1.0)
    fast = create_subscription(ledger.backend, "c", url, rate_per_second=8)
    assert fast.burst == 8.0
    for options, message in (
        ({"concurrency": 101}, "concurrency"),
        ({"concurrency": True}, "concurrency"),
        ({"rate_per_second": 1, "burst": 0.5}, "burst must be >= 1"),
    ):
        with pytest.raises(ConfigError, match=message):
            create_subscription(ledger.backend, "d", url, **options)


def test_the_push_api_is_explicit_and_documented():
    import inspect

    import jobledger._records.subscriptions as subscriptions
    import jobledger._webhooks as webhooks
    import jobledger.push as push

    for module in (push, subscriptions, webhooks):
        assert module.__all__ == sorted(module.__all__), module.__name__
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isclass(value) or inspect.isfunction(value):
                assert inspect.getdoc(value), f"{module.__name__}.{name} has no docstring"


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"refresh_interval": 0}, "push refresh_interval must be > 0 seconds"),
        ({"grace": -1}, "push grace must be > 0 seconds"),
        ({"lease_margin": True}, "push lease_margin must be > 0 seconds"),
        ({"poll_interval": 0}, "push poll_interval must be > 0 seconds"),
        ({"rescue_interval": "5"}, "push rescue_interval must be > 0 seconds"),
        ({"refresh_interval": float("inf")}, "push refresh_interval must be > 0 seconds"),
        ({"poll_interval": float("nan")}, "push poll_interval must be > 0 seconds"),
        ({"body_kept": -1}, "push body_kept must be 0..100000"),
        ({"body_kept": 100_001}, "push body_kept must be 0..100000"),
        ({"allow_networks": ["10.0.0.0/33"]}, "10.0.0.0/33"),
        ({"ca_file": "/nonexistent/ca.pem"}, "cannot load CA file"),
    ],
)
def test_bad_push_settings_are_refused_naming_them(settings, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        PushSettings(**settings)


def test_push_body_kept_may_be_0_or_100000():
    assert PushSettings(body_kept=0).body_kept == 0
    assert PushSettings(body_kept=100_000).body_kept == 100_000
