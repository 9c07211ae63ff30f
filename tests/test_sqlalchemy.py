"""Transactional enqueue in a SQLAlchemy ``Connection`` or ``Session`` (issue 17, item 4), on both
backends: the job is written in the caller's transaction, and the caller's commit decides."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

sqlalchemy = pytest.importorskip("sqlalchemy")

from sqlalchemy import text  # noqa: E402
from sqlalchemy.engine import Engine  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from jobledger import ConfigError, Ledger, NotFound  # noqa: E402
from jobledger._connections import _check_driver, raw_async_connection, raw_connection  # noqa: E402

from .support.docs import section_code  # noqa: E402
from .support.processes import ROOT  # noqa: E402


def sqlalchemy_url(ledger: Ledger) -> str:
    """The ledger's database as a SQLAlchemy URL: sqlite3's, or psycopg 3's."""
    if ledger.url.dialect == "sqlite":
        return f"sqlite:///{ledger.url.path}"
    return ledger.url.conninfo.replace("postgresql://", "postgresql+psycopg://", 1)


@pytest.fixture
def engine(ledger: Ledger) -> Iterator[Engine]:
    engine = sqlalchemy.create_engine(sqlalchemy_url(ledger))
    table = _orders(ledger)
    with engine.begin() as c:
        c.execute(text(f"CREATE TABLE {table} (id integer PRIMARY KEY, note text)"))
    yield engine
    engine.dispose()


def _orders(ledger: Ledger) -> str:
    """The application's own table, in the ledger's schema on PostgreSQL."""
    return f"{ledger.url.schema}.orders" if ledger.url.dialect == "postgres" else "orders"


def _jobs(ledger: Ledger) -> list[str]:
    return sorted(j.key for j in ledger.jobs())


def _order_ids(engine: Engine, ledger: Ledger) -> list[int]:
    with engine.connect() as c:
        return [r[0] for r in c.execute(text(f"SELECT id FROM {_orders(ledger)} ORDER BY id"))]


def test_a_committed_connection_keeps_the_job_and_the_rows(ledger, engine):
    with engine.connect() as c:
        c.execute(text(f"INSERT INTO {_orders(ledger)} VALUES (1, 'paid')"))
        assert ledger.enqueue("receipt", {"order": 1}, key="receipt:1", conn=c).created
        c.commit()
    assert _jobs(ledger) == ["receipt:1"] and _order_ids(engine, ledger) == [1]


def test_a_rolled_back_connection_leaves_no_job(ledger, engine):
    with engine.connect() as c:
        c.execute(text(f"INSERT INTO {_orders(ledger)} VALUES (1, 'paid')"))
        ledger.enqueue("receipt", {"order": 1}, key="receipt:1", conn=c)
        ledger.enqueue_many("receipt", [{"payload": {}, "key": "receipt:2"}], conn=c)
        c.rollback()
    assert _jobs(ledger) == [] and _order_ids(engine, ledger) == []
    with pytest.raises(NotFound):
        ledger.job_by_key("receipt:1")


def test_a_connection_closed_without_commit_leaves_no_job(ledger, engine):
    with engine.connect() as c:
        ledger.enqueue("receipt", {}, key="receipt:1", conn=c)  # its first statement
    assert _jobs(ledger) == []


def test_a_connection_not_yet_in_a_transaction_is_begun_and_its_commit_decides(ledger, engine):
    with engine.connect() as c:
        assert not c.in_transaction()
        ledger.enqueue("receipt", {}, key="receipt:1", conn=c)
        assert c.in_transaction()
        c.commit()
    assert _jobs(ledger) == ["receipt:1"]


def test_an_explicit_begin_block_commits(ledger, engine):
    with engine.begin() as c:
        ledger.enqueue_many(
            "receipt", [{"payload": {}, "key": "a"}, {"payload": {}, "key": "b"}], conn=c
        )
    assert _jobs(ledger) == ["a", "b"]


