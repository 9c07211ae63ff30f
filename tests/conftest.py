"""Fixtures shared by the whole suite.

``db_url`` runs a test once per backend: SQLite (a file in the test's temporary directory) and
PostgreSQL (a schema of its own, dropped afterwards). With ``JOBLEDGER_REQUIRE_POSTGRES=1`` (set
by CI) a skipped PostgreSQL case fails the run instead of passing unnoticed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest

from jobledger import Ledger

from .support.postgres import PostgresServer

BACKENDS = ["sqlite", "postgres"]

_server: PostgresServer | None = None
_server_error: str | None = None


def postgres_server() -> PostgresServer:
    global _server, _server_error
    if _server is None and _server_error is None:
        try:
            _server = PostgresServer()
        except Exception as exc:  # noqa: BLE001 - reported as the skip reason
            _server_error = f"no PostgreSQL server for the tests: {exc}"
    if _server is None:
        pytest.skip(_server_error or "no PostgreSQL server")
    return _server


SLOW_TIMEOUT = 1200
"""pytest-timeout's guard for a test marked ``slow``, in wall-clock seconds (300 for the others,
in pyproject.toml). Slow tests drive real processes and wait for them with stall windows that
stretch on a busy machine (tests/support/waiting.py): a stuck run fails one window after it
stopped moving. This guard only catches a hang outside any wait, and must not cut short a run
that is merely slow: on a machine five times slower than idle, a 60 s test takes five minutes."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))


#: Where each test process's PostgreSQL came from (``make test`` runs several: pytest-xdist).
_sources: set[str] = set()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _server is not None:
        _server.close()
        _sources.add(_server.source)
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:  # a test process of pytest-xdist: tell the controller
            workeroutput["postgres_source"] = _server.source


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist's controller: a test process ended; note where its PostgreSQL came from."""
    source = getattr(node, "workeroutput", {}).get("postgres_source")
    if source:
        _sources.add(source)


def _drop_closed_log_streams() -> None:
    root = logging.getLogger()
    for handler in root.handlers[:]:
        if getattr(getattr(handler, "stream", None), "closed", False):
            root.removeHandler(handler)


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """A CLI command run in-process (click's runner) sets up logging as the real one does: the
    root logger's level, and one handler on the stderr of the moment — the runner's capture,
    closed when the command ends. Later tests' threads logging there printed "Logging error"
    tracebacks into whatever failed next. Put the level back and drop handlers whose streams
    are closed."""
    _drop_closed_log_streams()
    level = logging.getLogger().level
    yield
    logging.getLogger().setLevel(level)
    _drop_closed_log_streams()


@pytest.fixture(scope="session")
def pg() -> PostgresServer:
    return postgres_server()


@pytest.fixture(params=BACKENDS)
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(backend_name: str, tmp_path: os.PathLike[str]) -> Iterator[str]:
    """A fresh, empty database URL for one test, on each backend in turn."""
    if backend_name == "sqlite":
        yield f"sqlite:///{tmp_path}/ledger.db"
        return
    server = postgres_server()
    schema, url = server.new_schema_url()
    try:
        yield url
    finally:
        server.drop_schema(schema)


@pytest.fixture
def ledger(db_url: str) -> Iterator[Ledger]:
    """A migrated ledger on a fresh database."""
    led = Ledger(db_url)
    led.migrate()
    try:
        yield led
    finally:
        led.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if (
        report.skipped
        and os.environ.get("JOBLEDGER_REQUIRE_POSTGRES") == "1"
        and _backend_of(item.nodeid) == "postgres"
    ):
        report.outcome = "failed"
        report.longrepr = (
            f"PostgreSQL case skipped but JOBLEDGER_REQUIRE_POSTGRES=1: {report.longrepr}"
        )


def _backend_of(nodeid: str) -> str:
    """The backend a case runs on, by its id: its parameter (``[sqlite]``, ``[postgres-…]``)
    first, else its file's or its own name; "neutral" when none says."""
    if "[sqlite" in nodeid:
        return "sqlite"
    if "[postgres" in nodeid or "postgres" in nodeid:
        return "postgres"
    return "sqlite" if "sqlite" in nodeid else "neutral"


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # type: ignore[no-untyped-def]
    """Say how many cases ran on each backend, so a run that quietly lost one shows it."""
    counts: dict[str, dict[str, int]] = {}
    for outcome in ("passed", "failed", "skipped", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            if getattr(report, "when", "call") not in ("call", "setup") or (
                outcome == "passed" and report.when != "call"
            ):
                continue
            backend = _backend_of(report.nodeid)
            counts.setdefault(backend, {}).setdefault(outcome, 0)
            counts[backend][outcome] += 1
    source = ", ".join(sorted(_sources)) or "none"
    line = "; ".join(
        f"{backend}: " + ", ".join(f"{n} {outcome}" for outcome, n in sorted(by.items()))
        for backend, by in sorted(counts.items())
    )
    terminalreporter.write_line(f"jobledger cases by backend — {line} (PostgreSQL from {source})")
