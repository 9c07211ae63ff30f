"""The public API is exact: ``__all__`` holds what a user needs, and the package's public
names are exactly ``__all__`` (as httpx checks its own)."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import types

import jobledger

# Subpackages a user may import from; every other module is private (``_name``) or internal.
PUBLIC_SUBPACKAGES = {"client", "contrib", "push", "testing"}
INTERNAL_SUBPACKAGES = {
    "backends",
    "brokers",
    "cli",
    "errors",
    "http",
    "maintenance",
    "observability",
    "policy",
    "scheduling",
}


def _names_after_import(statement: str) -> dict[str, str]:
    """The package's public names, and what kind each is, in a fresh interpreter after
    ``statement``."""
    code = (
        f"{statement}\nimport json, types, jobledger\n"
        "print(json.dumps({n: ('module' if isinstance(v, types.ModuleType) else 'name')"
        " for n, v in vars(jobledger).items() if not n.startswith('_')}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_all_is_sorted_and_importable():
    assert jobledger.__all__ == sorted(jobledger.__all__)
    for name in jobledger.__all__:
        assert hasattr(jobledger, name), name


def test_the_public_names_equal_all():
    """Once every name of ``__all__`` is resolved, the package has no other public name but
    its subpackages: nothing internal leaks, nothing exported is missing."""
    found = _names_after_import(
        "import jobledger\nfor n in jobledger.__all__: getattr(jobledger, n)"
    )
    names = {n for n, kind in found.items() if kind == "name"}
    modules = {n for n, kind in found.items() if kind == "module"}
    assert names == set(jobledger.__all__) - {"__version__"}
    assert modules <= PUBLIC_SUBPACKAGES | INTERNAL_SUBPACKAGES, modules


def test_dir_lists_exactly_all():
    assert {n for n in dir(jobledger) if not n.startswith("_")} - {
        n for n, v in vars(jobledger).items() if isinstance(v, types.ModuleType)
    } == set(jobledger.__all__) - {"__version__"}


def test_internals_are_not_exported():
    for name in ("InsertResult", "PruneResult", "fault_point", "SchedulerPass", "Backend"):
        assert name not in jobledger.__all__
        assert not hasattr(jobledger, name), name


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


def test_top_level_modules_are_private():
    """Every module directly in the package is private, but the public and internal
    subpackages named above."""
    import pkgutil

    for info in pkgutil.iter_modules(jobledger.__path__):
        assert info.name.startswith("_") or info.name in (
            PUBLIC_SUBPACKAGES | INTERNAL_SUBPACKAGES
        ), info.name


def test_public_types_have_docstrings():
    for name in jobledger.__all__:
        value = getattr(jobledger, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__doc__, f"{name} has no docstring"
