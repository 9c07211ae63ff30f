"""The PostgreSQL database object: psycopg 3 connection pools, transactions, the named
statements (schema-qualified), and the dialect's time converter (PostgreSQL stores
``timestamptz``; without an explicit ``now`` the statements use the database's own clock).

It implements ``backends.database.Database`` for the roles written once for every dialect; this package's
own role classes (the jobs, the grouped claim, what a prune deletes) also use the hot-path
methods ``statement``, ``quick``, ``quickly`` and ``hot``, and ``tables`` and ``channel``.

While the database is down (``outage``: see ``jobledger.backends.outage``) every use fails at
once; the pools are closed when the outage is found, so that nothing waits on them, and made
afresh when a probe finds the database answering again.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

import psycopg
import psycopg.errors
import psycopg_pool
from psycopg import sql as pgsql
from psycopg.conninfo import make_conninfo

from ...errors import BackendUnavailable, ConfigError, SchemaMismatch
from ..database import Fill
from ..outage import Outage
from ..sqlfiles import fill as fill_text
from ..sqlfiles import queries
from ..url import DatabaseURL
from .newjob import NEW_JOB_SQL
from .prepared import PreparedStatement

__all__ = ["CONNECT_TIMEOUT", "NEVER_BY_COUNT", "PostgresDatabase", "first_line", "to_time"]

_T = TypeVar("_T")

CONNECT_TIMEOUT = 10
#: A probe's connect timeout: long enough for a loaded but healthy server to answer, short
#: enough that a server which does not answer at all is soon known to be down.
PROBE_TIMEOUT = 3
#: SQLSTATE of "too many clients": a server that says so is up (its pools may be full).
_TOO_MANY_CONNECTIONS = "53300"

#: The jobledger tables and functions, as ``{name}`` in the named statements.
_TABLES = (
    ("jobs", "attempts", "events", "effects", "migrations", "tombstones")
    + ("leaders", "schedules", "ticks")
    + ("queues", "api_keys", "rate_limits", "publish_requests")
    + ("routes", "outbox")
    + ("minute_stats", "sessions")
    + ("subscriptions",)
    + ("groups", "group_limits")
    + ("group_turns", "group_rows_over")  # functions (migration 017)
    + ("group_turns_from",)  # a function (migration 019)
    + ("group_turns_next",)  # a function (migration 020)
)


def to_time(value: datetime | None) -> datetime | None:
    """A time read from PostgreSQL, in UTC (None stays None)."""
    if value is None:
        return None
    return value if value.tzinfo is UTC else value.astimezone(UTC)


_MISSING_DATABASE = re.compile(r'FATAL:\s+database "([^"]+)" does not exist')


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _fill(text: str, tables: dict[str, str], finish_channel: str, waiters_lock: str) -> str:
    """A named query with its placeholders filled: ``{new_…}`` are the columns of a new job
    (``NEW_JOB_COLUMNS``), ``{now}`` is the caller's explicit time or the database clock,
    ``{finish_channel}`` the channel told of finished jobs and ``{waiters_lock}`` the advisory
    lock that says someone listens on it (literals: made of the schema's name, an identifier),
    ``{jobs}`` and the other table names are schema-qualified."""
    for name, value in NEW_JOB_SQL.items():
        text = text.replace("{" + name + "}", value)
    text = text.replace("{now}", "COALESCE(%(now)s::timestamptz, now())")
    text = text.replace("{finish_channel}", f"'{finish_channel}'")
    text = text.replace("{waiters_lock}", f"hashtextextended('{waiters_lock}', 0)")
    for name, qualified in tables.items():
        text = text.replace("{" + name + "}", qualified)
    return text


#: A claim's queues as rows of scalar parameters, ``queue_0``, ``queue_1``…: one row of
#: ``{queue_rows}``, of ``{position_rows}`` (each queue with its position: see
#: ``job_claim_after`` and cursor.py), and of ``{turn_rows}`` (each queue with the least turn
#: its walk reads: see ``jobledger_group_turns_from`` and grouped.py), as (parameter, type).
_QUEUE_ROW = (("queue", "text"),)
_POSITION_ROW = (
    *_QUEUE_ROW,
    ("after_priority", "bigint"),
    ("after_run_at", "timestamptz"),
    ("after_id", "bigint"),
)
_TURN_ROW = (*_QUEUE_ROW, ("turn_from", "timestamptz"))


def _values(rows: int, row: tuple[tuple[str, str], ...]) -> str:
    cells = (
        "(" + ", ".join(f"%({name}_{i})s::{kind}" for name, kind in row) + ")" for i in range(rows)
    )
    return "(VALUES " + ", ".join(cells) + ")"


def queue_params(queues: Sequence[str]) -> dict[str, str]:
    """The parameters of a claim's ``{queue_rows}`` (``statement(…, queues=len(queues))``)."""
    (name, _), *_ = _QUEUE_ROW
    return {f"{name}_{i}": queue for i, queue in enumerate(queues)}


def turn_params(turns: Sequence[datetime | None]) -> dict[str, Any]:
    """The rest of ``{turn_rows}``, beside ``queue_params``: the least turn each queue's walk
    reads (None: from the start), in the order of its queues."""
    (name, _), *_ = _TURN_ROW[len(_QUEUE_ROW) :]
    return {f"{name}_{i}": turn for i, turn in enumerate(turns)}


def position_params(positions: Sequence[tuple[int, datetime, int]]) -> dict[str, Any]:
    """The rest of ``{position_rows}``, beside ``queue_params``: each queue's position
    (priority, run time, id), in the order of its queues."""
    names = [name for name, _ in _POSITION_ROW[len(_QUEUE_ROW) :]]
    return {
        f"{name}_{i}": value
        for i, position in enumerate(positions)
        for name, value in zip(names, position, strict=True)
    }


#: psycopg prepares a statement after this many runs unless told otherwise: never, here.
NEVER_BY_COUNT = 2**62


def _configure(conn: psycopg.Connection[Any]) -> None:
    # Autocommit: a single-statement write on the hot path (claim, complete, fail,
    # heartbeat) is its own transaction, one round trip instead of BEGIN, it, COMMIT.
    # Several statements that must commit together use ``transaction`` (an explicit one).
    conn.autocommit = True
    # No statement is prepared behind our back. After five runs psycopg would prepare it,
    # and PostgreSQL may then switch to a generic plan, which cannot know how long an array
    # parameter is: for a completion of 500 leases it rescans the 500 (id, token) pairs
    # for every row (a quadratic join, 4-5x the cost of the whole drain). Statements whose
    # generic plan is known to be good ask for ``prepare=True`` (the claims; tests check their
    # plans); the single enqueue has its own prepared statement. A threshold no count reaches,
    # not None: with None psycopg ignores ``prepare=True`` too, and every claim was planned
    # again on every run.
    conn.prepare_threshold = NEVER_BY_COUNT
    conn.execute("SET TIME ZONE 'UTC'")


#: The server's refusals of a value out of range (SQLSTATE 22003, 22008, 22015).
_OUT_OF_RANGE = (
    psycopg.errors.NumericValueOutOfRange,
    psycopg.errors.DatetimeFieldOverflow,
    psycopg.errors.IntervalFieldOverflow,
)


class PostgresDatabase:
    """The connection pools of one PostgreSQL schema. Safe to share between threads."""

    dialect = "postgres"
    to_time = staticmethod(to_time)

    @staticmethod
    def ilike(column: str, placeholder: str) -> str:
        # ILIKE folds the case of any letter of the database's encoding (UTF-8).
        return f"{column} ILIKE {placeholder} ESCAPE '\\'"

    def __init__(self, url: DatabaseURL):
        self.url = url
        self.schema = url.schema
        self.channel = f"jobledger_{self.schema}"
        #: False through a pooler in transaction mode: a statement prepared on one server
        #: session would be executed on another (``pooler=transaction``, see backends/url.py).
        self.prepares = not url.pooled_transactions
        self.resent = 0
        """How many statements ``quick`` has sent a second time (a claim sent again may have
        committed the first time: see ``PostgresJobs._claim``)."""
        #: Told when jobs finish (done, or dead by a worker's failure or the rescuer), once per
        #: batch, with their queue: waiters for results LISTEN here. At most 63 characters
        #: (a schema's name has at most 48).
        self.finish_channel = f"jobledger_{self.schema}_done"
        #: Named in the shared advisory lock each connection listening on ``finish_channel``
        #: holds, so that completions tell only while someone listens.
        self.waiters_lock = f"jobledger:{self.schema}:result-waiters"
        self.tables = {
            name: pgsql.Identifier(self.schema, f"jobledger_{name}").as_string(None)
            for name in _TABLES
        }
        self.sql = {
            name: _fill(text, self.tables, self.finish_channel, self.waiters_lock)
            for name, text in queries("postgres").items()
        }
        self._probe()
        self._closed = False
        self._lock = threading.Lock()
        self._statements: dict[tuple[str, int, int], str] = {}
        self._prepared: dict[tuple[str, int, int], PreparedStatement] = {}
        self.outage = Outage(
            self._answers,
            f"PostgreSQL at {url.redacted}",
            on_down=self._release_pools,
            on_recovery=self._renew_pools,
        )
        self._pool, self._quick_pool = self._new_pools()

    @property
    def label(self) -> str:
        return f"PostgreSQL at {self.url.redacted} (schema {self.schema!r})"

    # -- SQL text and values ---------------------------------------------------------------------

    @staticmethod
    def param(name: str) -> str:
        return f"%({name})s"

    @staticmethod
    def among(
        column: str, name: str, values: Sequence[Any], type: str = "text"
    ) -> tuple[str, dict[str, Any]]:
        return f"{column} = ANY(%({name})s::{type}[])", {name: list(values)}

    @staticmethod
    def clock(now: datetime | None) -> datetime | None:
        """As given: None is the database's clock (``{now}`` in the statements)."""
        return now

    @staticmethod
    def to_db(value: datetime | None) -> datetime | None:
        return value

    @staticmethod
    def from_json(value: Any) -> Any:
        """As psycopg decoded it (``jsonb``)."""
        return value

    # -- connections -----------------------------------------------------------------------------

    def unavailable(self, exc: BaseException) -> BackendUnavailable:
        missing = _MISSING_DATABASE.search(str(exc))
        if missing:
            return BackendUnavailable(
                f"PostgreSQL at {self.url.redacted}: database {missing[1]!r} does not exist; "
                f"create it (createdb {missing[1]}), then run `jobledger migrate`"
            )
        return BackendUnavailable(
            f"PostgreSQL at {self.url.redacted} is unavailable: {first_line(exc)}"
        )

    def _open_pool(
        self, role: str, min_size: int, max_size: int
    ) -> psycopg_pool.ConnectionPool[psycopg.Connection[Any]]:
        return psycopg_pool.ConnectionPool(
            self.conninfo(role),
            min_size=min_size,
            max_size=max_size,
            kwargs={"connect_timeout": CONNECT_TIMEOUT},
            configure=_configure,
            timeout=CONNECT_TIMEOUT,
            open=True,
            name=f"jobledger-{role}",
        )

    def _new_pools(
        self,
    ) -> tuple[
        psycopg_pool.ConnectionPool[psycopg.Connection[Any]],
        psycopg_pool.ConnectionPool[psycopg.Connection[Any]],
    ]:
        """The two pools of statements, which share what ``pool_size`` leaves them (see
        ``ConnectionBudget``). The main pool's connections are checked before use
        (``_connection``); idempotent statements skip that round trip (see ``quick``), and no
        connection of theirs is opened until one is needed."""
        budget = self.url.connection_budget
        return self._open_pool("pool", 1, budget.pool), self._open_pool("quick", 0, budget.quick)

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A live connection of the main pool, checked with one round trip. One found broken
        (the server closed it: a restart, a crash) is given back, and instead of waiting for
        the pool to make another — which never comes while the server is down — the outage's
        probe is asked whether the server is there, which it answers within milliseconds when
        nothing listens: ``BackendUnavailable`` then, else the pool drops its other broken
        connections and the next one is tried."""
        pool = self._pool
        for _ in range(3):
            conn = pool.getconn()
            try:
                psycopg_pool.ConnectionPool.check_connection(conn)
            except psycopg.Error:
                pool.putconn(conn)  # broken: the pool discards it
                self._broken(pool)
                continue
            try:
                yield conn
            finally:
                pool.putconn(conn)
            return
        raise BackendUnavailable(f"PostgreSQL at {self.url.redacted} gives broken connections")

    def _broken(self, pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]]) -> None:
        """A pooled connection was found broken: fail now if the server is down, else have
        the pool check its other connections."""
        self.fail_if_down()
        pool.check()

    def fail_if_down(self) -> None:
        """A connection was found broken: have the outage's probe ask whether the server is
        there (it answers within milliseconds when nothing listens), and raise
        ``BackendUnavailable`` if it is not."""
        self.outage.suspect(now=True)
        self.outage.settle(PROBE_TIMEOUT + 1)
        self.outage.check()

    def _answers(self) -> None:
        """The outage's probe: a fresh connection and one query (raises when the server does
        not answer)."""
        try:
            with psycopg.connect(self.conninfo("probe"), connect_timeout=PROBE_TIMEOUT) as conn:
                conn.execute("SELECT 1")
        except psycopg.OperationalError as exc:
            if exc.sqlstate != _TOO_MANY_CONNECTIONS:
                raise

    def _release_pools(self) -> None:
        """The database is down: close the pools, so that whoever waits on one for a
        connection is answered now (``PoolClosed``) rather than at the pool's timeout."""
        for pool in (self._pool, self._quick_pool):
            pool.close(timeout=1.0)

    def _renew_pools(self) -> None:
        """The database answers again: fresh pools, rather than closed ones or ones waiting
        out their reconnection backoff."""
        with self._lock:
            if self._closed:
                return
            old = (self._pool, self._quick_pool)
            self._pool, self._quick_pool = self._new_pools()
        for pool in old:
            pool.close(timeout=1.0)

    def _probe(self) -> None:
        """Connect once up front so that a wrong URL fails now, with a clear message."""
        try:
            with psycopg.connect(self.conninfo("probe"), connect_timeout=CONNECT_TIMEOUT):
                pass
        except psycopg.Error as exc:
            raise self.unavailable(exc) from None

    def connect(self) -> psycopg.Connection[Any]:
        """A connection of its own, outside the pools, in autocommit (a migration): one of the
        probe's role (``ConnectionBudget``)."""
        return psycopg.connect(
            self.conninfo("probe"), autocommit=True, connect_timeout=CONNECT_TIMEOUT
        )

    def conninfo(self, role: str, conninfo: str | None = None) -> str:
        """``conninfo`` (default: the URL's) for a connection of ``role``: named
        ``jobledger-<role>`` unless the URL names the application (``ConnectionBudget``)."""
        return make_conninfo(conninfo or self.url.conninfo, **self.url.role(role))

    @contextmanager
    def translate(self) -> Iterator[None]:
        """Driver errors inside the block as jobledger's own; while the database is known to be
        down, ``BackendUnavailable`` at once."""
        try:
            self.outage.check()
            yield
        except psycopg.errors.UndefinedTable as exc:
            raise SchemaMismatch(
                f"PostgreSQL at {self.url.redacted} has no jobledger tables in schema "
                f"{self.schema!r} ({first_line(exc)}); run `jobledger migrate`"
            ) from None
        except psycopg_pool.PoolClosed as exc:
            # PoolClosed is a kind of OperationalError: caught first, or the clause below took it.
            if self._closed:
                raise BackendUnavailable(f"the ledger for {self.url.redacted} is closed") from exc
            raise self.unavailable(exc) from None  # closed by an outage: see _release_pools
        except (psycopg.OperationalError, psycopg.InterfaceError, psycopg_pool.PoolTimeout) as exc:
            self.outage.suspect()
            raise self.unavailable(exc) from None
        except _OUT_OF_RANGE as exc:
            # A value a caller gave (a limit, a duration) past what the column or the time
            # arithmetic holds: SQLite takes it, or refuses it in Python, where it is checked.
            raise ConfigError(
                f"a value given is out of PostgreSQL's range: {first_line(exc)}"
            ) from None
        except psycopg.DataError as exc:
            # psycopg's own refusal, before sending: a text with U+0000 (a filter, a note, an
            # actor), which SQLite would store. Its other data errors are the server's, above
            # or for the statement's own caller to catch (the enqueue's "not all keys were new").
            if type(exc) is not psycopg.DataError or "NUL" not in str(exc):
                raise
            raise ConfigError(
                "a text given holds U+0000 (NUL), which PostgreSQL cannot store"
            ) from None

    @contextmanager
    def transaction(self, conn: Any = None) -> Iterator[psycopg.Connection[Any]]:
        """A transaction: our own (committed on success), or a savepoint in the caller's."""
        with self.translate():
            if conn is None:
                with self._connection() as own, own.transaction():
                    yield own
                return
            if not isinstance(conn, psycopg.Connection):
                raise TypeError(
                    f"conn must be a psycopg Connection for {self.url.redacted}, got {type(conn)!r}"
                )
            if (
                not conn.autocommit
                and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            ):
                # Start the caller's transaction, so that ours is a savepoint inside it rather
                # than a transaction of its own that would commit on the caller's behalf.
                conn.execute("SELECT 1")
            with conn.transaction():
                yield conn

    @contextmanager
    def reading(self) -> Iterator[psycopg.Connection[Any]]:
        """A transaction for several reads (one ``now()`` for all of them)."""
        with self.transaction() as c:
            yield c

    def execute(
        self,
        c: psycopg.Connection[Any],
        name: str,
        params: Mapping[str, Any] | None = None,
        **fill: Fill,
    ) -> psycopg.Cursor[Any]:
        # Never prepared, on a caller's connection too (see ``_configure``).
        return c.execute(fill_text(self.sql[name], fill), params, prepare=False)

    def executemany(
        self,
        c: psycopg.Connection[Any],
        name: str,
        rows: Sequence[Mapping[str, Any]],
        **common: Any,
    ) -> int:
        """One statement over arrays: each parameter of ``rows`` as an array of its values."""
        if not rows:
            return 0
        arrays = {key: [row[key] for row in rows] for key in rows[0]}
        return c.execute(self.sql[name], arrays | common, prepare=False).rowcount

    def read(self, name: str, params: Mapping[str, Any] | None = None, **fill: Fill) -> list[Any]:
        return self.run(name, params or {}, **fill)

    def run(
        self, name: str, params: Mapping[str, Any], conn: Any = None, **fill: Fill
    ) -> list[Any]:
        """The named statement in a transaction (the caller's, with ``conn``); its rows."""
        with self.transaction(conn) as c:
            cur = self.execute(c, name, params, **fill)
            return cur.fetchall() if cur.description else []

    def count(self, name: str, params: Mapping[str, Any], conn: Any = None, **fill: Fill) -> int:
        with self.transaction(conn) as c:
            return self.execute(c, name, params, **fill).rowcount

    def statement(self, name: str, limit: int, queues: int = 1) -> str:
        """A named query with ``{limit}`` written in as a literal, and its ``{queue_rows}``,
        ``{position_rows}`` or ``{turn_rows}`` as a VALUES list of ``queues`` rows (see
        ``queue_params``); cached per value."""
        key = (name, limit, queues)
        text = self._statements.get(key)
        if text is None:
            text = self.sql[name].replace("{limit}", str(int(limit)))
            text = text.replace("{queue_rows}", _values(queues, _QUEUE_ROW))
            text = text.replace("{position_rows}", _values(queues, _POSITION_ROW))
            text = text.replace("{turn_rows}", _values(queues, _TURN_ROW))
            self._statements[key] = text
        return text

    def prepared(self, name: str, limit: int, queues: int = 1) -> PreparedStatement:
        """``statement(name, limit, queues)`` as a statement sent through libpq's prepared call
        (``prepared.py``): one object per text, made once across threads (each prepares its
        name once on each connection). Through a pooler (``prepares`` false) it is sent unnamed
        each time."""
        key = (name, limit, queues)
        found = self._prepared.get(key)
        if found is None:
            text = self.statement(name, limit, queues)
            with self._lock:
                found = self._prepared.setdefault(
                    key,
                    PreparedStatement(f"jobledger_{name}_{limit}_{queues}", text, self.prepares),
                )
        return found

    def quick_prepared(self, statement: PreparedStatement, params: dict[str, Any]) -> list[Any]:
        """``quick`` for a ``prepared`` statement: the rows as psycopg gives them, without
        psycopg's execute path around the call (about 0.15 ms a call at idle, measured for the
        claim)."""
        return self.quickly(lambda c: statement.typed_rows(c, params))

    def quick(self, text: str, params: dict[str, Any], prepare: bool | None = None) -> list[Any]:
        """A statement that is safe to send twice, on a connection of the quick pool handed out
        without the round trip that proves it alive. If the server closed the connection (a
        restart, a terminated session) the statement goes again on another (twice at most).
        Safe to send twice: an enqueue by key (the second finds the first), a lease renewal, a
        claim (had the first committed before its reply was lost, nobody holds its jobs'
        tokens: the claimer gives them back, ``PostgresJobs._claim``)."""

        if not self.prepares:
            prepare = False

        def run(c: psycopg.Connection[Any]) -> list[Any]:
            cur = c.execute(text, params, prepare=prepare)
            return cur.fetchall() if cur.description else []

        return self.quickly(run)

    def quickly(
        self,
        run: Callable[[psycopg.Connection[Any]], _T],
        pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]] | None = None,
    ) -> _T:
        """``run`` on a connection of the quick pool (or ``pool``), as ``quick`` runs its
        statement."""
        with self.translate():
            pool = self._quick_pool if pool is None else pool
            for attempt in range(3):
                # getconn and putconn rather than pool.connection(): its ``with conn`` commits
                # on the way out, which on these autocommit connections does nothing but costs
                # a lock and a generator; putconn rolls back or discards a connection left in
                # any other state, as it would have.
                c = pool.getconn()
                try:
                    return run(c)
                except (psycopg.OperationalError, psycopg.InterfaceError):
                    if attempt == 2 or not c.broken:
                        raise
                finally:
                    pool.putconn(c)
                self._broken(pool)  # fail now if the server is down, else drop the others
                self.resent += 1
        raise AssertionError("unreachable")

    def hot(self, text: str, params: dict[str, Any]) -> list[Any]:
        """An outcome statement (a batch's completion or failure) as its own transaction on a
        pooled autocommit connection of the main pool (no BEGIN and COMMIT round trips),
        planned for its parameters each time (see ``_configure``), and sent as ``quick`` sends
        its statements: without the round trip that proves the connection alive, again on
        another if the server closed it. Safe to send twice: a second completion or failure
        of a batch whose first committed is refused by the fence, and the recorder finds each
        attempt closed under its own token as this write closes it (``Jobs.settled``): written,
        not a lost lease."""

        def run(c: psycopg.Connection[Any]) -> list[Any]:
            cur = c.execute(text, params)
            return cur.fetchall() if cur.description else []

        return self.quickly(run, self._pool)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self.outage.close()
                self._pool.close()
                self._quick_pool.close()
