"""Counting a database's connections by role while something runs: ``ConnectionSampler``
polls ``pg_stat_activity`` (and, through PgBouncer, its ``SHOW CLIENTS`` and ``SHOW SERVERS``)
on a thread of its own and keeps the most seen at once. Connections named ``HARNESS``
(the test's own looks at the database) are left out.

jobledger names each connection after its role (``application_name`` ``jobledger-<role>``:
see ``jobledger.backends.url.ConnectionBudget``); the sampler's own connection is left out.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg

__all__ = ["HARNESS", "ConnectionSampler", "Sample"]

#: The ``application_name`` of the harness's own connections, which the sampler leaves out.
HARNESS = "harness"


@dataclass
class Sample:
    """Connections to one database seen at once."""

    #: Server sessions (``pg_stat_activity``), by ``application_name``.
    server: Counter[str] = field(default_factory=Counter)
    #: Client connections to PgBouncer for the database (0 without one).
    pooler_clients: int = 0
    #: Of ``server``, the sessions PgBouncer holds.
    pooler_servers: int = 0
    #: Of ``server``, the sessions the processes hold themselves, by ``application_name``
    #: (PgBouncer's sessions carry the name of whichever client used them last).
    own: Counter[str] = field(default_factory=Counter)

    @property
    def server_total(self) -> int:
        return sum(self.server.values())

    @property
    def direct(self) -> int:
        """Server sessions not made by PgBouncer: the processes' own (LISTEN, or all of them
        without a pooler)."""
        return self.server_total - self.pooler_servers

    @property
    def client_total(self) -> int:
        """What the processes hold: their connections to PgBouncer and their direct ones."""
        return self.pooler_clients + self.direct


def _rows(conn: psycopg.Connection[Any], query: str) -> list[dict[str, Any]]:
    cur = conn.execute(query)
    names = [c.name for c in cur.description or ()]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


class ConnectionSampler:
    """Polls the connections to ``dbname`` every ``interval`` seconds while it runs (a context
    manager); ``peak`` is the sample with the most client connections, ``last`` the latest,
    ``role_peaks`` the most of each role the processes held themselves at once.
    ``admin_url`` is a direct URL of the server; ``pgbouncer_admin`` a URL of PgBouncer's
    ``pgbouncer`` database when the processes go through it."""

    def __init__(
        self,
        admin_url: str,
        dbname: str,
        pgbouncer_admin: str | None = None,
        interval: float = 0.01,
        ignore: str = HARNESS,
    ):
        self.admin_url = admin_url
        self.dbname = dbname
        self.pgbouncer_admin = pgbouncer_admin
        self.interval = interval
        self.ignore = ignore
        self.peak = Sample()
        self.last = Sample()
        self.role_peaks: Counter[str] = Counter()
        #: The most server sessions seen at once (PgBouncer's included).
        self.server_peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def sample(self) -> Sample:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            return self._sample(conn, None)

    def _sample(
        self, conn: psycopg.Connection[Any], bouncer: psycopg.Connection[Any] | None
    ) -> Sample:
        now = Sample()
        pids: set[int] = set()
        if bouncer is not None:
            clients = _rows(bouncer, "SHOW CLIENTS")
            now.pooler_clients = sum(1 for c in clients if c.get("database") == self.dbname)
            servers = _rows(bouncer, "SHOW SERVERS")
            pids = {int(s["remote_pid"]) for s in servers if s.get("database") == self.dbname}
        rows = conn.execute(
            "SELECT pid, application_name, state IS NULL FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            " AND application_name <> %s",
            (self.dbname, self.ignore),
        ).fetchall()
        for pid, name, starting in rows:
            now.server[name or "-"] += 1
            # An unnamed session is one PgBouncer is opening (not yet in SHOW SERVERS): the
            # processes name all of theirs.
            if pid in pids or (bouncer is not None and not name):
                now.pooler_servers += 1
            elif name or not starting:
                now.own[name or "-"] += 1
            # else: a session still starting up (no state yet) has no application_name yet:
            # counted in the totals, named by its role once it is ready.
        return now

    def _run(self) -> None:
        try:
            with psycopg.connect(self.admin_url, autocommit=True) as conn:
                bouncer = (
                    psycopg.connect(self.pgbouncer_admin, autocommit=True, prepare_threshold=None)
                    if self.pgbouncer_admin
                    else None
                )
                try:
                    while not self._stop.is_set():
                        now = self._sample(conn, bouncer)
                        self.samples += 1
                        self.last = now
                        self.server_peak = max(self.server_peak, now.server_total)
                        if now.client_total > self.peak.client_total:
                            self.peak = now
                        for role, n in now.own.items():
                            self.role_peaks[role] = max(self.role_peaks[role], n)
                        self._stop.wait(self.interval)
                finally:
                    if bouncer is not None:
                        bouncer.close()
        except BaseException as exc:  # noqa: BLE001 - raised again by stop()
            self._error = exc

    def __enter__(self) -> ConnectionSampler:
        self._thread = threading.Thread(target=self._run, name="connection-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self._error is not None:
            raise self._error

    def __exit__(self, *exc: object) -> None:
        self.stop()
