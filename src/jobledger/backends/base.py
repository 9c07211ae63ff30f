"""The Backend protocol: the only way the rest of jobledger reaches a database.

A backend is its lifecycle (migrations, the schema check, transactions, wake-ups), what it can
do (``supports_listen``: callers ask, they never test the dialect's name) and one object per
storage role, each a small protocol of its own file::

    backend.jobs           insert, publish, claim, heartbeat, complete, fail, release, rescue
    backend.history        jobs as they are and were; redrive, resolve, cancel, prune, purge
    backend.effects        side effects recorded by key, fenced by a lease
    backend.leader         leader leases: acquire, renew, release, fence
    backend.schedules      schedules and their ticks
    backend.outbox         broker routes and outbox records
    backend.subscriptions  push subscriptions
    backend.api            declared queues, API keys, dashboard sessions, rate limits
    backend.groups         group limits, pauses and status
    backend.stats          counts, live depths, per-minute rollups

Methods take plain values. Every method that depends on time takes ``now``; ``None`` means the
database's own clock (PostgreSQL) or the process clock (SQLite). Tests pass an explicit ``now``
instead of sleeping.

Backends translate driver errors into jobledger's own (``BackendUnavailable``, ``KeyConflict``,
…); callers never see psycopg or sqlite3 exceptions.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

from .api import Api
from .effects import Effects
from .groups import Groups
from .history import History
from .jobs import AsyncJobs, Jobs
from .leader import Leader
from .outbox import Outbox
from .schedules import Schedules
from .stats import Stats
from .subscriptions import Subscriptions
from .url import DatabaseURL

__all__ = ["ANY_QUEUE", "Backend", "FinishListener", "Listener"]

#: In what ``FinishListener.wait_finished`` returns: any queue may have had a job finish.
ANY_QUEUE = "*"


class Listener(Protocol):
    """A wake-up channel: ``wait`` returns True when work may have arrived."""

    def wait(self, timeout: float) -> bool: ...

    def woken(self, timeout: float) -> set[str]:
        """The queues work may have arrived in within ``timeout`` seconds (``{ANY_QUEUE}``: any
        of ours may have), or an empty set."""
        ...

    def add(self, queue: str) -> None:
        """Listen for ``queue`` too."""
        ...

    def close(self) -> None: ...


class FinishListener(Protocol):
    """Told when jobs finish (done, or dead by a failure or the rescuer) in any process."""

    def wait_finished(self, timeout: float) -> set[str] | None:
        """The queues in which jobs finished within ``timeout`` seconds (``{ANY_QUEUE}``: any
        may have), or None when none did."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Backend(Protocol):
    """What a database must do for jobledger. SQLite and PostgreSQL implement it."""

    url: DatabaseURL
    dialect: str

    # -- the storage roles ---------------------------------------------------------------------

    jobs: Jobs
    history: History
    effects: Effects
    leader: Leader
    schedules: Schedules
    outbox: Outbox
    subscriptions: Subscriptions
    api: Api
    groups: Groups
    stats: Stats

    # -- capabilities --------------------------------------------------------------------------

    @property
    def supports_listen(self) -> bool:
        """True when the database can push wake-ups (PostgreSQL LISTEN/NOTIFY)."""
        ...

    def async_jobs(self) -> AsyncJobs | None:
        """A new asyncio enqueue over this database (its own connections, opened on first use
        on the running loop), or None when the driver has no asyncio API: callers then run
        ``jobs.insert`` on a thread."""
        ...

    # -- lifecycle -----------------------------------------------------------------------------

    def migrate(self, conn: Any = None) -> list[str]:
        """Apply the migrations this database lacks, in order; return their names. Reads what
        is applied without taking a write lock, so a migrated database is never locked for it.
        ``conn``: the application's connection of the enqueue that is the ledger's first use
        (see docs/backends.md, "The schema on first use")."""
        ...

    def schema_version(self) -> int:
        """The highest migration applied, 0 for an empty database."""
        ...

    def applied_migrations(self) -> set[int]:
        """The versions of the migrations applied to this database."""
        ...

    def check_schema(self) -> None:
        """Raise ``SchemaMismatch`` unless the schema is exactly the one this code knows."""
        ...

    def schema_drop(self) -> None:
        """Drop every jobledger table of this database — and, on PostgreSQL, its schema unless
        that is ``public``. For throw-away databases (the demo); never called by operators'
        commands."""
        ...

    def close(self) -> None: ...

    def transaction(self) -> AbstractContextManager[Any]:
        """An open transaction on a connection of this backend's own; commits on success."""
        ...

    def listener(self, queues: Sequence[str]) -> Listener | None:
        """A wake-up channel for these queues, or None when ``supports_listen`` is False."""
        ...

    def finish_listener(self) -> FinishListener | None:
        """A channel told when jobs finish, or None when ``supports_listen`` is False (then
        waiters for results poll)."""
        ...
