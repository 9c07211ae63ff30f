"""API keys: created (shown once, stored as a digest; see ``jobledger._records.keys``), looked
up by the key a caller presents, listed and revoked (``ledger.keys``)."""

from __future__ import annotations

import math
import secrets
from typing import TYPE_CHECKING, Any

from .._records.checks import has_surrogate, lookup_text
from .._records.keys import KEY_PREFIX, MAX_KEY_NAME, ApiKey, digest, parse_scopes
from ..errors import ConfigError
from .base import Service, on_backend

if TYPE_CHECKING:
    from ..backends.base import Backend

__all__ = ["Keys", "create_api_key", "new_key"]


def _positive(value: float | None, what: str, low: float) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{what} must be a number, got {value!r}")
    if value < low or value <= 0:
        raise ConfigError(f"{what} must be >= {low:g}, got {value!r}")
    return float(value)


def new_key() -> tuple[str, str]:
    """A fresh ``(id, key)`` pair. The key embeds the id and 256 random bits."""
    key_id = secrets.token_hex(5)
    return key_id, f"{KEY_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"


def create_api_key(
    backend: Backend,
    name: str,
    scopes: Any,
    *,
    rate_per_second: float | None = None,
    burst: float | None = None,
) -> tuple[str, ApiKey]:
    """Create a key; return ``(key, record)``. The key is not stored and cannot be shown again:
    show it now."""
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_KEY_NAME:
        raise ConfigError(f"a key name is 1-{MAX_KEY_NAME} characters, got {name!r}")
    if any(ord(ch) < 32 for ch in name):
        raise ConfigError("a key name cannot contain control characters")
    if has_surrogate(name):
        raise ConfigError("a key name cannot contain half of a surrogate pair (not UTF-8)")
    rate = _positive(rate_per_second, "rate", 0.001)
    burst_value = _positive(burst, "burst", 1.0)
    if burst_value is not None and rate is None:
        raise ConfigError("burst needs a rate: give --rate too")
    if rate is not None and burst_value is None:
        burst_value = max(1.0, rate)
    key_id, key = new_key()
    record = ApiKey(
        id=key_id,
        name=name.strip(),
        scopes=parse_scopes(scopes),
        rate_per_second=rate,
        burst=burst_value,
    )
    stored = backend.api.key_insert(record, digest(key))
    return key, stored


class Keys(Service):
    """The ledger's API keys."""

    create = on_backend(create_api_key)

    def authenticate(self, key: str) -> ApiKey | None:
        """The live key a caller presented, or None when it is unknown or revoked. Every key is
        ASCII text: anything else is unknown (a lone surrogate could not even be hashed)."""
        if not isinstance(key, str) or not key.isascii():
            return None
        record = self._backend.api.key_get(digest(key))
        if record is None or record.revoked:
            return None
        return record

    def list(self) -> list[ApiKey]:
        """Every key, oldest first, revoked ones included (never the keys themselves)."""
        return self._backend.api.keys()

    def revoke(self, key_id: str) -> ApiKey:
        """Revoke a key: it stops working at once. ``NotFound`` for an unknown id."""
        lookup_text(key_id, "an API key's id", f"no API key with id {key_id!r}")
        return self._backend.api.key_revoke(key_id)
