"""Dashboard sessions (``ledger.sessions``): a random token given to the browser, stored only as
its digest beside the API key it was opened with."""

from __future__ import annotations

import secrets

from .._records import ApiKey, digest
from .base import Service

__all__ = ["Sessions"]


class Sessions(Service):
    """Open, look up and close dashboard sessions."""

    def open(self, key: ApiKey, seconds: float) -> str:
        """A new session for ``key`` lasting ``seconds``; returns its token (only its digest is
        stored). Expired sessions are deleted on the way."""
        token = secrets.token_urlsafe(32)
        self._backend.api.session_prune()
        self._backend.api.session_insert(digest(token), key.id, seconds)
        return token

    def key_of(self, token: str) -> ApiKey | None:
        """The live API key of an unexpired session, or None (no such session, or its key was
        revoked: revoking a key ends its sessions at once)."""
        key = self._backend.api.session_get(digest(token))
        if key is None or key.revoked:
            return None
        return key

    def close(self, token: str) -> None:
        """End a session (logging out)."""
        self._backend.api.session_delete(digest(token))
