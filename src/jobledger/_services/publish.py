"""Publishing over the HTTP API (``ledger.publishing``): jobs whose keys are new are inserted in
one transaction, and replays, conflicts and keys in flight are told apart (see
``PublishOutcome``)."""

from __future__ import annotations

from collections.abc import Sequence

from .._records import PublishItem, PublishOutcome
from .base import Service

__all__ = ["Publishing"]


class Publishing(Service):
    """Publish jobs with their request fingerprints."""

    def publish(self, items: Sequence[PublishItem]) -> list[PublishOutcome]:
        """One outcome per item, in order: created, replayed, conflict or in flight (another
        transaction holds the key: PostgreSQL's advisory lock)."""
        return self._backend.jobs.publish(items)
