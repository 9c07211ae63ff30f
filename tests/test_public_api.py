"""The public API is explicit: ``__all__`` is sorted, complete and importable."""

from __future__ import annotations

import inspect

import jobledger


def test_all_is_sorted_and_importable():
    assert jobledger.__all__ == sorted(jobledger.__all__)
    for name in jobledger.__all__:
        assert hasattr(jobledger, name), name


def test_all_names_every_public_class_and_function():
    public = {
        name
        for name, value in vars(jobledger).items()
        if not name.startswith("_") and (inspect.isclass(value) or inspect.isfunction(value))
    }
    assert public <= set(jobledger.__all__)


def test_issue_names_are_exported():
    for name in (
        "Ledger",
        "JobState",
        "JobRow",
        "Retry",
        "Permanent",
        "LeaseLost",
        "KeyConflict",
        "JobContext",
    ):
        assert name in jobledger.__all__


def test_public_types_have_docstrings():
    for name in jobledger.__all__:
        value = getattr(jobledger, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__doc__, f"{name} has no docstring"
