"""A large batch goes in by COPY, a small one by the array statement (PostgreSQL), through the
sync and the async API; and the COPY's rows are exactly the values given, whatever they hold."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobledger import AsyncLedger, Ledger
from jobledger._records import NewJob
from jobledger.backends.postgres.jobs import COPY_FROM
from jobledger.backends.postgres.newjob import _copy_column, _copy_field, new_job_copy


def _batch(n: int, prefix: str = "k") -> list[dict[str, Any]]:
    return [{"payload": {"n": i}, "key": f"{prefix}{i}"} for i in range(n)]


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


def test_copy_from_the_threshold_and_arrays_below(pg, copies):
    schema, url = pg.new_schema_url()
    try:
        ledger = Ledger(url)
        ledger.migrate()
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
        ledger.close()
    finally:
        pg.drop_schema(schema)


def test_async_enqueue_many_copies_too(pg, copies):
    schema, url = pg.new_schema_url()
    try:
        Ledger(url).migrate()

        async def main() -> list[bool]:
            async with AsyncLedger(url) as aledger:
                made = await aledger.enqueue_many("t", _batch(COPY_FROM + 50))
                again = await aledger.enqueue_many("t", _batch(COPY_FROM + 60))
            return [r.created for r in made] + [r.created for r in again]

        created = asyncio.run(main())
        assert created == [True] * (COPY_FROM + 50) + [False] * (COPY_FROM + 50) + [True] * 10
        assert len(copies) == 2
    finally:
        pg.drop_schema(schema)


def _unescape(field: str) -> str | None:
    """A field of COPY's text format read back as PostgreSQL reads it."""
    if field == "\\N":
        return None
    out, i = [], 0
    while i < len(field):
        ch = field[i]
        if ch == "\\":
            nxt = field[i + 1]
            out.append({"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}[nxt])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


_texts = st.lists(
    st.one_of(st.none(), st.text(alphabet=st.sampled_from('ab"\\\t\n\r,{} é\u2028N.'), max_size=6)),
    min_size=1,
    max_size=8,
)


@given(_texts)
def test_text_fields_read_back_as_given_and_match_field_by_field(values):
    fields = _copy_column(values, None, None)
    assert fields == [_copy_field(v, None, None) for v in values]
    for value, field in zip(values, fields, strict=True):
        assert "\t" not in field and "\n" not in field and "\r" not in field
        assert _unescape(field) == value


def test_copy_rows_name_every_column_and_fill_what_the_insert_derives():
    clock = datetime(2026, 8, 10, 6, 0, tzinfo=UTC)
    later = datetime(2026, 8, 11, tzinfo=UTC)
    jobs = [
        NewJob("q", "a", "t", '{"s":"x\\ty"}', 0, None, 5, 60.0, "c1"),
        NewJob("q", "b", "t", "{}", 3, later, 5, 1.5, None, "g", '{"traceparent":"x"}'),
    ]
    rows = new_job_copy(jobs, ["7", "8"], clock).splitlines()
    when = clock.isoformat()
    assert rows[0].split("\t") == [
        "7", "q", "a", "t", '{"s":"x\\\\ty"}', "0", when, "5", "60.0", "c1", "\\N", "\\N",
        "5", when, when,
    ]  # fmt: skip
    assert rows[1].split("\t")[5:12] == [
        "3",
        later.isoformat(),
        "5",
        "1.5",
        "\\N",
        "g",
        '{"traceparent":"x"}',
    ]


def test_copy_through_the_server_stores_awkward_text_exactly(pg):
    schema, url = pg.new_schema_url()
    try:
        ledger = Ledger(url)
        ledger.migrate()
        odd = ['a"b', "c\\d", "\\N", "\\.", "t\tab", "n\nl", "c\rr", "é🚀\u2028", "", "{x}"]
        batch = [
            {"payload": {"s": s, s: i}, "key": f"odd{i}", "correlation_id": f"c\t{s}"}
            for i, s in enumerate(odd * 15)
        ]
        results = ledger.enqueue_many("t", batch)
        for spec, result in zip(batch, results, strict=True):
            job = ledger.job(result.id)
            assert (job.payload, job.correlation_id) == (spec["payload"], spec["correlation_id"])
        ledger.close()
    finally:
        pg.drop_schema(schema)