def test_a_session_inside_session_begin(ledger, engine):
    with Session(engine) as session, session.begin():
        session.execute(text(f"INSERT INTO {_orders(ledger)} VALUES (1, 'paid')"))
        ledger.enqueue("receipt", {"order": 1}, key="receipt:1", conn=session)
    assert _jobs(ledger) == ["receipt:1"] and _order_ids(engine, ledger) == [1]


def test_a_session_block_that_raises_leaves_nothing(ledger, engine):
    with pytest.raises(RuntimeError), Session(engine) as session, session.begin():
        session.execute(text(f"INSERT INTO {_orders(ledger)} VALUES (1, 'paid')"))
        ledger.enqueue("receipt", {"order": 1}, key="receipt:1", conn=session)
        raise RuntimeError("payment refused")
    assert _jobs(ledger) == [] and _order_ids(engine, ledger) == []


def test_a_session_without_begin_commits_or_rolls_back(ledger, engine):
    with Session(engine) as session:
        ledger.enqueue("receipt", {}, key="kept", conn=session)
        session.commit()
        ledger.enqueue("receipt", {}, key="dropped", conn=session)
        session.rollback()
    assert _jobs(ledger) == ["kept"]


def test_a_key_conflict_rolls_back_only_the_enqueue(ledger, engine):
    ledger.enqueue("receipt", {"order": 1}, key="receipt:1")
    with engine.connect() as c:
        c.execute(text(f"INSERT INTO {_orders(ledger)} VALUES (2, 'paid')"))
        with pytest.raises(Exception, match="receipt:1"):
            ledger.enqueue("receipt", {"order": 2}, key="receipt:1", conn=c)
        ledger.enqueue("receipt", {"order": 2}, key="receipt:2", conn=c)
        c.commit()
    assert _jobs(ledger) == ["receipt:1", "receipt:2"] and _order_ids(engine, ledger) == [2]


def test_a_new_ledgers_first_use_in_the_callers_transaction(ledger, engine):
    fresh = Ledger(ledger.url.raw)  # migrated already: opened without taking a lock
    try:
        with engine.connect() as c:
            c.execute(text(f"INSERT INTO {_orders(ledger)} VALUES (1, 'paid')"))
            fresh.enqueue("receipt", {}, key="receipt:1", conn=c)
            c.commit()
    finally:
        fresh.close()
    assert _jobs(ledger) == ["receipt:1"]


def test_the_raw_connection_is_the_drivers(ledger, engine):
    with engine.connect() as c:
        raw = raw_connection(c)
        assert raw is c.connection.dbapi_connection
        assert type(raw).__module__.split(".")[0] in ("sqlite3", "psycopg")
        c.rollback()
    plain = object()
    assert raw_connection(plain) is plain and raw_connection(None) is None


def test_unsupported_drivers_are_said():
    with pytest.raises(ConfigError, match="psycopg2 driver is not supported.*postgresql\\+psycopg"):
        _check_driver("postgresql", "psycopg2")
    with pytest.raises(ConfigError, match="mysql\\+pymysql driver is not supported"):
        _check_driver("mysql", "pymysql")
    _check_driver("sqlite", "pysqlite")
    _check_driver("postgresql", "psycopg")


def test_a_connection_of_another_driver_is_refused_before_anything_is_written(
    ledger, engine, monkeypatch
):
    """The enqueue reads the driver of the connection it is given: one jobledger does not write
    with is refused (here the engine says it is psycopg2's), and nothing is written."""
    monkeypatch.setattr(engine.dialect, "driver", "psycopg2")
    with engine.connect() as c:
        with pytest.raises(ConfigError, match="psycopg2 driver is not supported"):
            ledger.enqueue("receipt", {}, key="k", conn=c)
        assert not c.in_transaction()
    assert _jobs(ledger) == []


def test_an_async_form_given_to_the_sync_api_is_refused(ledger):
    pytest.importorskip("sqlalchemy.ext.asyncio")
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    engine = create_async_engine("postgresql+psycopg://postgres@127.0.0.1/postgres")
    session = AsyncSession(engine)
    with pytest.raises(ConfigError, match="AsyncSession: give it to the asyncio API"):
        ledger.enqueue("receipt", {}, key="k", conn=session)
    assert _jobs(ledger) == []


