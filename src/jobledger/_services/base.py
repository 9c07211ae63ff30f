"""What every service needs of the ledger: its backend, opened (and migrated) on first use.

Services sit below the ledger, so they take this small protocol rather than importing it; the
``Ledger`` satisfies it and hands itself to each service it offers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Concatenate, ParamSpec, Protocol, TypeVar

if TYPE_CHECKING:
    from ..backends.base import Backend

__all__ = ["LedgerStorage", "Service", "on_backend"]

P = ParamSpec("P")
R = TypeVar("R")


class LedgerStorage(Protocol):
    """The ledger as its services see it."""

    @property
    def backend(self) -> Backend: ...


class Service:
    """A service over the ledger's storage. The backend is looked up on each use, so building
    a service opens nothing."""

    def __init__(self, ledger: LedgerStorage):
        self._ledger = ledger

    @property
    def _backend(self) -> Backend:
        return self._ledger.backend


def on_backend(fn: Callable[Concatenate[Backend, P], R]) -> Callable[Concatenate[Service, P], R]:
    """A service method made of a function of the backend (``fn(backend, …)``), which tests
    and the push cron call on a bare backend: the signature and the docstring are ``fn``'s,
    written once."""

    @functools.wraps(fn)
    def method(self: Service, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return fn(self._backend, *args, **kwargs)

    return method
