"""An HTTP ``Retry-After`` value read as seconds: for the retry policy, for ``Retry(after=…)``
made from a header's text, and for the HTTP client. Below every other module (it imports none
of them), so that ``errors`` may use it."""

from __future__ import annotations

import email.utils
from datetime import UTC, datetime

__all__ = ["parse_retry_after"]


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from an HTTP ``Retry-After`` value: delta-seconds or an HTTP-date.

    Returns None when the value is missing or unreadable; never a negative number.
    """
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    now = now or datetime.now(UTC)
    return max(0.0, (when - now).total_seconds())
