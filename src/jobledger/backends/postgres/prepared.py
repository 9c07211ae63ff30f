"""A statement executed through libpq's ``PQexecPrepared`` directly, for the hottest one-row calls.

psycopg's cursor (query conversion, a dumper per parameter, the result's description) costs about
126 µs of Python per call on the bench machine; the same prepared statement sent through
``pgconn.exec_prepared`` with text parameters costs about 41 µs. For the single enqueue, whose
call is one short statement and one commit, that is a tenth of the call. libpq releases the GIL
while it waits for the server, as psycopg does.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections import OrderedDict
from datetime import datetime
from typing import Any

import psycopg
import psycopg.errors
from psycopg import pq
from psycopg.adapt import Transformer

__all__ = ["PreparedStatement", "run_simple"]

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")

#: A statement is prepared again on a connection after this many runs there. PostgreSQL keeps
#: a prepared statement's generic plan until the statistics of its tables change; made while
#: the jobs table was nearly empty, the claim's plan read the table whole for the rows it had
#: just locked, and where nothing analyzes the table (autovacuum off, or far behind) it kept
#: doing so as the table grew (7.5 ms a claim at 20,000 rows under a held xmin instead of
#: 0.9). Preparing again costs a few custom plans per this many runs.
REPLAN_EVERY = 1000
#: Statements of this module kept prepared on one connection at most; past it the one used
#: least recently is deallocated (and prepared again if it comes back). Each claim size is a
#: statement of its own (``{limit}`` is written in, so that its plan knows it), and a prepared
#: claim holds about 130 kB of its server session's memory: a worker whose claim sizes vary
#: (with ``prefetch``, anything from half a batch to a whole one) kept hundreds of them on
#: each connection, for as long as the connection lived. 100 is psycopg's own limit for the
#: statements it prepares (``Connection.prepared_max``).
MAX_PREPARED = 100
_OK = (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK)

#: Per connection: the names of the statements prepared on it, least recently used first, each
#: with its runs since it was prepared. Changed only under the connection's lock, with which
#: each statement runs.
_prepared_on: weakref.WeakKeyDictionary[psycopg.Connection[Any], OrderedDict[bytes, int]] = (
    weakref.WeakKeyDictionary()
)
_prepared_on_lock = threading.Lock()


def _kept(conn: psycopg.Connection[Any]) -> OrderedDict[bytes, int]:
    """The statements prepared on ``conn`` (name: runs), in the order of their last use."""
    kept = _prepared_on.get(conn)
    if kept is None:
        with _prepared_on_lock:
            kept = _prepared_on.setdefault(conn, OrderedDict())
    return kept


def _param(value: Any) -> bytes | None:
    """A parameter in PostgreSQL's text input format (the statement's casts give its type)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: pass an aware datetime (UTC)")
        return value.isoformat().encode()
    if isinstance(value, bool | int | float):
        return repr(value).encode()
    raise TypeError(f"cannot send {type(value).__name__} as a prepared statement parameter")


