"""Fixtures of the chaos test: a private PostgreSQL server it may crash, and the figures of
each run, printed at the end of the session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..support.pgcluster import PrivatePostgres

FIGURES: list[str] = []


@pytest.fixture(scope="session")
def private_pg() -> Iterator[PrivatePostgres]:
    try:
        server = PrivatePostgres()
    except Exception as exc:  # noqa: BLE001 - reported as the skip reason
        pytest.skip(f"cannot start a private PostgreSQL server: {exc}")
    try:
        yield server
    finally:
        server.close()


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    for line in FIGURES:
        terminalreporter.write_line(line)
