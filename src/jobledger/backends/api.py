"""The api role: what the HTTP API keeps in the database — declared queues, API keys, dashboard
sessions and rate-limit buckets (shared by every server process)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from .._records import ApiKey, QueueInfo, QueueSettings

__all__ = ["Api"]


class Api(Protocol):
    """Queues, keys, sessions and rate limits (``backend.api``)."""

    # -- declared queues -----------------------------------------------------------------------

    def queue_put(
        self, settings: QueueSettings, now: datetime | None = None
    ) -> tuple[QueueInfo, bool]:
        """Declare a queue or replace its settings; return it and whether it was created."""
        ...

    def queue_get(self, name: str) -> QueueInfo:
        """The declared queue, or ``NotFound``."""
        ...

    def queues(self) -> list[QueueInfo]:
        """Every declared queue, by name."""
        ...

    # -- API keys ------------------------------------------------------------------------------

    def key_insert(self, key: ApiKey, digest: str, now: datetime | None = None) -> ApiKey:
        """Store a new key by its digest; return it as stored (with ``created_at``)."""
        ...

    def key_get(self, digest: str) -> ApiKey | None:
        """The key with this digest (revoked or not), or None."""
        ...

    def keys(self) -> list[ApiKey]:
        """Every key, oldest first, revoked ones included."""
        ...

    def key_revoke(self, key_id: str, now: datetime | None = None) -> ApiKey:
        """Revoke a key (it stops working at once); ``NotFound`` for an unknown id. Revoking a
        revoked key changes nothing."""
        ...

    # -- dashboard sessions --------------------------------------------------------------------

    def session_insert(
        self, digest: str, api_key_id: str, ttl_seconds: float, now: datetime | None = None
    ) -> datetime:
        """Store a dashboard session by the digest of its token; return when it expires."""
        ...

    def session_get(self, digest: str, now: datetime | None = None) -> ApiKey | None:
        """The API key of an unexpired session (revoked or not: the caller checks), or None."""
        ...

    def session_delete(self, digest: str) -> None:
        """End a session."""
        ...

    def session_prune(self, now: datetime | None = None) -> int:
        """Delete expired sessions; return how many."""
        ...

    # -- rate limits ---------------------------------------------------------------------------

    def ratelimit_take(
        self, bucket: str, rate: float, burst: float, cost: float = 1.0, now: datetime | None = None
    ) -> float:
        """Take ``cost`` tokens from a bucket refilled at ``rate`` per second up to ``burst``.

        Returns 0.0 when taken, else the seconds until they would be (and takes nothing). The
        bucket lives in the database, so every server process shares it. ``cost <= burst``.
        """
        ...
