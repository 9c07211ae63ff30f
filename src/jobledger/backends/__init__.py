"""Database backends. ``open_backend(url)`` picks one by the URL's scheme."""

from __future__ import annotations

from .._records import (
    FailResult,
    Failure,
    JobFilter,
    Lease,
    NewJob,
    QueueStats,
    RescueResult,
)
from .base import Backend
from .url import DEFAULT_URL, DatabaseURL, redact

__all__ = [
    "DEFAULT_URL",
    "Backend",
    "DatabaseURL",
    "FailResult",
    "Failure",
    "JobFilter",
    "Lease",
    "NewJob",
    "QueueStats",
    "RescueResult",
    "open_backend",
    "redact",
]


def open_backend(url: str | DatabaseURL, *, create: bool = True) -> Backend:
    """Open the backend for a URL. ``create=False`` refuses to create a new SQLite file (the
    CLI's read commands use it, so that a typo in a path is an error, not an empty ledger)."""
    parsed = url if isinstance(url, DatabaseURL) else DatabaseURL.parse(url)
    if parsed.dialect == "sqlite":
        from .sqlite import SqliteBackend

        return SqliteBackend(parsed, create=create)
    from .postgres import PostgresBackend

    return PostgresBackend(parsed)
