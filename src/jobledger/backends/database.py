"""What the roles written once for every dialect need of it: its database object.

Each dialect (``sqlite/database.py``, ``postgres/database.py``) implements this protocol once:
how it runs a named statement, how it opens a transaction, and how it converts times. The role
implementations in this package are written against it and never know which dialect runs them.
A named statement takes the same parameters and returns the same columns in both dialects;
where the SQL needs a piece only Python can build (a list of clauses, a batch size), the
statement holds a ``{name}`` placeholder filled per call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol

from .url import DatabaseURL

__all__ = ["Cursor", "Database", "Fill"]

#: What fills a ``{name}`` placeholder: a whole number (a limit), or SQL text built by the
#: caller from fixed clauses and the dialect's placeholders (never from values).
Fill = int | str


class Cursor(Protocol):
    """The rows of a statement run on an open transaction (sqlite3's and psycopg's cursors)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Database(Protocol):
    """A dialect's database object, as the roles written once use it."""

    url: DatabaseURL

    @property
    def sql(self) -> Mapping[str, str]:
        """The dialect's named statements."""
        ...

    @property
    def label(self) -> str:
        """The database as messages name it (the URL redacted, and the schema)."""
        ...

    def ilike(self, column: str, placeholder: str) -> str:
        """``column`` matches the LIKE pattern at ``placeholder`` (escaped with a backslash),
        case ignored as Python's ``str.lower`` ignores it: for any letter, not ASCII only, on
        every backend (the pattern is given in lower case)."""
        ...

    # -- SQL text ------------------------------------------------------------------------------

    def param(self, name: str) -> str:
        """The placeholder of parameter ``name`` (``:name`` or ``%(name)s``)."""
        ...

    def among(
        self, column: str, name: str, values: Sequence[Any], type: str = "text"
    ) -> tuple[str, dict[str, Any]]:
        """A clause "``column`` is one of ``values``" (of SQL type ``type``), and its
        parameters."""
        ...

    # -- values --------------------------------------------------------------------------------

    def clock(self, now: datetime | None) -> Any:
        """The ``now`` parameter of a statement: the caller's time, or (None) the clock that
        the dialect's statements use — the process's on SQLite, the database's on PostgreSQL."""
        ...

    def to_db(self, value: datetime | None) -> Any:
        """A time as a parameter (None is NULL)."""
        ...

    def to_time(self, value: Any) -> datetime | None:
        """A stored time as an aware UTC datetime (NULL is None)."""
        ...

    def from_json(self, value: Any) -> Any:
        """A stored JSON value as Python values (NULL is None)."""
        ...

    # -- running statements --------------------------------------------------------------------

    def transaction(self, conn: Any = None) -> AbstractContextManager[Any]:
        """A write transaction of our own, or (``conn``) a savepoint in the caller's open one;
        commits on success. Yields the connection to pass to ``execute``."""
        ...

    def reading(self) -> AbstractContextManager[Any]:
        """A connection for several reads, holding no write lock."""
        ...

    def execute(
        self, c: Any, name: str, params: Mapping[str, Any] | None = None, **fill: Fill
    ) -> Cursor:
        """The named statement on a connection from ``transaction`` or ``reading``."""
        ...

    def executemany(
        self, c: Any, name: str, rows: Sequence[Mapping[str, Any]], **common: Any
    ) -> int:
        """The named statement for each of ``rows`` (one statement over arrays, on PostgreSQL),
        each with the ``common`` parameters too; how many rows it changed."""
        ...

    def read(self, name: str, params: Mapping[str, Any] | None = None, **fill: Fill) -> list[Any]:
        """The rows of a named read, holding no write lock."""
        ...

    def run(
        self, name: str, params: Mapping[str, Any], conn: Any = None, **fill: Fill
    ) -> list[Any]:
        """The rows of a named statement, in a transaction of its own (or the caller's)."""
        ...

    def count(self, name: str, params: Mapping[str, Any], conn: Any = None, **fill: Fill) -> int:
        """How many rows a named statement changed, in a transaction of its own (or the
        caller's)."""
        ...

    def close(self) -> None: ...
