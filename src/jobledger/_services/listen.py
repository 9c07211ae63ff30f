"""Wake-ups from the database (``ledger.listening``): PostgreSQL's ``LISTEN/NOTIFY`` tells a
waiting consumer that a job may have arrived; SQLite has none, and waiters poll."""

from __future__ import annotations

from collections.abc import Sequence

from ..backends.base import ANY_QUEUE, Listener
from .base import Service

__all__ = ["ANY_QUEUE", "Listener", "Listening"]


class Listening(Service):
    """Wake-up channels on the ledger's database."""

    @property
    def supported(self) -> bool:
        """True when the database can push wake-ups (PostgreSQL)."""
        return self._backend.supports_listen

    def listener(self, queues: Sequence[str]) -> Listener | None:
        """A channel woken by enqueues and publishes to ``queues`` from any process; None when
        the database has none."""
        return self._backend.listener(queues)
