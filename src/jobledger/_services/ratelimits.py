"""Rate limits kept in the database (``ledger.rate_limits``): GCRA token buckets by name, so
that every server process shares one budget."""

from __future__ import annotations

from .base import Service

__all__ = ["RateLimits"]


class RateLimits(Service):
    """Token buckets by name."""

    def take(self, bucket: str, rate: float, burst: float, cost: float = 1.0) -> float:
        """Take ``cost`` tokens from ``bucket`` (refilled at ``rate`` per second up to
        ``burst``). Returns 0.0 when taken, else the seconds until they would be (and takes
        nothing). ``cost`` must not exceed ``burst``."""
        return self._backend.api.ratelimit_take(bucket, rate, burst, cost)
