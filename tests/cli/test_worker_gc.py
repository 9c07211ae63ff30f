"""A worker process collects its first generation less often while it runs, unless the
application chose its own thresholds; the thresholds are as they were once it stops."""

from __future__ import annotations

import gc

import pytest

from jobledger.cli.worker import DEFAULT_GC_THRESHOLD, WORKER_GC_YOUNG, fewer_young_collections


@pytest.fixture
def thresholds():
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_the_default_thresholds_give_way_while_the_worker_runs(thresholds):
    gc.set_threshold(*DEFAULT_GC_THRESHOLD)
    with fewer_young_collections():
        assert gc.get_threshold() == (WORKER_GC_YOUNG, *DEFAULT_GC_THRESHOLD[1:])
    assert gc.get_threshold() == DEFAULT_GC_THRESHOLD


def test_an_applications_own_thresholds_are_kept(thresholds):
    gc.set_threshold(500, 5, 5)
    with fewer_young_collections():
        assert gc.get_threshold() == (500, 5, 5)
    assert gc.get_threshold() == (500, 5, 5)


def test_the_thresholds_come_back_when_the_worker_fails(thresholds):
    gc.set_threshold(*DEFAULT_GC_THRESHOLD)
    with pytest.raises(RuntimeError), fewer_young_collections():
        raise RuntimeError("the worker failed")
    assert gc.get_threshold() == DEFAULT_GC_THRESHOLD
