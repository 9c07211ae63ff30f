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


#: Figures a test measured (the outage test's latencies), printed at the end of the run.
FIGURES: list[str] = []


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    for line in FIGURES:
        terminalreporter.write_line(line)
