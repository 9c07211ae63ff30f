"""A PgBouncer of the test's own, in transaction mode, in front of the test server.

Debian's ``pgbouncer`` package (1.18: before PgBouncer supported prepared statements) — what
``.ci/run`` installs when missing. Each instance listens on a free port of 127.0.0.1 with a
pool of ``pool_size`` server connections per database and user, so that many client
connections share few server sessions: whatever a client leaves on a session (a prepared
statement, a session lock, a LISTEN) reaches the next client of that session, which is what
the tests must show jobledger never relies on.

Without the binary the tests that need it skip, unless ``JOBLEDGER_REQUIRE_PGBOUNCER=1`` (CI),
which makes them fail.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

__all__ = ["PgBouncer", "pgbouncer_binary"]


def pgbouncer_binary() -> str:
    """The pgbouncer executable, or skip (fail under ``JOBLEDGER_REQUIRE_PGBOUNCER=1``)."""
    found = shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer") if os.path.exists(p)),
        None,
    )
    if found:
        return found
    why = "pgbouncer is not installed (Debian: apt install pgbouncer; .ci/run installs it)"
    if os.environ.get("JOBLEDGER_REQUIRE_PGBOUNCER"):
        pytest.fail(f"{why}, and JOBLEDGER_REQUIRE_PGBOUNCER is set")
    pytest.skip(why)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgBouncer:
    """``pool_mode = transaction`` in front of ``server_url``'s server; ``url(dbname)`` is a
    URL through it. Stop with ``stop()`` (or use as a context manager)."""

    def __init__(
        self, server_url: str, directory: Path, pool_size: int = 2, listen: str = "127.0.0.1"
    ):
        binary = pgbouncer_binary()
        server = conninfo_to_dict(server_url)
        self.user = str(server.get("user") or "postgres")
        self.listen = listen
        self.port = _free_port()
        if os.geteuid() == 0:
            # PgBouncer refuses to run as root: it runs as nobody, who must reach its files
            # (a test's tmp_path is private to root).
            directory = Path(tempfile.mkdtemp(prefix="jobledger-pgbouncer-"))
            self._own_directory = True
        else:
            directory.mkdir(parents=True, exist_ok=True)
            self._own_directory = False
        self.directory = directory
        target = f"host={server.get('host') or '127.0.0.1'} port={server.get('port') or 5432}"
        (directory / "users.txt").write_text(f'"{self.user}" ""\n')
        self.log = directory / "pgbouncer.log"
        (directory / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = {target} user={self.user}\n"
            "[pgbouncer]\n"
            f"listen_addr = {listen}\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {directory / 'users.txt'}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\n"
            "max_client_conn = 1000\n"
            f"logfile = {self.log}\n"
            f"admin_users = {self.user}\n"
        )
        command = [binary, str(directory / "pgbouncer.ini")]
        self._command = command
        if os.geteuid() == 0:
            command[1:1] = ["-u", "nobody"]
            os.chmod(directory, 0o755)
            for path in directory.iterdir():
                os.chmod(path, 0o666)
            shutil.chown(directory, "nobody")
        self._server_url = server_url
        self._start()

    def _start(self) -> None:
        # Its log goes to stderr too, a line per login: to a file, for a pipe nobody reads
        # fills up and then PgBouncer stops answering.
        with (self.directory / "stderr.log").open("a") as err:
            self._process = subprocess.Popen(self._command, stdout=subprocess.DEVNULL, stderr=err)
        self._wait_ready()

    def _wait_ready(self, seconds: float = 30.0) -> None:
        deadline = time.monotonic() + seconds
        while True:
            if self._process.poll() is not None:
                err = (self.directory / "stderr.log").read_text(errors="replace")
                log = self.log.read_text() if self.log.exists() else ""
                raise RuntimeError(f"pgbouncer exited {self._process.returncode}: {err}{log}")
            try:
                with socket.create_connection((self.listen, self.port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("pgbouncer did not listen within 30 s") from None
                time.sleep(0.05)

    def url(self, server_url: str | None = None) -> str:
        """``server_url`` (default: the one given) with its host and port PgBouncer's."""
        parts = urlsplit(server_url or self._server_url)
        netloc = f"{self.user}@{self.listen}:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def server_sessions(self, dbname: str) -> int:
        """How many server connections PgBouncer holds to ``dbname`` (from SHOW POOLS)."""
        with psycopg.connect(self.admin_url, autocommit=True, prepare_threshold=None) as conn:
            cur = conn.execute("SHOW POOLS")
            names = [c.name for c in cur.description or ()]
            rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
        return sum(
            int(r.get("sv_active", 0)) + int(r.get("sv_idle", 0)) + int(r.get("sv_used", 0))
            for r in rows
            if r.get("database") == dbname
        )

    @property
    def admin_url(self) -> str:
        """PgBouncer's own ``pgbouncer`` database (SHOW POOLS, SHOW CLIENTS, ...)."""
        return f"postgresql://{self.user}@{self.listen}:{self.port}/pgbouncer"

    def restart(self) -> None:
        """Stop PgBouncer (every client and server connection through it breaks), then start
        it again on the same port."""
        self._halt()
        self._start()

    def _halt(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def stop(self) -> None:
        self._halt()
        if self._own_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> PgBouncer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
