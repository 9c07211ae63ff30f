"""Database URLs: parsing, validation, and the redacted form shown in every message."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import ConfigError

__all__ = [
    "ConnectionBudget",
    "DEFAULT_URL",
    "REQUIRE_URL_ENV",
    "DatabaseURL",
    "default_url_refused",
    "redact",
]

DEFAULT_URL = "sqlite:///jobledger.db"
"""The database of ``Ledger()`` without a URL and without ``JOBLEDGER_URL``: for the tour."""

REQUIRE_URL_ENV = "JOBLEDGER_REQUIRE_URL"
"""Set to 1 (true, yes, on), a deployment refuses ``DEFAULT_URL``: a URL must be given."""

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def default_url_refused(environ: Mapping[str, str] = os.environ) -> ConfigError | None:
    """The error to raise when no URL was given and ``JOBLEDGER_REQUIRE_URL`` forbids the
    default; None when the default may be used. A value that is not a yes or a no is an error
    too, so that a typo does not silently allow the default."""
    value = environ.get(REQUIRE_URL_ENV, "").strip().lower()
    if value in _FALSE:
        return None
    if value not in _TRUE:
        return ConfigError(
            f"{REQUIRE_URL_ENV} must be 1 or 0 (true/false, yes/no, on/off), "
            f"got {environ[REQUIRE_URL_ENV]!r}"
        )
    return ConfigError(
        f"no database URL given and {REQUIRE_URL_ENV} is set, so the default {DEFAULT_URL} is "
        "not used: pass Ledger(url), set JOBLEDGER_URL, or give the command --url"
    )


_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,47}$")

# Query parameters jobledger reads itself; all others are passed to the driver.
_OWN_PARAMS = {"schema", "pool_size", "pooler", "busy_timeout", "synchronous"}
_POOLERS = ("session", "transaction")


def redact(url: str) -> str:
    """The URL with any password replaced by ``***``, safe to print and log."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if parts.password is None:
        return url
    netloc = parts.netloc
    userinfo, _, hostinfo = netloc.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{hostinfo}"))


@dataclass(frozen=True)
class ConnectionBudget:
    """The connections one process opens to PostgreSQL for one ledger, all within
    ``pool_size`` (``total``). Each role's connections say it in ``application_name``
    (``jobledger-<role>``, unless the URL names the application), so that
    ``pg_stat_activity`` can count them:

    - ``jobledger-probe``: one at a time, short-lived — the check that the URL answers when the
      ledger opens, the outage probe while the database seems down, a migration;
    - ``jobledger-listen``: one LISTEN session for wake-ups per listener (a worker has one; it is
      opened only when the URL listens: not through ``pooler=transaction`` without a
      ``listen_url``);
    - ``jobledger-results``: one LISTEN session while the process waits on results
      (``ledger.result``);
    - ``jobledger-pool`` and ``jobledger-quick``: the two pools of statements, which share the
      rest of the budget (at least one connection each): ``quick`` for single idempotent
      statements (claims, renewals, enqueues), ``pool`` for transactions and outcomes. A
      transaction that needs a single statement on the side (a leader's renewal inside a fenced
      write) takes it from the other pool, so it never waits on its own pool;
    - ``jobledger-async``: an ``AsyncLedger``'s own connections, on its event loop, as many as
      the pool (only in a process that uses one).
    """

    total: int
    listens: bool

    #: The probe's connection (one at a time).
    PROBES = 1

    @property
    def listen_sessions(self) -> int:
        """The LISTEN sessions a worker process holds: wake-ups and results."""
        return 2 if self.listens else 0

    @property
    def statements(self) -> int:
        """The two pools' sizes together: what the probe and the LISTEN sessions leave, at
        least two."""
        return max(2, self.total - self.PROBES - self.listen_sessions)

    @property
    def quick(self) -> int:
        """The quick pool's size: half of ``statements``, rounded down."""
        return self.statements // 2

    @property
    def pool(self) -> int:
        """The main pool's size: the rest of ``statements``."""
        return self.statements - self.quick

    @property
    def bound(self) -> int:
        """The most connections a process holds at once without an ``AsyncLedger``: ``total``,
        or more only when ``total`` is too small to leave each pool one."""
        return self.statements + self.PROBES + self.listen_sessions


