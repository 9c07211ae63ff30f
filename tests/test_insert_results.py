"""The results of a batch whose jobs were all created are made without InsertResult's frozen
``__init__`` (``created_results``), and an enqueue's items are plain tuples on their way to
the new jobs (``_specs``): both are the same values as the slow way, and stay what a user
gets (frozen, equal, hashable results; the same errors for a bad item)."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

import pytest

from jobledger import ConfigError, JobSpec, KeyConflict, Ledger, PayloadError
from jobledger._ledger import _one_spec, _specs
from jobledger._records import InsertResult, NewJob, created_results
from jobledger.backends.common import resolve_inserts


def _job(key: str, n: int = 0) -> NewJob:
    return NewJob("q", key, "t", json.dumps({"n": n}), 0, None, 3, 30.0)


def test_created_results_are_the_results_init_makes():
    ids = [7, 8, 9, 2**63 - 1]
    made = created_results(ids)
    expected = [InsertResult(i, True) for i in ids]
    assert made == expected
    assert [type(r) for r in made] == [InsertResult] * len(ids)
    assert [repr(r) for r in made] == [repr(r) for r in expected]
    assert {hash(r) for r in made} == {hash(r) for r in expected}
    assert [(r.id, r.created, r.conflict, r.pruned) for r in made] == [
        (i, True, False, False) for i in ids
    ]
    assert made[0].enqueued() == (7, True)
    assert dataclasses.astuple(made[1]) == (8, True, False, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made[0].id = 1  # type: ignore[misc]
    assert created_results(iter([])) == []


def test_resolve_inserts_all_created_and_otherwise():
    jobs = [_job("a"), _job("b"), _job("c")]
    created = {("q", "a"): 1, ("q", "b"): 2, ("q", "c"): 3}
    assert resolve_inserts(jobs, created, {}, "raise") == [
        InsertResult(1, True),
        InsertResult(2, True),
        InsertResult(3, True),
    ]
    # A key twice: the second is a duplicate of the first (not the all-created path).
    twice = [_job("a"), _job("b"), _job("a")]
    assert resolve_inserts(twice, {("q", "a"): 1, ("q", "b"): 2}, {}, "raise") == [
        InsertResult(1, True),
        InsertResult(2, True),
        InsertResult(1, False),
    ]
    # A key twice with two payloads is a conflict, reported or raised.
    other = [_job("a"), _job("b"), _job("a", 1)]
    report = resolve_inserts(other, {("q", "a"): 1, ("q", "b"): 2}, {}, "report")
    assert report[2] == InsertResult(1, False, conflict=True)
    with pytest.raises(KeyConflict):
        resolve_inserts(other, {("q", "a"): 1, ("q", "b"): 2}, {}, "raise")
    # A known key.
    known = resolve_inserts(
        jobs, {("q", "a"): 1, ("q", "c"): 3}, {("q", "b"): (5, "t", '{"n": 0}')}, "raise"
    )
    assert known == [InsertResult(1, True), InsertResult(5, False), InsertResult(3, True)]


def test_specs_are_the_same_tuples_from_a_jobspec_and_from_a_dict():
    when = datetime(2026, 8, 10, tzinfo=UTC)
    full = {
        "payload": {"n": 1},
        "key": "k",
        "delay": None,
        "run_at": when,
        "priority": 4,
        "correlation_id": "c",
        "group": "g",
    }
    assert _specs([JobSpec(**full), full]) == [
        ({"n": 1}, "k", None, when, 4, "c", "g"),
        ({"n": 1}, "k", None, when, 4, "c", "g"),
    ]
    assert _specs([JobSpec({})]) == _specs([{}]) == [({}, None, None, None, 0, None, None)]
    assert _specs([{"payload": {}, "delay": 5}])[0][2] == 5.0
    assert _one_spec(None, "k", 2, None, None, None, None) == ({}, "k", 2.0, None, 0, None, None)
    with pytest.raises(ConfigError, match=r"unknown job fields \['colour'\]"):
        _specs([{"payload": {}, "colour": "red"}])
    with pytest.raises(PayloadError, match="delay"):
        _specs([{"payload": {}, "delay": float("nan")}])


@pytest.mark.parametrize(
    "key", ["k", "a b", "é🚀", "nbsp\xa0", "line\u2028sep", "x" * 512, "\x85next"]
)
def test_a_key_without_a_control_character_is_taken_as_it_is(tmp_path, key):
    """Printable keys skip the full check; the valid ones that are not printable (U+00A0,
    U+2028, U+0085: not among the refused control characters) pass the full check."""
    ledger = Ledger(f"sqlite:///{tmp_path}/l.db")
    [job] = ledger._new_jobs("t", _specs([{"key": key}]), queue=None, now=None, priority_given=True)
    assert job.key == key


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("", "must not be empty"),
        ("x" * 513, "the limit is 512"),
        ("tab\there", "control character"),
        ("del\x7f", "control character"),
        (42, "must be a string"),
    ],
)
def test_a_bad_key_in_a_batch_is_refused(tmp_path, key, message):
    ledger = Ledger(f"sqlite:///{tmp_path}/l.db")
    specs = _specs([{"key": "fine"}, {"key": key}])
    with pytest.raises(PayloadError, match=message):
        ledger._new_jobs("t", specs, queue=None, now=None, priority_given=True)
