"""Fixtures for the fault tests: private PostgreSQL servers, namespaced hosts, worker processes.

These tests need root (network namespaces, nftables) and PostgreSQL binaries. Elsewhere they
skip and say why; with ``JOBLEDGER_REQUIRE_FAULTS=1`` (set by CI) a missing prerequisite fails
the run instead, so CI cannot pass without running them.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from jobledger.testing.fakeprovider import FakeProvider
from jobledger.testing.history import HistoryRecorder

from ..support import netns, pgcluster
from ..support.history import history_dir
from ..support.processes import ROOT, terminate
from ..support.waiting import Patience

APP = "tests.apps.fault_app:ledger"


def require(reason: str | None) -> None:
    if reason is None:
        return
    if os.environ.get("JOBLEDGER_REQUIRE_FAULTS") == "1":
        pytest.fail(f"fault test cannot run but JOBLEDGER_REQUIRE_FAULTS=1: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def pg_base() -> Iterator[Path]:
    """A directory the ``postgres`` user may write, for private servers' data."""
    require(pgcluster.unavailable())
    base = Path(tempfile.mkdtemp(prefix="jobledger-faults-pg-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


@contextlib.contextmanager
def served(
    base: Path, network: netns.Network, name: str, settings: dict[str, str] | None = None
) -> Iterator[pgcluster.PgInstance]:
    """A private PostgreSQL listening on loopback (the harness) and the hosts' server address;
    stopped at once at the end."""
    pg = pgcluster.PgInstance(base, name, listen=["127.0.0.1", network.server_address])
    pg.initdb(settings)
    pg.start()
    try:
        yield pg
    finally:
        pg.stop("immediate")


@pytest.fixture
def history(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    return history_dir(request, tmp_path)


@pytest.fixture
def provider(network, history) -> Iterator[FakeProvider]:
    """The fake e-mail provider on the hosts' server address (``network``: this module's)."""
    with (
        HistoryRecorder(history, host="provider") as recorder,
        FakeProvider(host=network.server_address, history=recorder) as p,
    ):
        yield p


@pytest.fixture
def harness(history: Path) -> Iterator[HistoryRecorder]:
    with HistoryRecorder(history, host="harness") as recorder:
        yield recorder


class WorkerProcess:
    """A ``jobledger worker`` process whose output goes to a log file."""

    def __init__(self, name: str, argv: Sequence[str], env: dict[str, str], log: Path):
        self.name = name
        self.log_path = log
        self._log = log.open("w")
        self.proc = subprocess.Popen(
            list(argv), cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (once it handles it), then wait; SIGKILL if it outlives ``timeout`` machine
        seconds. Returns the exit code."""
        terminate(self.proc, timeout)
        patience = Patience(timeout)
        while self.proc.poll() is None and not patience.expired():
            time.sleep(0.05)
        if self.proc.poll() is None:
            self.proc.kill()
        code = self.proc.wait()
        self._log.close()
        return code

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait()
        self._log.close()


@pytest.fixture
def start_worker(history: Path, tmp_path: Path) -> Iterator:
    """``start_worker(name, url, env, wrap=None, *options)`` → a WorkerProcess, killed at the end
    of the test if it is still running. ``wrap`` turns the command into one run on a host."""
    started: list[WorkerProcess] = []

    def start(
        name: str,
        url: str,
        env: dict[str, str],
        *options: str,
        wrap=None,
    ) -> WorkerProcess:
        argv = [
            sys.executable, "-m", "jobledger", "worker", APP,
            "--name", f"{name}:{len(started)}",
            "--history", str(history),
            "--poll-interval", "0.1",
            "--rescue-interval", "0.2",
            "--grace", "10",
            *options,
        ]  # fmt: skip
        full_env = dict(os.environ)
        full_env.pop("JOBLEDGER_FAULTS", None)
        full_env.update(env)
        full_env["JOBLEDGER_URL"] = url
        full_env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(ROOT), full_env.get("PYTHONPATH")])
        )
        worker = WorkerProcess(
            name, wrap(argv) if wrap else argv, full_env, tmp_path / f"{name}-{len(started)}.log"
        )
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.proc.poll() is None:
            worker.kill()


@pytest.fixture(scope="module")
def network() -> Iterator[netns.Network]:
    require(netns.unavailable())
    with netns.Network(["h1", "h2", "h3"]) as net:
        yield net
