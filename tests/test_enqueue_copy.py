"""A large batch goes in by COPY, a small one by the array statement (PostgreSQL), through the
sync and the async API, and the values come back as they were given, whatever they hold (the
COPY's rows themselves: tests/test_newjob_arrays.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from jobledger import AsyncLedger, JobFilter, Ledger, PayloadError
from jobledger.backends.postgres.jobs import COPY_FROM


def _batch(n: int, prefix: str = "k") -> list[dict[str, Any]]:
    return [{"payload": {"n": i}, "key": f"{prefix}{i}"} for i in range(n)]


@pytest.fixture
def url(pg: Any) -> Iterator[str]:
    """A migrated schema of its own on the test server."""
    schema, url = pg.new_schema_url()
    try:
        Ledger(url).migrate()
        yield url
    finally:
        pg.drop_schema(schema)


@pytest.fixture
def copies(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The COPY statements sent, by the sync and the async cursor."""
    sent: list[str] = []
    for cursor in (psycopg.Cursor, psycopg.AsyncCursor):
        original = cursor.copy

        def spy(self: Any, statement: Any, *args: Any, _original: Any = original, **kw: Any) -> Any:
            sent.append(str(statement))
            return _original(self, statement, *args, **kw)

        monkeypatch.setattr(cursor, "copy", spy)
    return sent


def test_copy_from_the_threshold_and_arrays_below(url, copies):
    with Ledger(url) as ledger:
        small = ledger.enqueue_many("t", _batch(COPY_FROM - 1, "s"))
        assert copies == [] and all(r.created for r in small)
        large = ledger.enqueue_many("t", _batch(COPY_FROM, "l"))
        assert len(copies) == 1 and copies[0].startswith("COPY ")
        assert all(r.created for r in large)
        # A known key: the COPY rolls back, the checked path answers (no second COPY).
        again = ledger.enqueue_many("t", _batch(COPY_FROM + 1, "l"))
        assert [r.created for r in again] == [False] * COPY_FROM + [True]
        assert [r.id for r in again[:COPY_FROM]] == [r.id for r in large]
        assert len(copies) == 2
        assert len(ledger.jobs()) == 2 * COPY_FROM


def test_async_enqueue_many_copies_too(url, copies):
    async def main() -> list[bool]:
        async with AsyncLedger(url) as aledger:
            made = await aledger.enqueue_many("t", _batch(COPY_FROM + 50))
            again = await aledger.enqueue_many("t", _batch(COPY_FROM + 60))
        return [r.created for r in made] + [r.created for r in again]

    created = asyncio.run(main())
    assert created == [True] * (COPY_FROM + 50) + [False] * (COPY_FROM + 50) + [True] * 10
    assert len(copies) == 2


def test_copy_through_the_server_stores_awkward_text_exactly(url):
    with Ledger(url) as ledger:
        odd = ['a"b', "c\\d", "\\N", "\\.", "t\tab", "n\nl", "c\rr", "é🚀\u2028", "", "{x}"]
        batch = [
            # A correlation id holds no control character: its odd text is the others.
            {"payload": {"s": s, s: i}, "key": f"odd{i}", "correlation_id": f"c{_printable(s)}"}
            for i, s in enumerate(odd * 15)
        ]
        results = ledger.enqueue_many("t", batch)
        for spec, result in zip(batch, results, strict=True):
            job = ledger.job(result.id)
            assert (job.payload, job.correlation_id) == (spec["payload"], spec["correlation_id"])


def _printable(text: str) -> str:
    return "".join(ch for ch in text if ch.isprintable())


def test_a_copied_batch_wakes_listeners_once_it_commits(url):
    with Ledger(url) as ledger, psycopg.connect(url.split("?")[0], autocommit=True) as listen:
        listen.execute(f'LISTEN "{ledger.backend.db.channel}"')
        ledger.enqueue_many("t", _batch(COPY_FROM), queue="copied")
        told = [n.payload for n in listen.notifies(timeout=10, stop_after=1)]
        assert told == ["copied"]


def test_a_large_batch_is_built_as_the_copy_reads_it(url):
    """The jobs of a batch that goes in by COPY are built a piece at a time as the COPY reads
    them (the database inserts one piece while the next is built), not all before the first is
    sent; a job that fails its checks in the last piece raises as it would have, and the
    batch's transaction rolls back: nothing of it is written. A ledger that has not opened its
    database yet builds the batch whole first."""
    ledger = Ledger(url)
    ledger.task(lambda ctx, n: None, name="t", queue="q")
    parts: list[int] = []
    real = ledger._job_builder

    def counting(*args: Any, **kwargs: Any) -> Any:
        build = real(*args, **kwargs)

        def counted(specs: Any) -> Any:
            parts.append(len(specs))
            return build(specs)

        return counted

    ledger._job_builder = counting  # type: ignore[method-assign]
    try:
        ledger.enqueue_many("t", _batch(300, "first"))
        assert parts == [300]  # the database was not open yet: built whole
        parts.clear()
        results = ledger.enqueue_many("t", _batch(1000))
        assert parts == [200] * 5
        assert len({r.id for r in results}) == 1000 and all(r.created for r in results)
        parts.clear()
        bad = _batch(1000, "bad")
        bad[950]["payload"] = {"n": object()}
        with pytest.raises(PayloadError, match="not JSON-serialisable"):
            ledger.enqueue_many("t", bad)
        assert parts == [200] * 5
        assert len(ledger.jobs(JobFilter(limit=5000))) == 1300
    finally:
        ledger.close()


def test_a_copied_batch_is_created_due_and_updated_at_one_clock_by_either_shape(url, copies):
    """Without an explicit clock the COPY leaves the created and updated times to the table's
    defaults (the transaction's clock, which is the batch's too): every job of the batch has
    the one time the statement-built jobs have, between the clocks read before and after it,
    and a job given its own run time keeps it. With an explicit clock, that clock, sent."""
    later = datetime(2030, 1, 1, tzinfo=UTC)
    batch = _batch(COPY_FROM - 1) + [{"payload": {"n": -1}, "key": "later", "run_at": later}]
    with Ledger(url) as ledger, psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        [[before]] = conn.execute("SELECT now()").fetchall()
        made = ledger.enqueue_many("t", batch)
        [[after]] = conn.execute("SELECT now()").fetchall()
        jobs = [ledger.job(r.id) for r in made]
        clocks = {(j.created_at, j.updated_at) for j in jobs}
        [(clock, same)] = clocks
        assert clock == same and before <= clock <= after
        assert [j.run_at for j in jobs] == [clock] * (COPY_FROM - 1) + [later]

        given = datetime(2026, 8, 10, 6, 0, tzinfo=UTC)
        made = ledger.enqueue_many("t", _batch(COPY_FROM, "given"), now=given)
        times = {
            (j.created_at, j.updated_at, j.run_at) for j in map(ledger.job, (r.id for r in made))
        }
        assert times == {(given, given, given)}
    assert [c.split("(")[1].split(")")[0].endswith("attempt_limit") for c in copies] == [
        True,
        False,
    ]
