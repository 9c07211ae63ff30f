"""Push subscriptions (``ledger.subscriptions``): created and their secrets rotated (see
``jobledger._records.subscriptions``), listed, paused, resumed and deleted."""

from __future__ import annotations

import base64
import math
import secrets as _random
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from .._records.checks import (
    explicit_now,
    lookup_text,
    operator_text,
    validate_queue_name,
    whole_number,
)
from .._records.subscriptions import (
    DEFAULT_CONCURRENCY,
    DEFAULT_OVERLAP,
    DEFAULT_TIMEOUT_SECONDS,
    MAX_CONCURRENCY,
    MAX_OVERLAP,
    MAX_TIMEOUT_SECONDS,
    Subscription,
    SubscriptionState,
    validate_url,
)
from .._webhooks import SECRET_PREFIX, generate_secret, secret_bytes
from ..errors import ConfigError
from .base import Service, on_backend

if TYPE_CHECKING:
    from ..backends.base import Backend

__all__ = ["Subscriptions", "create_subscription", "new_subscription_id", "rotate_secret"]


def _number(value: Any, what: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{what} must be a number, got {value!r}")
    if not low < value <= high:
        raise ConfigError(f"{what} must be > {low:g} and <= {high:g}, got {value!r}")
    return float(value)


def _limits(
    timeout_seconds: Any, concurrency: Any, rate: Any, burst: Any
) -> tuple[float, int, float | None, float | None]:
    """The limits checked, in the order of ``Subscription``'s fields after its secret."""
    timeout = _number(timeout_seconds, "timeout_seconds", 0, MAX_TIMEOUT_SECONDS)
    whole_number(concurrency, 1, MAX_CONCURRENCY, "concurrency")
    rate_value = None if rate is None else _number(rate, "rate_limit", 0, 100_000)
    burst_value = None if burst is None else _number(burst, "burst", 0, 100_000)
    if burst_value is not None:
        if rate_value is None:
            raise ConfigError("a burst needs a rate limit")
        if burst_value < 1:
            raise ConfigError(f"burst must be >= 1, got {burst!r}")
    if rate_value is not None and burst_value is None:
        burst_value = max(1.0, rate_value)
    return timeout, concurrency, rate_value, burst_value


def _check_secret(secret: str) -> None:
    """A secret to store: ``whsec_`` and 24 to 64 bytes in base64 exactly as an encoder writes
    it (padded, no extra ``=``, unused bits zero), so that every verifier decodes it alike."""
    key = secret_bytes(secret)
    if SECRET_PREFIX + base64.b64encode(key).decode("ascii") != secret:
        raise ConfigError(
            "the webhook secret after 'whsec_' must be base64 as an encoder writes it "
            "(padded with '=' to a multiple of 4 characters, no more)"
        )


def new_subscription_id() -> str:
    return "sub_" + _random.token_hex(6)


def create_subscription(
    backend: Backend,
    queue: str,
    url: str,
    *,
    secret: str | None = None,
    rate_per_second: float | None = None,
    burst: float | None = None,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    concurrency: int = DEFAULT_CONCURRENCY,
    now: datetime | None = None,
) -> Subscription:
    """Validate and store a subscription; a ``whsec_`` secret is generated when none is given.
    The returned record carries the secret: show it once. ``SubscriptionExists`` when the queue
    already has one."""
    explicit_now(now)
    validate_queue_name(queue)
    validate_url(url)
    if secret is None:
        secret = generate_secret()
    else:
        _check_secret(secret)
    limits = _limits(timeout_seconds, concurrency, rate_per_second, burst)
    record = Subscription(new_subscription_id(), queue, url, secret, *limits)
    return backend.subscriptions.insert(record, now)


def rotate_secret(
    backend: Backend,
    subscription_id: str,
    *,
    secret: str | None = None,
    overlap: timedelta = DEFAULT_OVERLAP,
    now: datetime | None = None,
) -> Subscription:
    """Give a subscription a new secret (generated unless given). The old one keeps signing —
    a second signature in each delivery's header — for ``overlap`` (default 24 h; zero ends it
    at once), so that receivers can switch without a failed delivery."""
    explicit_now(now)
    if secret is None:
        secret = generate_secret()
    else:
        _check_secret(secret)
    if not isinstance(overlap, timedelta) or not timedelta(0) <= overlap <= MAX_OVERLAP:
        raise ConfigError(f"the overlap must be between 0 and {MAX_OVERLAP.days} days")
    return backend.subscriptions.rotate(
        _named(subscription_id), secret, overlap.total_seconds(), now
    )


def _named(subscription_id: Any) -> str:
    """``subscription_id`` to find a subscription by (``lookup_text``)."""
    return lookup_text(
        subscription_id, "a subscription's id", f"no subscription {subscription_id!r}"
    )


class Subscriptions(Service):
    """The ledger's push subscriptions."""

    create = on_backend(create_subscription)
    rotate = on_backend(rotate_secret)

    def list(self) -> list[Subscription]:
        """Every subscription, by queue (with its secrets: never show them in a listing)."""
        return self._backend.subscriptions.all()

    def get(self, subscription_id: str) -> Subscription:
        """The subscription with this id, or ``NotFound``."""
        return self._backend.subscriptions.get(_named(subscription_id))

    def set_state(
        self,
        subscription_id: str,
        state: SubscriptionState,
        actor: str | None,
        reason: str | None = None,
    ) -> Subscription:
        """Pause, resume (``active``) or disable a subscription, recording who and why."""
        operator_text(actor, "actor", optional=True), operator_text(reason, "reason", optional=True)
        return self._backend.subscriptions.set_state(_named(subscription_id), state, actor, reason)

    def delete(self, subscription_id: str) -> Subscription:
        """Delete a subscription (its queue's jobs stay); return what was deleted."""
        return self._backend.subscriptions.delete(_named(subscription_id))
