"""API keys for the HTTP API: scoped bearer keys, shown once and stored as a SHA-256 digest.

A key looks like ``jlk_3f9a0c1d2e_<43 random characters>``. The part after ``jlk_`` up to the
second underscore is its **id**: not secret, shown by ``jobledger keys list`` and used to revoke
it. The whole key carries 256 random bits; only its SHA-256 digest is stored. A fast, unsalted
digest is enough here because the key is random and long: there is no dictionary to try and
2^256 guesses to make, so a slow password hash would only cost every request time without making
a stolen digest any less useless. Keys are looked up by digest, so a key never has to be kept.

Scopes: ``publish:QUEUE``, ``consume:QUEUE`` (``QUEUE`` may be ``*`` for every queue), ``read``
(look at everything, change nothing: the dashboard read-only, ``/metrics``, reading queues) and
``admin`` (everything, including declaring queues, the operator routes and the dashboard's
actions).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..errors import ConfigError
from .checks import validate_queue_name

__all__ = [
    "KEY_PREFIX",
    "MAX_KEY_NAME",
    "SCOPE_KINDS",
    "ApiKey",
    "digest",
    "parse_scope",
    "parse_scopes",
]

KEY_PREFIX = "jlk_"
SCOPE_KINDS = ("publish", "consume", "read", "admin")
MAX_KEY_NAME = 200


def parse_scope(text: str) -> str:
    """Check one scope (``publish:QUEUE``, ``consume:QUEUE``, ``read``, ``admin``); return it
    normalised."""
    if not isinstance(text, str):
        raise ConfigError(f"a scope must be a string, got {text!r}")
    text = text.strip()
    if text in ("admin", "read"):
        return text
    kind, sep, queue = text.partition(":")
    if kind not in ("publish", "consume") or not sep:
        raise ConfigError(
            f"scope {text!r} is invalid: use publish:QUEUE, consume:QUEUE (QUEUE may be *), "
            "read or admin"
        )
    if queue != "*":
        validate_queue_name(queue)
    return f"{kind}:{queue}"


def parse_scopes(scopes: Any) -> tuple[str, ...]:
    """Check a list of scopes; at least one is required. Duplicates are dropped."""
    if isinstance(scopes, str):
        scopes = scopes.split()
    parsed = tuple(dict.fromkeys(parse_scope(s) for s in scopes))
    if not parsed:
        raise ConfigError(
            "an API key needs at least one scope (publish:QUEUE, consume:QUEUE, read, admin)"
        )
    return parsed


def digest(key: str) -> str:
    """The stored form of a key: hex SHA-256 of its text."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class ApiKey:
    """An API key as stored: everything but the key itself.

    ``rate_per_second`` and ``burst`` limit how many messages the key may publish (a token bucket
    shared by every server process); None means the server's default.
    """

    id: str
    name: str
    scopes: tuple[str, ...]
    created_at: datetime | None = None
    revoked_at: datetime | None = None
    rate_per_second: float | None = None
    burst: float | None = None

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    @property
    def is_admin(self) -> bool:
        return "admin" in self.scopes

    @property
    def can_read(self) -> bool:
        """True when the key may look at everything: ``read`` or ``admin``."""
        return self.is_admin or "read" in self.scopes

    def allows(self, kind: str, queue: str | None = None) -> bool:
        """True when the key may do ``kind`` (publish, consume, read, admin) on ``queue``."""
        if self.is_admin:
            return True
        if kind == "read":
            return self.can_read
        if kind == "admin" or queue is None:
            return False
        return f"{kind}:{queue}" in self.scopes or f"{kind}:*" in self.scopes

    def sees_queue(self, queue: str) -> bool:
        """True when the key has any scope on ``queue`` (it may read the queue's settings)."""
        return self.can_read or self.allows("publish", queue) or self.allows("consume", queue)

    @property
    def actor(self) -> str:
        """How this key is named in a job's history."""
        return f"apikey:{self.id}"
