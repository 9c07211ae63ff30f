"""Push subscriptions: "POST every job of queue Q to this URL, signed".

A subscription is the consumer of its queue: the delivery loop (``jobledger push``, and inside
``jobledger serve``) claims the queue's jobs under leases, like any worker, and POSTs each one to
the subscription's URL per Standard Webhooks (see ``jobledger.push`` and docs/push.md). A
queue has at most one subscription.

The row also keeps the subscription's health — the last status, the last error, consecutive
failures, counts — and its state: ``active``, ``paused`` by an operator, or ``disabled`` because
the endpoint answered 410 Gone. Signing secrets are stored as they are (an HMAC needs the secret
itself, unlike an API key, which is only compared): protect the database as you protect its data.
"""

from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigError
from .checks import has_surrogate

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_OVERLAP",
    "DEFAULT_TIMEOUT_SECONDS",
    "MAX_CONCURRENCY",
    "MAX_OVERLAP",
    "MAX_TIMEOUT_SECONDS",
    "MAX_URL_LENGTH",
    "Subscription",
    "SubscriptionState",
    "validate_url",
]

DEFAULT_TIMEOUT_SECONDS = 15.0
MAX_TIMEOUT_SECONDS = 60.0
DEFAULT_CONCURRENCY = 4
MAX_CONCURRENCY = 100
MAX_URL_LENGTH = 2000
#: How long the previous secret keeps signing after a rotation, unless told otherwise.
DEFAULT_OVERLAP = timedelta(hours=24)
MAX_OVERLAP = timedelta(days=30)


class SubscriptionState(enum.StrEnum):
    """Whether the delivery loop sends a subscription's jobs."""

    ACTIVE = "active"
    """Its jobs are delivered."""
    PAUSED = "paused"
    """An operator paused it; jobs wait in the queue until it is resumed."""
    DISABLED = "disabled"
    """The endpoint answered 410 Gone; jobs wait until an operator resumes it."""


@dataclass(frozen=True, slots=True)
class Subscription:
    """A push subscription as stored: where to POST a queue's jobs, how, and how it is going.

    ``secret`` signs every delivery; after a rotation ``previous_secret`` signs too (a second
    signature in the header) until ``previous_until``. ``rate_per_second``/``burst`` limit
    deliveries (shared by every delivering process, kept in the database); ``concurrency``
    bounds the requests in flight per delivering process; ``timeout_seconds`` bounds each
    request from connect to the end of the answer.
    """

    id: str
    queue: str
    url: str
    secret: str = field(repr=False)
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    concurrency: int = DEFAULT_CONCURRENCY
    rate_per_second: float | None = None
    burst: float | None = None
    state: SubscriptionState = SubscriptionState.ACTIVE
    state_reason: str | None = None
    state_actor: str | None = None
    state_changed_at: datetime | None = None
    previous_secret: str | None = field(default=None, repr=False)
    previous_until: datetime | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    last_attempt_at: datetime | None = None
    last_success_at: datetime | None = None
    last_failure_at: datetime | None = None
    last_status: int | None = None
    last_error: str | None = None
    consecutive_failures: int = 0
    delivered: int = 0
    failed: int = 0

    def signing_secrets(self, now: datetime) -> list[str]:
        """The secrets that sign a delivery made at ``now``: the current one first."""
        out = [self.secret]
        if self.previous_secret and self.previous_until is not None and now < self.previous_until:
            out.append(self.previous_secret)
        return out

    @property
    def health(self) -> str:
        """``paused`` / ``disabled``; else ``failing`` after a failed delivery, ``healthy``
        after a successful one, ``new`` before the first."""
        if self.state is not SubscriptionState.ACTIVE:
            return self.state.value
        if self.consecutive_failures:
            return "failing"
        return "healthy" if self.last_success_at is not None else "new"

    def public(self) -> dict[str, Any]:
        """Everything but the secrets, as JSON-ready values (for listings and the API)."""
        return {
            "id": self.id,
            "queue": self.queue,
            "url": self.url,
            "state": self.state.value,
            "state_reason": self.state_reason,
            "state_actor": self.state_actor,
            "state_changed_at": _iso(self.state_changed_at),
            "health": self.health,
            "timeout_seconds": self.timeout_seconds,
            "concurrency": self.concurrency,
            "rate_per_second": self.rate_per_second,
            "burst": self.burst,
            "previous_secret_until": _iso(self.previous_until) if self.previous_secret else None,
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
            "last_attempt_at": _iso(self.last_attempt_at),
            "last_success_at": _iso(self.last_success_at),
            "last_failure_at": _iso(self.last_failure_at),
            "last_status": self.last_status,
            "last_error": self.last_error,
            "consecutive_failures": self.consecutive_failures,
            "delivered": self.delivered,
            "failed": self.failed,
        }


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def validate_url(url: Any) -> str:
    """An ``https://`` (or ``http://``) URL with a host, no credentials and no fragment.

    Whether its address may be reached is decided when connecting (docs/push.md: private
    networks are refused unless allow-listed; plain http only to allow-listed networks)."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL_LENGTH:
        raise ConfigError(f"a subscription URL is 1-{MAX_URL_LENGTH} characters, got {url!r}")
    if any(ord(ch) <= 32 or ord(ch) == 127 for ch in url):
        raise ConfigError("a subscription URL cannot contain spaces or control characters")
    if has_surrogate(url):
        raise ConfigError("a subscription URL cannot contain half of a surrogate pair (not UTF-8)")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"subscription URL {url!r} is invalid: {exc}") from None
    if parts.scheme not in ("https", "http"):
        raise ConfigError(f"subscription URL {url!r} must start with https:// (or http://)")
    if not parts.hostname:
        raise ConfigError(f"subscription URL {url!r} has no host")
    if parts.username is not None or parts.password is not None:
        raise ConfigError("a subscription URL cannot carry credentials (user:password@)")
    if parts.fragment:
        raise ConfigError("a subscription URL cannot have a #fragment")
    if port == 0:
        raise ConfigError(f"subscription URL {url!r} has port 0")
    host = parts.hostname
    if ":" in host or host.replace(".", "").isdigit():
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ConfigError(f"subscription URL {url!r} has an invalid IP address") from None
    return url