def test_something_else_from_sqlalchemy_is_refused(ledger, engine):
    with pytest.raises(ConfigError, match="conn must be a SQLAlchemy Connection or Session"):
        ledger.enqueue("receipt", {}, key="k", conn=engine)


@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)
def test_the_async_forms_unwrap_to_psycopgs_async_connection(ledger):
    import asyncio

    import psycopg
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    table = _orders(ledger)

    async def scenario() -> None:
        engine = create_async_engine(sqlalchemy_url(ledger))
        try:
            async with engine.begin() as c:
                await c.execute(text(f"CREATE TABLE {table} (id integer PRIMARY KEY)"))
            for commit, row in ((False, 1), (True, 2)):
                async with engine.connect() as c:
                    raw = await raw_async_connection(c)
                    assert isinstance(raw, psycopg.AsyncConnection) and c.in_transaction()
                    await raw.execute(f"INSERT INTO {table} VALUES ({row})")
                    await (c.commit() if commit else c.rollback())
            async with AsyncSession(engine) as session, session.begin():
                raw = await raw_async_connection(session)
                assert isinstance(raw, psycopg.AsyncConnection)
                await raw.execute(f"INSERT INTO {table} VALUES (3)")
            async with engine.connect() as c:
                rows = (await c.execute(text(f"SELECT id FROM {table} ORDER BY id"))).all()
            assert [r[0] for r in rows] == [2, 3]
            assert await raw_async_connection(None) is None
        finally:
            await engine.dispose()

    asyncio.run(scenario())


@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)
def test_asyncledger_enqueues_in_a_sqlalchemy_async_session_and_its_commit_decides(ledger):
    import asyncio

    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    from jobledger import AsyncLedger

    aledger = AsyncLedger.of(ledger)

    async def scenario() -> None:
        engine = create_async_engine(sqlalchemy_url(ledger))
        try:
            async with engine.connect() as c:
                await aledger.enqueue("receipt", {}, key="rolled-back", conn=c)
                await c.rollback()
            async with AsyncSession(engine) as session, session.begin():
                await aledger.enqueue("receipt", {}, key="committed", conn=session)
        finally:
            await engine.dispose()
            await aledger.close()

    asyncio.run(scenario())
    assert _jobs(ledger) == ["committed"]


@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)
def test_an_async_connection_of_another_driver_is_refused_before_anything_is_written(ledger):
    """As the sync enqueue: the async one reads the driver of the connection it is given, and
    refuses one jobledger does not write with (here the engine says it is asyncpg's)."""
    import asyncio

    from sqlalchemy.ext.asyncio import create_async_engine

    from jobledger import AsyncLedger

    aledger = AsyncLedger.of(ledger)

    async def scenario() -> None:
        engine = create_async_engine(sqlalchemy_url(ledger))
        engine.sync_engine.dialect.driver = "asyncpg"
        try:
            async with engine.connect() as c:
                with pytest.raises(ConfigError, match=r"postgresql\+asyncpg driver"):
                    await aledger.enqueue("receipt", {}, key="k", conn=c)
                assert not c.in_transaction()
        finally:
            await engine.dispose()
            await aledger.close()

    asyncio.run(scenario())
    assert _jobs(ledger) == []


def test_a_ledger_without_sqlalchemy_connections_never_imports_it(tmp_path):
    code = (
        "import sqlite3, sys\n"
        "from jobledger import Ledger\n"
        f"ledger = Ledger('sqlite:///{tmp_path}/l.db')\n"
        "ledger.migrate()\n"
        f"conn = sqlite3.connect('{tmp_path}/l.db')\n"
        "ledger.enqueue('t', {}, key='k', conn=conn)\n"
        "conn.commit()\n"
        "assert [j.key for j in ledger.jobs()] == ['k']\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sqlalchemy'))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_the_docs_example_runs(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("JOBLEDGER_URL", None)
    proc = subprocess.run(
        [sys.executable, "-c", section_code("SQLAlchemy")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
