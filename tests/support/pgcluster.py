"""A private PostgreSQL server that a test may crash and restart.

The shared server on 5432 is never restarted: tests that need a server restart start their own
with ``initdb`` and ``pg_ctl`` from ``/usr/lib/postgresql/*/bin`` when present, else the binaries
bundled in the ``pgserver`` package. It listens on 127.0.0.1 on a free port, keeps its socket
and data in a temporary directory, and runs with ``fsync=off``: a restart here stands for a
server crash (``pg_ctl stop -m immediate``, then recovery from the WAL), not a power cut.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

__all__ = ["PrivatePostgres", "postgres_binaries"]


def postgres_binaries() -> Path:
    """The directory holding initdb and pg_ctl."""
    installed = (
        sorted(
            Path("/usr/lib/postgresql").glob("*/bin"),
            key=lambda p: int(p.parent.name),
            reverse=True,
        )
        if Path("/usr/lib/postgresql").exists()
        else []
    )
    for path in installed:
        if (path / "initdb").exists() and (path / "pg_ctl").exists():
            return path
    try:
        from pgserver._commands import POSTGRES_BIN_PATH  # type: ignore[import-untyped]
    except ImportError as exc:  # pragma: no cover - pgserver is a dev dependency
        raise RuntimeError("no PostgreSQL binaries: install postgresql or pgserver") from exc
    return Path(POSTGRES_BIN_PATH)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivatePostgres:
    """``initdb`` + ``pg_ctl start`` in a temporary directory; ``restart()`` crashes it and starts
    it again; ``close()`` stops it and deletes everything."""

    def __init__(self) -> None:
        self.bin = postgres_binaries()
        self.port = _free_port()
        self.root = Path(tempfile.mkdtemp(prefix="jobledger-private-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.user: str | None = None
        if os.geteuid() == 0:
            # initdb refuses to run as root: run the server as the "postgres" system user.
            try:
                entry = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError(
                    "running as root and no 'postgres' system user to run as"
                ) from None
            self.user = "postgres"
            os.chmod(self.root, 0o755)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.restarts = 0
        self.start()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, program: str, *args: str) -> None:
        proc = subprocess.run(
            [str(self.bin / program), *args],
            capture_output=True,
            text=True,
            user=self.user,
            timeout=120,
            cwd=self.root,
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"{program} failed ({proc.returncode}): {proc.stderr or proc.stdout}"
            )

    def start(self) -> None:
        options = " ".join(
            [
                f"-p {self.port}",
                "-c listen_addresses=127.0.0.1",
                f"-c unix_socket_directories={self.root}",
                "-c fsync=off",
                "-c full_page_writes=off",
                "-c max_connections=200",
                "-c shared_buffers=64MB",
            ]
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")
        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(
                    f"postgresql://postgres@127.0.0.1:{self.port}/postgres", connect_timeout=2
                ):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def crash(self) -> None:
        """Stop at once, as a crash would: no checkpoint, clients cut off mid-transaction."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def restart(self, down_seconds: float = 0.0) -> float:
        """Crash the server, leave it down ``down_seconds``, start it again; return how long it
        was down (seconds)."""
        began = time.monotonic()
        self.crash()
        time.sleep(down_seconds)
        self.start()
        self.restarts += 1
        return time.monotonic() - began

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.SubprocessError):
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
