"""A database that is missing, locked or gone gives a clear error naming the URL, password hidden."""

from __future__ import annotations

import sqlite3

import pytest

from jobledger import BackendUnavailable, ConfigError, Ledger
from jobledger.backends import DatabaseURL, redact


def test_sqlite_directory_missing(tmp_path):
    with pytest.raises(BackendUnavailable, match=r"sqlite:///.*/nowhere/jobs.db.*does not exist"):
        Ledger(f"sqlite:///{tmp_path}/nowhere/jobs.db").jobs()


def test_sqlite_locked(tmp_path):
    path = tmp_path / "jobs.db"
    Ledger(f"sqlite:///{path}").migrate()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        ledger = Ledger(f"sqlite:///{path}?busy_timeout=100")
        with pytest.raises(BackendUnavailable, match=r"is locked .*waited 100 ms"):
            ledger.enqueue("t", {}, key="k")
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_postgres_unreachable_hides_the_password():
    url = "postgresql://app:s3cret-pass@127.0.0.1:1/jobs"
    with pytest.raises(BackendUnavailable) as err:
        Ledger(url).jobs()
    message = str(err.value)
    assert "postgresql://app:***@127.0.0.1:1/jobs" in message and "s3cret" not in message


def test_postgres_wrong_credentials(pg):
    url = pg.url.replace("postgresql://postgres", "postgresql://nobody_here:wrong")
    with pytest.raises(BackendUnavailable) as err:
        Ledger(url).jobs()
    assert "wrong" not in str(err.value) and "nobody_here:***@" in str(err.value)


def test_postgres_database_missing(pg):
    url = pg.url.rsplit("/", 1)[0] + "/no_such_database_here"
    with pytest.raises(BackendUnavailable, match="no_such_database_here"):
        Ledger(url).jobs()


def test_postgres_connections_cut_mid_use(pg):
    import psycopg

    schema, url = pg.new_schema_url()
    ledger = Ledger(url)
    ledger.task(lambda ctx: None, name="t")
    ledger.enqueue("t", {}, key="before")
    with psycopg.connect(pg.url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (pg.dbname,),
        )
    # Pooled connections were cut; the pool checks them and connects anew.
    assert ledger.enqueue("t", {}, key="after").created
    ledger.close()
    pg.drop_schema(schema)


def test_a_closed_backend_says_it_is_closed_not_that_the_database_is_unavailable(ledger):
    """A use of a backend after the ledger closed it (a thread still holding it) is the
    caller's mistake: the error says so, rather than sending an operator to look at a database
    that is fine. (The ledger itself opens a new backend on its next use.)"""
    ledger.task(lambda ctx: None, name="t")
    ledger.enqueue("t", {}, key="before")
    backend = ledger.backend
    ledger.close()
    uses = (
        lambda: backend.jobs.claim(["default"], "w", 1),
        lambda: backend.history.find_key("before"),
    )
    for use in uses:
        with pytest.raises(BackendUnavailable, match="is closed") as err:
            use()
        assert "unavailable" not in str(err.value)


@pytest.mark.parametrize(
    "url, message",
    [
        ("", "empty"),
        ("mysql://x/y", "unsupported scheme"),
        ("sqlite://host/x.db", "host part"),
        ("sqlite:///:memory:", "in-memory"),
        ("postgresql://h/db?schema=Bad-Name", "schema"),
        ("postgresql://h/db?pool_size=0", "pool_size"),
        ("sqlite:///x.db?synchronous=sometimes", "synchronous"),
        ("postgresql://h/db?pooler=statement", "pooler must be session .* or transaction"),
        ("sqlite:///x.db?pooler=transaction", "PostgreSQL URLs only"),
        ("sqlite://", "names no file; write sqlite:///jobs.db"),
        ("sqlite:///", "names no file"),
        ("sqlite:///x.db?busy_timeout=5s", "busy_timeout must be milliseconds, got '5s'"),
        ("sqlite:///x.db?busy_timeout=-1", "busy_timeout must be milliseconds"),
    ],
)
def test_bad_urls(url, message):
    with pytest.raises(ConfigError, match=message):
        DatabaseURL.parse(url)


def test_an_unparseable_url_is_refused_without_its_password():
    """A URL that cannot even be split (a bracket left open in its host) is a ConfigError that
    names no part of it, since its password cannot be found to be hidden."""
    url = "postgresql://app:s3cret@[db.internal:5432/app"
    with pytest.raises(ConfigError, match="cannot be parsed") as err:
        DatabaseURL.parse(url)
    assert "s3cret" not in str(err.value)
    assert "<unparseable URL>" in str(err.value)
    assert redact(url) == "<unparseable URL>"