@dataclass(frozen=True)
class DatabaseURL:
    """A parsed ``sqlite:///path`` or ``postgresql://…`` URL.

    Options jobledger reads from the query string:

    - ``schema`` (PostgreSQL): where the jobledger tables live, default ``public``;
    - ``pool_size`` (PostgreSQL): the most connections one process opens to the database for
      a ledger, every role counted (``connection_budget``), default 10;
    - ``pooler`` (PostgreSQL): ``transaction`` when the URL points at a pooler in transaction
      mode (PgBouncer ``pool_mode = transaction``, and the like): nothing then relies on a
      server session outliving a transaction — no server-side prepared statement, and LISTEN
      only on a direct ``listen_url`` (else idle workers poll); ``session`` (the default) is a
      direct connection or a pooler in session mode. See docs/deployment.md.

    ``listen_url`` (given beside the URL: ``Ledger(url, listen_url=…)``,
    ``JOBLEDGER_LISTEN_URL``, ``--listen-url``) is where LISTEN sessions connect instead of
    the URL itself: a direct connection to the same database when the URL goes through a pooler.
    - ``busy_timeout`` (SQLite): milliseconds to wait for the write lock, default 5000;
    - ``synchronous`` (SQLite): ``full`` (default, durable on power loss) or ``normal``.
    """

    raw: str
    dialect: str
    path: str = ""
    options: dict[str, str] = field(default_factory=dict)
    driver_query: dict[str, str] = field(default_factory=dict)
    listen_url: str = ""
    """Where LISTEN sessions connect (PostgreSQL), when not to this URL: see ``listening_at``."""

    @classmethod
    def parse(cls, url: str) -> DatabaseURL:
        if not isinstance(url, str) or not url.strip():
            raise ConfigError("database URL is empty; expected sqlite:///path or postgresql://…")
        url = url.strip()
        try:
            parts = urlsplit(url)
        except ValueError as exc:
            raise ConfigError(f"database URL {redact(url)!r} cannot be parsed: {exc}") from None
        scheme = parts.scheme.lower()
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        options = {k: v for k, v in query.items() if k in _OWN_PARAMS}
        driver_query = {k: v for k, v in query.items() if k not in _OWN_PARAMS}
        if scheme == "sqlite":
            return cls._parse_sqlite(url, parts.netloc, parts.path, options)
        if scheme in ("postgresql", "postgres"):
            return cls._parse_postgres(url, options, driver_query)
        raise ConfigError(
            f"database URL {redact(url)!r} has unsupported scheme {parts.scheme!r}; "
            "expected sqlite:///path or postgresql://…"
        )

    @classmethod
    def _parse_sqlite(
        cls, url: str, netloc: str, path: str, options: dict[str, str]
    ) -> DatabaseURL:
        if netloc:
            raise ConfigError(
                f"SQLite URL {url!r} has a host part; write sqlite:///relative.db "
                "or sqlite:////absolute/path.db"
            )
        # sqlite:///jobs.db -> path "/jobs.db" -> relative "jobs.db";
        # sqlite:////var/lib/jobs.db -> "//var/lib/jobs.db" -> absolute "/var/lib/jobs.db".
        file_path = path[1:] if path.startswith("/") else path
        if not file_path:
            raise ConfigError(f"SQLite URL {url!r} names no file; write sqlite:///jobs.db")
        if file_path == ":memory:" or file_path.startswith("file:"):
            raise ConfigError(
                "an in-memory SQLite database cannot be shared by workers; name a file, "
                "e.g. sqlite:///jobs.db"
            )
        for name, value in options.items():
            if name == "busy_timeout" and not value.isdigit():
                raise ConfigError(f"busy_timeout must be milliseconds, got {value!r}")
            if name == "synchronous" and value.lower() not in ("full", "normal"):
                raise ConfigError(f"synchronous must be full or normal, got {value!r}")
            if name in ("schema", "pool_size", "pooler"):
                raise ConfigError(f"option {name!r} applies to PostgreSQL URLs only")
        return cls(raw=url, dialect="sqlite", path=file_path, options=options)

    @classmethod
    def _parse_postgres(
        cls, url: str, options: dict[str, str], driver_query: dict[str, str]
    ) -> DatabaseURL:
        schema = options.get("schema", "public")
        if not _IDENTIFIER.match(schema):
            raise ConfigError(
                f"schema {schema!r} must be a lower-case identifier (letters, digits, _)"
            )
        pool_size = options.get("pool_size", "10")
        if not pool_size.isdigit() or not 1 <= int(pool_size) <= 1000:
            raise ConfigError(f"pool_size must be a whole number from 1 to 1000, got {pool_size!r}")
        pooler = options.get("pooler", "session")
        if pooler not in _POOLERS:
            raise ConfigError(
                f"pooler must be session (a direct connection, or a pooler in session mode) or "
                f"transaction (a pooler in transaction mode, e.g. PgBouncer), got {pooler!r}"
            )
        return cls(raw=url, dialect="postgres", options=options, driver_query=driver_query)

    def listening_at(self, listen_url: str | None) -> DatabaseURL:
        """This URL with LISTEN sessions connecting to ``listen_url`` (a direct PostgreSQL URL
        of the same database); unchanged when it is None or empty."""
        if not listen_url:
            return self
        listen = DatabaseURL.parse(listen_url)
        if self.dialect != "postgres" or listen.dialect != "postgres":
            raise ConfigError(
                f"a listen URL ({listen.redacted}) is for a PostgreSQL ledger: LISTEN/NOTIFY is "
                "PostgreSQL's; SQLite workers poll"
            )
        if listen.pooled_transactions:
            raise ConfigError(
                f"the listen URL {listen.redacted} says pooler=transaction: LISTEN needs a "
                "session of its own, so give a direct URL (not through the pooler)"
            )
        return replace(self, listen_url=listen.raw)

    # -- views -------------------------------------------------------------------------------

    @property
    def redacted(self) -> str:
        return redact(self.raw)

    @property
    def schema(self) -> str:
        return self.options.get("schema", "public")

    @property
    def pool_size(self) -> int:
        return int(self.options.get("pool_size", "10"))

    @property
    def connection_budget(self) -> ConnectionBudget:
        """How ``pool_size`` is shared among a process's connections (PostgreSQL)."""
        return ConnectionBudget(self.pool_size, listens=self.listen_conninfo is not None)

    @property
    def names_application(self) -> bool:
        """True when the URL (or ``PGAPPNAME``) gives the connections an ``application_name``;
        else jobledger names each connection after its role (``ConnectionBudget``)."""
        return "application_name" in self.driver_query or bool(os.environ.get("PGAPPNAME"))

    def role(self, role: str) -> dict[str, str]:
        """Connection keywords for a connection of ``role``: its ``application_name``
        (``jobledger-<role>``) unless the URL names the application itself."""
        return {} if self.names_application else {"application_name": f"jobledger-{role}"}

    @property
    def pooled_transactions(self) -> bool:
        """True when the URL goes through a pooler in transaction mode (``pooler=transaction``)."""
        return self.options.get("pooler") == "transaction"

    @property
    def listen_conninfo(self) -> str | None:
        """Where a LISTEN session connects: the listen URL, else this URL unless it goes
        through a pooler in transaction mode (a notification cannot reliably reach a session
        the pooler shares); None when there is nowhere to listen."""
        if self.listen_url:
            return DatabaseURL.parse(self.listen_url).conninfo
        return None if self.pooled_transactions else self.conninfo

    @property
    def busy_timeout_ms(self) -> int:
        return int(self.options.get("busy_timeout", "5000"))

    @property
    def synchronous(self) -> str:
        return self.options.get("synchronous", "full").upper()

    @property
    def sqlite_path(self) -> Path:
        return Path(self.path)

    @property
    def conninfo(self) -> str:
        """The URL to hand to libpq: jobledger's own options removed."""
        parts = urlsplit(self.raw)
        query = urlencode(self.driver_query)
        # Written out rather than by urlunsplit, which drops an empty host ("postgresql:///db",
        # a Unix socket given as ?host=/path) and leaves a URL libpq does not read.
        return f"postgresql://{parts.netloc}{parts.path}" + (f"?{query}" if query else "")

    def __str__(self) -> str:
        return self.redacted

    def __repr__(self) -> str:
        # A repr reaches logs and tracebacks too: the passwords are hidden as in the text.
        listen = f", listen_url={redact(self.listen_url)!r}" if self.listen_url else ""
        return f"DatabaseURL({self.redacted!r}{listen})"
