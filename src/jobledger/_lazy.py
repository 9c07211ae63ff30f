"""Names a package imports when first asked for (PEP 562), so that importing it stays quick."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from typing import Any

__all__ = ["load"]


def load(package: str, modules: Mapping[str, str], namespace: dict[str, Any], name: str) -> Any:
    """For a package's ``__getattr__``: ``name`` from its module ``modules[name]`` (relative to
    ``package``), kept in the package's ``namespace`` so that it is imported once."""
    module = modules.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(import_module(f"{package}.{module}"), name)
    namespace[name] = value
    return value
