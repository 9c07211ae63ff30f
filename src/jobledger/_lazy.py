"""Names a package imports from its submodules when they are first used, so that importing the
package stays quick (``import jobledger`` does not import asyncio, psycopg or Starlette)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(
    package: str, where: Mapping[str, str], namespace: MutableMapping[str, Any]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: each name of ``where`` is imported from its
    submodule (``where[name]``, relative to the package) on first use and kept in
    ``namespace`` (the package's globals), so it is looked up only once."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    return __getattr__
