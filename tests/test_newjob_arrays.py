"""A batch's columns as array literals and as the rows of a COPY: the fast paths (one shared
value, a text column escaped in one pass) build exactly what escaping element by element builds,
and a COPY field reads back as the value it was made of."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from jobledger._records import NewJob
from jobledger.backends.postgres.newjob import (
    COPY_PIECE,
    NEW_JOB_COLUMNS,
    _array,
    _copy_column,
    _copy_field,
    new_job_copy,
    new_job_copy_pieces,
)

_LITERALS = {c.type: c.literal for c in NEW_JOB_COLUMNS}


def _one_by_one(values, literal):  # type: ignore[no-untyped-def]
    return "{" + ",".join([literal(v) for v in values]) + "}"


def _texts(alphabet: str) -> st.SearchStrategy[list[str | None]]:
    """Columns of a few values, None among them, made of ``alphabet``."""
    return st.lists(
        st.one_of(st.none(), st.text(alphabet=st.sampled_from(alphabet), max_size=6)),
        min_size=1,
        max_size=8,
    )


@given(_texts('ab"\\,{} \x00é'))
def test_text_columns_match_element_by_element_escaping(values):
    assert _array(values, _LITERALS["text"]) == _one_by_one(values, _LITERALS["text"])


@given(st.lists(st.sampled_from([0, 1, -5, 2**31 - 1]), min_size=1, max_size=8))
def test_int_columns_match(values):
    assert _array(values, _LITERALS["int"]) == _one_by_one(values, _LITERALS["int"])


def test_a_shared_value_is_repeated():
    assert _array(["q"] * 3, _LITERALS["text"]) == '{"q","q","q"}'
    assert _array([None, None], _LITERALS["text"]) == "{NULL,NULL}"


def test_a_column_null_for_the_whole_batch_is_sent_empty():
    from datetime import datetime

    from jobledger._records import NewJob
    from jobledger.backends.postgres.newjob import new_job_arrays

    jobs = [NewJob("q", f"k{i}", "t", "{}", 0, None, 5, 60.0) for i in range(3)]
    arrays = new_job_arrays(jobs)
    assert arrays["trace_context"] == arrays["group_name"] == arrays["run_at"] == "{}"
    assert arrays["key"] == '{"k0","k1","k2"}'
    jobs[1].trace_context = '{"traceparent":"x"}'
    jobs[2].run_at = datetime(2026, 1, 1)
    arrays = new_job_arrays(jobs)
    assert arrays["trace_context"] == '{NULL,"{\\"traceparent\\":\\"x\\"}",NULL}'
    assert arrays["run_at"].startswith("{NULL,NULL,")


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


@given(_texts('ab"\\\t\n\r,{} é\u2028N.'))
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


def test_a_copy_in_pieces_sends_the_rows_of_the_whole_batch():
    """A batch of several pieces, whose columns each hold one value in some pieces and several
    in others: the pieces, joined, are the rows of the batch in one."""
    clock = datetime(2026, 8, 10, 6, 0, tzinfo=UTC)
    later = datetime(2026, 8, 11, tzinfo=UTC)
    jobs = [
        NewJob("q", f"k{n}", "t", f'{{"n":{n}}}', n // 300, later if n % 7 else None, 5, 60.0,
               f"c{n}", "g" if n > 450 else None)
        for n in range(3 * COPY_PIECE + 17)
    ]  # fmt: skip
    ids = [str(n + 1) for n in range(len(jobs))]
    pieces = list(new_job_copy_pieces(jobs, ids, clock))
    assert len(pieces) == 4
    assert "".join(pieces) == new_job_copy(jobs, ids, clock)
