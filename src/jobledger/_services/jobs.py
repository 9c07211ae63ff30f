"""Reading jobs for operators (``ledger.job_reads``): a job's attempts and events, lookups by
key that answer None rather than raise, and the tombstones of pruned keys. ``Ledger.job``,
``job_by_key``, ``jobs`` and ``history`` are the ledger's own reads."""

from __future__ import annotations

from .._records import Attempt, Event, JobRow, Tombstone
from ..errors import NotFound
from .base import Service

__all__ = ["JobReads"]


class JobReads(Service):
    """Jobs, their attempts and events, as operators look them up."""

    def get(self, job_id: int) -> JobRow | None:
        """The job with this id, or None."""
        try:
            return self._backend.history.get(job_id)
        except NotFound:
            return None

    def by_key(self, queue: str, key: str) -> JobRow | None:
        """The job with this key in ``queue``, or None."""
        try:
            return self._backend.history.get_by_key(queue, key)
        except NotFound:
            return None

    def with_key(self, key: str) -> list[JobRow]:
        """The jobs with this key, in every queue."""
        return self._backend.history.find_key(key)

    def attempts(self, job_id: int) -> list[Attempt]:
        """The job's attempts, first to last."""
        return self._backend.history.attempts(job_id)

    def events(self, job_id: int) -> list[Event]:
        """The job's operator events (redrive, resolve, refused late writes), oldest first."""
        return self._backend.history.events(job_id)

    def tombstones(self, key: str, queue: str | None = None) -> list[Tombstone]:
        """What is left of pruned jobs with this key: their tombstones, newest first."""
        return self._backend.history.tombstones(key, queue)
