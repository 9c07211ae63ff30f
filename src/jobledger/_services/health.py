"""Is the ledger's database there? (``ledger.health``): what ``/healthz`` answers."""

from __future__ import annotations

from dataclasses import dataclass

from .base import Service

__all__ = ["Health", "HealthReport"]


@dataclass(frozen=True)
class HealthReport:
    """The database answered: which kind, and the highest migration applied to it."""

    database: str
    schema_version: int


class Health(Service):
    """A cheap question to the database."""

    def check(self) -> HealthReport:
        """Ask the database for its schema version; ``BackendUnavailable`` when it does not
        answer."""
        backend = self._backend
        return HealthReport(backend.dialect, backend.schema_version())
