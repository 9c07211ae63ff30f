"""Declared queues: the settings the HTTP API publishes and receives under (``ledger.queue_settings``)."""

from __future__ import annotations

from datetime import datetime

from .._records import QueueInfo, QueueSettings, explicit_now, lookup_text, validate_queue_name
from ..errors import ConfigError, NotFound
from .base import Service

__all__ = ["QueueSettingsBook"]


class QueueSettingsBook(Service):
    """Declare a queue, replace its settings, read them. Settings apply to jobs published
    after a change; jobs already in the queue keep what they were published with."""

    def declare(
        self, settings: QueueSettings, now: datetime | None = None
    ) -> tuple[QueueInfo, bool]:
        """Declare a queue or replace its settings; return it and whether it was created."""
        explicit_now(now)
        return self._backend.api.queue_put(settings, now)

    def get(self, name: str) -> QueueInfo:
        """The declared queue, or ``NotFound`` (for a name no queue can have too); a name that
        is no text is a ``ConfigError`` (``lookup_text``)."""
        lookup_text(name, "a queue's name", f"no queue named {name!r}")
        try:
            validate_queue_name(name)
        except ConfigError:
            raise NotFound(f"no queue named {name!r}") from None
        return self._backend.api.queue_get(name)

    def list(self) -> list[QueueInfo]:
        """Every declared queue, by name."""
        return self._backend.api.queues()
