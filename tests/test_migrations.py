"""Migrations: the numbered chain yields the canonical schema; migrate is idempotent and safe
to run from several processes; a schema this code does not know is refused."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import psycopg
import pytest

from jobledger import Ledger, SchemaMismatch
from jobledger._records import Failure, Lease
from jobledger.backends import open_backend
from jobledger.backends.sqlfiles import migrations
from jobledger.backends.sqlite.database import split_statements


def canonical_sql(dialect: str) -> str:
    """The canonical schema, written by hand: what the migration chain must produce."""
    return (Path(__file__).parent / "schema" / f"{dialect}.sql").read_text()


def sqlite_catalog(path) -> dict:
    conn = sqlite3.connect(path)
    catalog = {}
    tables = [
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'jobledger_%' ORDER BY name"
        )
    ]
    for table in tables:
        catalog[table] = {
            "columns": conn.execute(f"PRAGMA table_xinfo({table})").fetchall(),
            "indexes": sorted(
                (
                    name,
                    unique,
                    partial,
                    conn.execute(f"PRAGMA index_xinfo({name})").fetchall(),
                    (
                        conn.execute(
                            "SELECT sql FROM sqlite_master WHERE name = ?", (name,)
                        ).fetchone()
                        or [None]
                    )[0],
                )
                for _, name, unique, _, partial in conn.execute(f"PRAGMA index_list({table})")
            ),
            "without_rowid": "WITHOUT ROWID"
            in conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0],
        }
    catalog["triggers"] = conn.execute(
        "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name"
    ).fetchall()
    conn.close()
    return catalog


def postgres_catalog(url: str, schema: str) -> dict:
    with psycopg.connect(url) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name, data_type, is_nullable, column_default, is_identity"
            " FROM information_schema.columns WHERE table_schema = %s ORDER BY table_name, ordinal_position",
            (schema,),
        ).fetchall()
        indexes = conn.execute(
            "SELECT tablename, indexname, replace(indexdef, %s, '') FROM pg_indexes WHERE schemaname = %s ORDER BY indexname",
            (f"{schema}.", schema),
        ).fetchall()
        constraints = conn.execute(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE connamespace = %s::regnamespace ORDER BY conname",
            (schema,),
        ).fetchall()
        triggers = conn.execute(
            "SELECT tgname, replace(pg_get_triggerdef(t.oid), %s, '') FROM pg_trigger t"
            " JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relnamespace = %s::regnamespace"
            " AND NOT t.tgisinternal ORDER BY tgname",
            (f"{schema}.", schema),
        ).fetchall()
        functions = conn.execute(
            "SELECT proname, prosrc, replace(array_to_string(proconfig, ','), %s, '') FROM pg_proc"
            " WHERE pronamespace = %s::regnamespace ORDER BY proname",
            (schema, schema),
        ).fetchall()
    return {
        "columns": columns,
        "indexes": indexes,
        "constraints": [(t.split(".")[-1], n, d) for t, n, d in constraints],
        "triggers": triggers,
        "functions": functions,
    }


def test_sqlite_chain_yields_the_canonical_schema(tmp_path):
    chained = tmp_path / "chain.db"
    open_backend(f"sqlite:///{chained}").migrate()
    canonical = tmp_path / "canonical.db"
    conn = sqlite3.connect(canonical)
    for statement in split_statements(canonical_sql("sqlite")):
        conn.execute(statement)
    conn.commit()
    conn.close()
    assert sqlite_catalog(chained) == sqlite_catalog(canonical)


def test_postgres_chain_yields_the_canonical_schema(pg):
    chain_schema, chain_url = pg.new_schema_url()
    canon_schema, _ = pg.new_schema_url()
    try:
        open_backend(chain_url).migrate()
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{canon_schema}"')
            conn.execute(f'SET search_path TO "{canon_schema}"')
            conn.execute(canonical_sql("postgres").encode())
        assert postgres_catalog(pg.url, chain_schema) == postgres_catalog(pg.url, canon_schema)
    finally:
        pg.drop_schema(chain_schema)
        pg.drop_schema(canon_schema)


def test_migrations_match_across_dialects():
    assert [m.label for m in migrations("sqlite")] == [m.label for m in migrations("postgres")]


def test_migrate_twice_applies_nothing_the_second_time(db_url):
    ledger = Ledger(db_url, auto_migrate=False)
    first = ledger.migrate()
    assert first == [m.label for m in migrations(ledger.url.dialect)]
    assert ledger.migrate() == []
    ledger.close()


def test_concurrent_migrations_apply_once(db_url):
    results, errors = [], []

    def go() -> None:
        try:
            results.append(open_backend(db_url).migrate())
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(len(r) for r in results) == [0, 0, 0, len(migrations(Ledger(db_url).url.dialect))]


def test_unmigrated_database_without_auto_migrate_says_what_to_do(db_url):
    ledger = Ledger(db_url, auto_migrate=False)
    with pytest.raises(SchemaMismatch, match="jobledger migrate"):
        ledger.jobs()


def test_a_newer_schema_is_refused(db_url):
    ledger = Ledger(db_url)
    ledger.migrate()
    with ledger.backend.transaction() as conn:
        if ledger.url.dialect == "postgres":
            conn.execute(
                f"INSERT INTO {ledger.url.schema}.jobledger_migrations (version, name) VALUES (999, 'future')"
            )
        else:
            conn.execute(
                "INSERT INTO jobledger_migrations (version, name, applied_at) VALUES (999, 'future', 0)"
            )
    ledger.close()
    with pytest.raises(SchemaMismatch, match="newer jobledger"):
        Ledger(db_url).jobs()


def test_a_schema_lacking_a_migration_is_refused_naming_it(db_url):
    """A process of a newer version than the schema's (deployed before `jobledger migrate`
    ran) refuses it, naming the migrations it lacks, as docs/operations.md says."""
    ledger = Ledger(db_url)
    ledger.migrate()
    last = migrations(ledger.url.dialect)[-1]
    table = (
        f"{ledger.url.schema}.jobledger_migrations"
        if ledger.url.dialect == "postgres"
        else "jobledger_migrations"
    )
    with ledger.backend.transaction() as conn:
        conn.execute(f"DELETE FROM {table} WHERE version = {last.version}")
    ledger.close()
    lacking = Ledger(db_url, auto_migrate=False)
    with pytest.raises(SchemaMismatch) as err:
        lacking.jobs()
    assert str(err.value).endswith(f"lacks migrations {last.label}; run `jobledger migrate`")
    lacking.close()


def test_sqlite_checks_without_lists_keep_rows_ids_and_constraints(tmp_path):
    """013 rebuilds the jobs and attempts tables (their CHECKs without IN lists): every row and
    the jobs' id sequence survive it (no pruned job's id is given again), and the CHECKs still
    refuse a state or outcome that does not exist."""
    path = tmp_path / "ledger.db"
    ledger = Ledger(f"sqlite:///{path}")

    @ledger.task(queue="q", max_attempts=3)
    def work(ctx, n: int = 0) -> None:
        pass

    ledger.migrate()
    ids = [ledger.enqueue(work, {"n": n}, key=f"k{n}").id for n in range(3)]
    [job] = ledger.backend.jobs.claim(["q"], "w", 1)
    # A failed attempt, so that the attempts table has a row (a completion writes none).
    lease = Lease(job.id, job.lease_token, job.attempt)
    ledger.backend.jobs.fail([Failure(lease, True, None, "ValueError", "boom")])
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DELETE FROM jobledger_jobs WHERE id = ?", (ids[-1],))  # as a prune would
    # The jobs table as 013 found it: without the columns of later migrations (016's
    # leased_at), which it does not know; they are added again after it, below.
    conn.execute("ALTER TABLE jobledger_jobs DROP COLUMN leased_at")
    before = [
        conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
        for table in ("jobledger_jobs", "jobledger_attempts", "sqlite_sequence")
    ]
    [rebuild] = [m for m in migrations("sqlite") if m.version == 13]
    conn.execute("BEGIN IMMEDIATE")
    for statement in split_statements(rebuild.sql):
        conn.execute(statement)
    conn.execute("COMMIT")
    after = [
        conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
        for table in ("jobledger_jobs", "jobledger_attempts", "sqlite_sequence")
    ]
    assert after == before
    [readd] = [m for m in migrations("sqlite") if m.version == 16]
    for statement in split_statements(readd.sql):
        conn.execute(statement)
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("UPDATE jobledger_jobs SET state = 'gone' WHERE id = ?", (ids[0],))
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("UPDATE jobledger_attempts SET outcome = 'gone'")
    conn.close()
    assert ledger.enqueue(work, {"n": 9}, key="k9").id == ids[-1] + 1
    assert sqlite_catalog(path) == sqlite_catalog(_canonical(tmp_path))
    ledger.close()


def _canonical(tmp_path: Path) -> Path:
    canonical = tmp_path / "canonical.db"
    conn = sqlite3.connect(canonical)
    for statement in split_statements(canonical_sql("sqlite")):
        conn.execute(statement)
    conn.commit()
    conn.close()
    return canonical
