"""``Task.check_payload`` answers as ``Signature.bind`` would, through its fast path too."""

from __future__ import annotations

import inspect

import pytest

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
