"""``Task.check_payload`` answers as ``Signature.bind`` would, through its fast path too."""

from __future__ import annotations

import inspect

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobledger import PayloadError
from jobledger._task import Task


def plain(ctx, n, m=1): ...
def keyword_only(ctx, *, x, y=2): ...
def open_kwargs(ctx, n, **rest): ...
def positional_only(ctx, n, /): ...
def star_args(ctx, *args, n): ...
def context_only(ctx): ...


HANDLERS = [plain, keyword_only, open_kwargs, positional_only, star_args, context_only]
PAYLOADS = [{}, {"n": 1}, {"n": 1, "m": 2}, {"x": 1}, {"x": 1, "y": 1}, {"z": 1}, {"n": 1, "z": 1}]
PAYLOADS += [{"ctx": 1}, {"n": 1, "ctx": 1}, {"args": 1, "n": 1}, {"rest": 1, "n": 1}]


@pytest.mark.parametrize("fn", HANDLERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("payload", PAYLOADS, ids=str)
def test_fast_path_agrees_with_bind(fn, payload):
    try:
        inspect.signature(fn).bind(None, **payload)
        fits = True
    except TypeError:
        fits = False
    task = Task(fn, "t")
    if fits:
        task.check_payload(payload)
    else:
        with pytest.raises(PayloadError, match="does not fit task 't'"):
            task.check_payload(payload)


# -- the payload's JSON: the encoder made once writes what json.JSONEncoder writes -------------

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(st.dictionaries(st.text(max_size=5), _json, max_size=5))
def test_payload_json_is_what_the_json_module_writes(payload):
    from jobledger._records.checks import _ENCODER, encode_payload

    if _holds_nul(payload):  # PostgreSQL's jsonb cannot hold it: refused on every backend
        with pytest.raises(PayloadError, match="U\\+0000"):
            encode_payload(payload)
    else:
        assert encode_payload(payload) == _ENCODER.encode(payload)


def _holds_nul(value) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_nul(v) for v in value)
    return False


def test_a_payload_that_contains_itself_is_refused():
    from jobledger._records.checks import encode_payload

    loop: dict = {"a": 1}
    loop["self"] = loop
    with pytest.raises(PayloadError, match="contains itself"):
        encode_payload(loop)
    deep: dict = {}
    for _ in range(10_000):
        deep = {"d": deep}
    with pytest.raises(PayloadError, match="nests too deeply"):
        encode_payload(deep)
    assert encode_payload({"n": 1}) == '{"n":1}'  # and the encoder still works