class PreparedStatement:
    """One named query (``%(name)s`` placeholders), prepared once per connection on first use.

    Errors are psycopg's own exception classes, as from ``cursor.execute``: a broken connection
    raises ``OperationalError`` and leaves ``conn.broken`` true.

    ``prepare=False`` (through a pooler in transaction mode, where the next call may reach
    another server session) sends it unnamed each time — parse, bind and execute in one round
    trip, still without psycopg's cursor."""

    def __init__(self, name: str, text: str, prepare: bool = True):
        if "%%" in text:
            raise ValueError(f"statement {name!r}: '%%' is not supported here")
        self.name = name.encode()
        self.params: list[str] = []

        def number(match: re.Match[str]) -> str:
            if match[1] not in self.params:
                self.params.append(match[1])
            return f"${self.params.index(match[1]) + 1}"

        self.sql = _PLACEHOLDER.sub(number, text).encode()
        self.prepare = prepare

    def rows(
        self, conn: psycopg.Connection[Any], values: dict[str, Any]
    ) -> list[tuple[bytes | None, ...]]:
        """Execute with ``values`` (by placeholder name); the rows in text format."""
        return self._values(self._result(conn, values))

    def typed_rows(self, conn: psycopg.Connection[Any], values: dict[str, Any]) -> list[Any]:
        """Execute with ``values``; the rows as ``cursor.fetchall()`` gives them (Python values,
        loaded by psycopg's own loaders for ``conn``)."""
        result = self._result(conn, values)
        loader = Transformer.from_context(conn)
        loader.set_pgresult(result)
        return loader.load_rows(0, result.ntuples, tuple)

    def _result(self, conn: psycopg.Connection[Any], values: dict[str, Any]) -> pq.abc.PGresult:
        params = [_param(values[name]) for name in self.params]
        with conn.lock:
            if not self.prepare:
                # None is NULL, as psycopg itself sends it (its stubs say otherwise).
                return _check(conn, conn.pgconn.exec_params(self.sql, params))
            kept = _kept(conn)
            for attempt in range(2):
                runs = kept.get(self.name)
                if runs is None or runs >= REPLAN_EVERY:
                    if runs is not None:
                        _check(conn, conn.pgconn.exec_(b"DEALLOCATE " + self.name))
                    else:
                        _make_room(conn, kept)
                    _check(conn, conn.pgconn.prepare(self.name, self.sql))
                    runs = 0
                kept[self.name] = runs + 1
                kept.move_to_end(self.name)
                try:
                    # None is NULL, as psycopg itself sends it (its stubs say otherwise).
                    sent = conn.pgconn.exec_prepared(self.name, params)  # type: ignore[arg-type]
                    return _check(conn, sent)
                except psycopg.errors.InvalidSqlStatementName:
                    # The session lost its prepared statements (DISCARD ALL): prepare again,
                    # and the others when they next run.
                    kept.clear()
                    if attempt:
                        raise
        raise AssertionError("unreachable")

    @staticmethod
    def _values(result: pq.abc.PGresult) -> list[tuple[bytes | None, ...]]:
        return [
            tuple(result.get_value(r, c) for c in range(result.nfields))
            for r in range(result.ntuples)
        ]


def _make_room(conn: psycopg.Connection[Any], kept: OrderedDict[bytes, int]) -> None:
    """Before one more statement is prepared on ``conn`` (under its lock): deallocate the least
    recently used ones past ``MAX_PREPARED``."""
    while len(kept) >= MAX_PREPARED:
        oldest, _ = kept.popitem(last=False)
        try:
            _deallocate(conn, oldest)
        except psycopg.errors.InvalidSqlStatementName:
            kept.clear()  # the session lost its prepared statements (DISCARD ALL)


def _deallocate(conn: psycopg.Connection[Any], name: bytes) -> None:
    """``DEALLOCATE name``; in a transaction (a grouped claim's) under a savepoint, so that
    a statement the session no longer has fails it alone, not the transaction."""
    if conn.pgconn.transaction_status == pq.TransactionStatus.IDLE:
        _check(conn, conn.pgconn.exec_(b"DEALLOCATE " + name))
        return
    savepoint = b"SAVEPOINT jobledger_deallocate; "
    release = b"; RELEASE SAVEPOINT jobledger_deallocate"
    try:
        _check(conn, conn.pgconn.exec_(savepoint + b"DEALLOCATE " + name + release))
    except psycopg.errors.InvalidSqlStatementName:
        back = b"ROLLBACK TO SAVEPOINT jobledger_deallocate" + release
        _check(conn, conn.pgconn.exec_(back))
        raise


def _check(conn: psycopg.Connection[Any], result: pq.abc.PGresult) -> pq.abc.PGresult:
    """``result`` if it succeeded, else the error psycopg would have raised for it (a broken
    connection: ``OperationalError``, with ``conn.broken`` true)."""
    if result.status in _OK:
        return result
    if conn.pgconn.status == pq.ConnStatus.BAD:
        message = conn.pgconn.error_message.decode(errors="replace").strip()
        raise psycopg.OperationalError(message or "the connection to the server was lost")
    raise psycopg.errors.error_from_result(result, encoding=conn.info.encoding)


def run_simple(conn: psycopg.Connection[Any], sql: bytes) -> None:
    """Statements without parameters (``SET LOCAL …``) through libpq directly, in one round
    trip; errors are psycopg's, as from ``cursor.execute``."""
    with conn.lock:
        _check(conn, conn.pgconn.exec_(sql))
