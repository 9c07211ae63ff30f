"""Database work written once, driven synchronously or under asyncio.

A *plan* is a generator that yields what it needs the database to do and receives the rows: a
``Quick`` statement (safe to send twice, on an autocommit connection) or an ``Atomic`` block (a
generator of ``Statement`` and ``Copy`` steps run in one transaction — ours, or a savepoint in
the caller's). An
error of a step is thrown into the plan at the ``yield``, so it catches what it expects
(``except psycopg.errors.…``) as a plain call would. What the plan returns is the result.

``run`` drives a plan over the thread pools of ``PostgresDatabase``;
``aio.PostgresAsyncJobs.run`` drives the same plan over psycopg's async connections. The SQL, the order of the steps and what their
rows mean live in the plan alone (the enqueue: ``PostgresJobs.insert_plan``).
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import psycopg

from .database import PostgresDatabase
from .prepared import PreparedStatement

__all__ = [
    "Atomic",
    "Copy",
    "Done",
    "Plan",
    "Quick",
    "Statement",
    "Step",
    "Steps",
    "next_step",
    "run",
    "run_steps",
]

_T = TypeVar("_T")


class Statement(NamedTuple):
    """One statement of an ``Atomic`` block; the driver sends back its rows (``[]`` when it
    returns none)."""

    text: str
    params: dict[str, Any]


class Copy(NamedTuple):
    """A ``COPY … FROM STDIN`` of an ``Atomic`` block, fed the pieces of ``data`` (rows in its
    text format) in turn, each sent as soon as it is made: the server reads the rows sent while
    the next piece is built. The driver sends back ``[]``."""

    text: str
    data: Iterable[str]


#: The statements of one transaction, and what they come to.
Steps = Generator[Statement | Copy, Any, Any]


@dataclass(frozen=True, slots=True)
class Quick:
    """A statement safe to send twice, as its own transaction (``PostgresDatabase.quick``): sent
    again on another connection if the server closed the first. With ``prepared`` the sync
    driver sends it through libpq's prepared-statement call (rows in text format); the async
    driver has psycopg prepare ``text`` (rows as Python values)."""

    text: str
    params: dict[str, Any]
    prepared: PreparedStatement | None = None


@dataclass(frozen=True, slots=True)
class Atomic:
    """``steps`` in one transaction: our own, committed when they return, or a savepoint in the
    caller's connection. The driver sends back what ``steps`` returns; an error rolls it back."""

    steps: Steps


Step = Quick | Atomic
Plan = Generator[Step, Any, _T]


class Done(NamedTuple):
    """What a plan returned: it needs nothing more."""

    value: Any


def next_step(plan: Plan[_T], answer: Any, error: Exception | None) -> Step | Done:
    """The plan's next step, given the rows of the last one (or the error it raised, thrown
    into the plan); ``Done`` with what the plan returned when it needs nothing more."""
    try:
        return plan.send(answer) if error is None else plan.throw(error)
    except StopIteration as done:
        return Done(done.value)


def run(db: PostgresDatabase, plan: Plan[_T], conn: Any = None) -> _T:
    """Drive ``plan`` in this thread; ``conn`` is the caller's psycopg connection, if any."""
    answer: Any = None
    error: Exception | None = None
    while not isinstance(step := next_step(plan, answer, error), Done):
        answer, error = None, None
        try:
            answer = _step(db, step, conn)
        except Exception as exc:  # noqa: BLE001 - given to the plan, which re-raises or handles
            error = exc
    return step.value  # type: ignore[no-any-return]


def _step(db: PostgresDatabase, step: Step, conn: Any) -> Any:
    if isinstance(step, Quick):
        prepared = step.prepared
        if prepared is not None:
            params = step.params
            return db.quickly(lambda c: prepared.rows(c, params))
        return db.quick(step.text, step.params)
    with db.transaction(conn) as c:
        return run_steps(c, step.steps)


def run_steps(c: psycopg.Connection[Any], steps: Generator[Statement | Copy, Any, _T]) -> _T:
    """Run the statements of ``steps`` on ``c`` (in the transaction the caller holds)."""
    rows: list[Any] | None = None
    while True:
        try:
            statement = steps.send(rows)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        if isinstance(statement, Copy):
            with c.cursor() as cur, cur.copy(statement.text) as copy:
                for piece in statement.data:
                    copy.write(piece)
            rows = []
            continue
        cur = c.execute(statement.text, statement.params, prepare=False)
        rows = cur.fetchall() if cur.description else []
