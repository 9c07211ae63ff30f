"""A database that goes away and comes back, for the outage tests of each backend.

PostgreSQL: a private server the test owns (see ``pgcluster``), crashed with ``pg_ctl stop -m
immediate`` and started again. SQLite: the file made unreadable — checkpointed (so that no page
is read from the WAL instead), then overwritten with random bytes, which every connection then
fails on — and put back byte for byte.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from .pgcluster import PrivatePostgres
from .processes import wait_until

__all__ = ["PostgresCut", "SqliteCut", "database_cut"]


class PostgresCut:
    """A private PostgreSQL server, crashed and started again."""

    def __init__(self, tmp_path: Path):
        try:
            self.server = PrivatePostgres()
        except Exception as exc:  # noqa: BLE001 - reported as the skip reason
            pytest.skip(f"cannot start a private PostgreSQL server: {exc}")
        self.url = f"{self.server.url}?schema=outage"

    def cut(self) -> None:
        self.server.crash()

    def restore(self) -> None:
        self.server.start()  # returns once the server accepts connections

    def close(self) -> None:
        self.server.close()


class SqliteCut:
    """A SQLite file made unreadable, then put back as it was."""

    def __init__(self, tmp_path: Path):
        self.path = tmp_path / "ledger.db"
        self.url = f"sqlite:///{self.path}"
        self.saved = b""

    def cut(self) -> None:
        # Everything into the file first, so that no page is read from the WAL instead.
        conn = sqlite3.connect(self.path, timeout=30)
        try:
            wait_until(
                lambda: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0,
                what="a full checkpoint",
            )
        finally:
            conn.close()
        self.saved = self.path.read_bytes()
        with open(self.path, "r+b") as f:
            f.write(os.urandom(len(self.saved)))

    def restore(self) -> None:
        with open(self.path, "r+b") as f:
            f.write(self.saved)

    def close(self) -> None:
        pass


@contextmanager
def database_cut(backend: str, tmp_path: Path) -> Iterator[PostgresCut | SqliteCut]:
    """A database of ``backend`` that the test may cut off and restore."""
    cut = PostgresCut(tmp_path) if backend == "postgres" else SqliteCut(tmp_path)
    try:
        yield cut
    finally:
        cut.close()
