"""A batch's columns as array literals: the fast paths (one shared value, a text column
escaped in one pass) build exactly what escaping element by element builds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jobledger.backends.postgres.newjob import NEW_JOB_COLUMNS, _array

_LITERALS = {c.type: c.literal for c in NEW_JOB_COLUMNS}


def _one_by_one(values, literal):  # type: ignore[no-untyped-def]
    return "{" + ",".join([literal(v) for v in values]) + "}"


_texts = st.lists(
    st.one_of(st.none(), st.text(alphabet=st.sampled_from('ab"\\,{} \x00é'), max_size=6)),
    min_size=1,
    max_size=8,
)


@given(_texts)
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
