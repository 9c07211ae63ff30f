"""Fixtures for the HTTP API tests: a real server (uvicorn, in a thread) on each backend."""

from __future__ import annotations

import pytest

from jobledger.http import ServerSettings

from ..support.http import api_server


@pytest.fixture
def api(ledger):
    """A server on a fresh database of each backend, with an admin key and client."""
    with api_server(ledger, ServerSettings(rescue_interval=0.2, poll_interval=0.1)) as server:
        yield server
