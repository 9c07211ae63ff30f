"""Private PostgreSQL servers that a test may crash, restart, cut off, kill and promote.

The shared server on 5432 is never restarted: tests that need a server restart start their own
with ``initdb`` and ``pg_ctl`` from ``/usr/lib/postgresql/*/bin`` when present, else the binaries
bundled in the ``pgserver`` package. It listens on 127.0.0.1 on a free port, keeps its socket
and data in a temporary directory, and runs with ``fsync=off``: a restart here stands for a
server crash (``pg_ctl stop -m immediate``, then recovery from the WAL), not a power cut.

``PrivatePostgres`` is one server to crash and restart; ``PgInstance`` is a server of a
primary/replica pair (``standby_of``, ``kill``, ``promote``), listening where a test says (the
fault tests add the address their namespaced hosts reach).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg

from .waiting import Patience, run

__all__ = ["PgInstance", "PrivatePostgres", "postgres_binaries", "unavailable"]


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
        proc = run(
            [str(self.bin / program), *args],
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
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-o",
            options,
            "-w",
            "-t",
            "600",
            "start",
        )
        patience = Patience(30)
        while True:
            try:
                with psycopg.connect(
                    f"postgresql://postgres@127.0.0.1:{self.port}/postgres", connect_timeout=2
                ):
                    return
            except psycopg.OperationalError:
                if patience.expired():
                    raise
                time.sleep(0.1)

    def crash(self) -> None:
        """Stop at once, as a crash would: no checkpoint, clients cut off mid-transaction."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "600", "stop")

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
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "600", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


def _run_as() -> pwd.struct_passwd | None:
    """The user to run servers as: ourselves, or ``postgres`` when we are root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        return None


def _bindir() -> Path | None:
    try:
        path = postgres_binaries()
    except RuntimeError:
        return None
    return path if (path / "pg_basebackup").exists() else None


def unavailable() -> str | None:
    """Why primary/replica pairs cannot be started here, or None when they can."""
    if _bindir() is None:
        return "no PostgreSQL binaries (initdb, pg_ctl, pg_basebackup) found"
    if os.geteuid() == 0 and _run_as() is None:
        return "running as root and there is no 'postgres' user to run a server as"
    return None


class PgInstance:
    """One PostgreSQL server: a data directory, a port, a set of listen addresses."""

    def __init__(self, base: Path, name: str, listen: Sequence[str] = ("127.0.0.1",)):
        bindir = _bindir()
        if bindir is None:
            raise RuntimeError(unavailable())
        self.bin = bindir
        self.name = name
        self.base = base
        self.datadir = base / name
        self.logfile = base / f"{name}.log"
        self.port = _free_port()
        self.listen = list(listen)
        self._user = _run_as()

    # -- running the server's programs ------------------------------------------------------------

    def _tool(self, tool: str, *args: str, timeout: float = 120) -> str:
        kwargs = {}
        if self._user is not None:
            kwargs = {"user": self._user.pw_uid, "group": self._user.pw_gid}
        proc = run(
            [str(self.bin / tool), *args],
            text=True,
            timeout=timeout,
            cwd=self.base,
            env={**os.environ, "PGTZ": "UTC", "LC_ALL": "C"},
            **kwargs,
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"{tool} {' '.join(args)} failed ({proc.returncode}): "
                f"{proc.stderr.strip() or proc.stdout.strip()}\n{self.log_tail()}"
            )
        return proc.stdout

    def _own(self, path: Path) -> None:
        if self._user is not None:
            os.chown(path, self._user.pw_uid, self._user.pw_gid)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.logfile.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    # -- lifecycle --------------------------------------------------------------------------------

    def initdb(self, settings: dict[str, str] | None = None) -> PgInstance:
        self.base.mkdir(parents=True, exist_ok=True)
        self._own(self.base)
        self._tool(
            "initdb", "-D", str(self.datadir), "-U", "postgres", "--auth=trust", "--no-sync",
            "-E", "UTF8", "--locale=C",
        )  # fmt: skip
        self.configure(
            {
                "wal_level": "replica",
                "max_wal_senders": "5",
                "wal_keep_size": "64MB",
                "hot_standby": "on",
                "fsync": "off",
                "shared_buffers": "16MB",
                "max_connections": "60",
                **(settings or {}),
            }
        )
        return self

    def configure(self, settings: dict[str, str]) -> None:
        """Append settings to postgresql.conf (the last value of a name wins)."""
        conf = self.datadir / "postgresql.conf"
        with conf.open("a") as f:
            for name, value in settings.items():
                f.write(f"{name} = '{value}'\n")
        hba = self.datadir / "pg_hba.conf"
        lines = hba.read_text()
        if "jobledger-tests" not in lines:
            # Hosts in network namespaces connect from private addresses.
            hba.write_text(
                lines + "# jobledger-tests\nhost all all 10.0.0.0/8 trust\n"
                "host replication all 10.0.0.0/8 trust\n"
            )

    def start(self) -> None:
        self._tool(
            "pg_ctl", "-D", str(self.datadir), "-l", str(self.logfile), "-w", "-t", "600",
            "-o", f"-p {self.port} -c listen_addresses='{','.join(self.listen)}' "
            f"-c unix_socket_directories='{self.base}'",
            "start",
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self._tool("pg_ctl", "-D", str(self.datadir), "-m", mode, "-w", "-t", "600", "stop")

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.datadir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill(self) -> None:
        """SIGKILL the postmaster and every server process: a crash, not a shutdown."""
        pid = self.postmaster_pid()
        if pid is None:
            return
        children = subprocess.run(
            ["pgrep", "-P", str(pid)], capture_output=True, text=True
        ).stdout.split()
        for p in [pid, *map(int, children)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        patience = Patience(30)
        while self.accepts() and not patience.expired():
            time.sleep(0.05)

    def promote(self) -> None:
        self._tool("pg_ctl", "-D", str(self.datadir), "-w", "-t", "600", "promote")

    def standby_of(self, primary: PgInstance, application_name: str) -> PgInstance:
        """Make this a streaming replica of ``primary`` (from a base backup), not yet started."""
        self.base.mkdir(parents=True, exist_ok=True)
        self._own(self.base)
        self._tool(
            "pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
            "-D", str(self.datadir), "-X", "stream", "--no-sync", "-c", "fast",
        )  # fmt: skip
        self.configure(
            {
                "primary_conninfo": f"host=127.0.0.1 port={primary.port} user=postgres "
                f"application_name={application_name}",
                "wal_receiver_status_interval": "1s",
                # Once promoted it has no standby of its own: waiting for one would stop every
                # commit. (Replicating again means naming the new standby here.)
                "synchronous_standby_names": "",
            }
        )
        signal_file = self.datadir / "standby.signal"
        signal_file.touch()
        self._own(signal_file)
        return self

    # -- connecting -------------------------------------------------------------------------------

    def url(self, host: str = "127.0.0.1", dbname: str = "postgres") -> str:
        return f"postgresql://postgres@{host}:{self.port}/{dbname}"

    def accepts(self) -> bool:
        try:
            with psycopg.connect(self.url(), connect_timeout=2):
                return True
        except psycopg.Error:
            return False

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
        with psycopg.connect(self.url(), autocommit=True, connect_timeout=5) as conn:
            cur = conn.execute(sql.encode(), params)
            return cur.fetchall() if cur.description else []

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.datadir, ignore_errors=True)