def test_a_listen_url_is_a_direct_postgresql_url(monkeypatch, tmp_path):
    pooled = DatabaseURL.parse("postgresql://u:secret@pooler:6432/app?pooler=transaction")
    assert pooled.pooled_transactions and pooled.listen_conninfo is None
    direct = pooled.listening_at("postgresql://u:secret@db:5432/app?schema=ignored")
    assert direct.listen_conninfo == "postgresql://u:secret@db:5432/app"
    assert DatabaseURL.parse("postgresql://db/app").listen_conninfo == "postgresql://db/app"
    with pytest.raises(ConfigError, match="give a direct URL"):
        pooled.listening_at("postgresql://pooler:6432/app?pooler=transaction")
    with pytest.raises(ConfigError, match="for a PostgreSQL ledger"):
        Ledger(f"sqlite:///{tmp_path}/x.db", listen_url="postgresql://db/app")
    # Set for the PostgreSQL deployment, the environment's listen URL leaves SQLite alone.
    monkeypatch.setenv("JOBLEDGER_LISTEN_URL", "postgresql://db/app")
    assert Ledger(f"sqlite:///{tmp_path}/x.db").url.listen_url == ""
    assert Ledger("postgresql://pooler/app?pooler=transaction").url.listen_url


def test_a_listen_url_given_before_first_use_is_where_a_pooled_ledger_listens(pg, tmp_path):
    """`--listen-url` gives a ledger behind a pooler in transaction mode a direct URL to
    LISTEN on (without one it has no listener), kept when `--url` points an app's ledger
    elsewhere; once a ledger is open, both are refused, as they could no longer take effect."""
    schema, url = pg.new_schema_url()
    try:
        pooled = f"{url}&pooler=transaction" if "?" in url else f"{url}?pooler=transaction"
        ledger = Ledger(pooled)
        direct = DatabaseURL.parse(url).listen_conninfo
        ledger.use_listen_url(url)
        assert ledger.url.listen_conninfo == direct
        ledger.use_url(pooled)
        assert ledger.url.pooled_transactions
        assert ledger.url.listen_conninfo == direct
        assert ledger.backend.supports_listen
        assert ledger.backend.listener(["q"]) is not None
        with pytest.raises(ConfigError, match="already open; set its listen URL before first use"):
            ledger.use_listen_url(url)
        with pytest.raises(ConfigError, match="already open; set its URL before first use"):
            ledger.use_url(f"sqlite:///{tmp_path}/other.db")
        assert ledger.url.dialect == "postgres"
        ledger.close()
        without = Ledger(pooled)
        assert not without.backend.supports_listen
        without.close()
    finally:
        pg.drop_schema(schema)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql:///app?host=/run/postgresql", {"dbname": "app", "host": "/run/postgresql"}),
        (
            "postgres://u@/app?host=%2Frun%2Fpostgresql&pool_size=3&schema=s",
            {"dbname": "app", "host": "/run/postgresql", "user": "u"},
        ),
        (
            "postgresql://u:pw@db:6432/app?sslmode=require&pooler=transaction",
            {
                "dbname": "app",
                "host": "db",
                "port": "6432",
                "user": "u",
                "password": "pw",
                "sslmode": "require",
            },
        ),
    ],
)
def test_libpq_reads_the_url_it_is_given(url, expected):
    """jobledger's own options are removed and the rest reaches libpq as written: a Unix socket
    (no host in the URL, ``?host=/path``) included."""
    import psycopg.conninfo

    assert psycopg.conninfo.conninfo_to_dict(DatabaseURL.parse(url).conninfo) == expected


def test_redact():
    assert redact("postgresql://u:p@h:5432/d?x=1") == "postgresql://u:***@h:5432/d?x=1"
    assert redact("postgresql://u@h/d") == "postgresql://u@h/d"


def test_a_database_url_printed_or_formatted_shows_no_password():
    url = DatabaseURL.parse("postgresql://u:secret@h:5432/d?schema=s")
    assert str(url) == f"{url}" == "postgresql://u:***@h:5432/d?schema=s"
    assert "secret" not in str([str(url)])


def test_a_database_url_s_repr_shows_no_password_of_its_own_or_its_listen_url():
    # A repr reaches logs and tracebacks (a logged %r, an error tracker's local variables),
    # so it hides the passwords as the URL's text does.
    url = DatabaseURL.parse("postgresql://u:secret@pooler:6432/d?pooler=transaction")
    url = url.listening_at("postgresql://u:other@db:5432/d")
    shown = repr(url)
    assert "secret" not in shown and "other" not in shown
    assert shown == (
        "DatabaseURL('postgresql://u:***@pooler:6432/d?pooler=transaction',"
        " listen_url='postgresql://u:***@db:5432/d')"
    )
    assert repr(DatabaseURL.parse("sqlite:///tmp/x.db")) == "DatabaseURL('sqlite:///tmp/x.db')"
