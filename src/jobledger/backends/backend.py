"""What a backend of either dialect is: the storage roles over its database object, and the
parts of the lifecycle that do not depend on the dialect. Each dialect's backend adds
``migrate``, ``schema_drop`` and its capabilities (``supports_listen``, ``listener``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..errors import SchemaMismatch
from .api import Api
from .base import FinishListener, Listener
from .database import Database
from .effects import Effects
from .groups import Groups
from .history import History
from .jobs import AsyncJobs, Jobs
from .leader import Leader
from .outbox import Outbox
from .schedules import Schedules
from .sqlfiles import schema_problem
from .stats import Stats
from .subscriptions import Subscriptions
from .url import DatabaseURL

__all__ = ["SqlBackend"]


class SqlBackend:
    """The roles of a backend, composed over one database object. The dialect gives the two
    roles that are its own: the jobs (the hot path) and the history (whose prune it does)."""

    dialect: str
    #: True when ``listener`` gives wake-ups; each dialect says what it can do.
    supports_listen: bool

    def __init__(self, url: DatabaseURL, db: Database, jobs: Jobs, history: History):
        self.url = url
        self._database = db
        leader = Leader(db)
        self.jobs: Jobs = jobs
        self.history: History = history
        self.leader: Leader = leader
        self.schedules: Schedules = Schedules(db, leader)
        self.outbox: Outbox = Outbox(db, leader)
        self.effects: Effects = Effects(db)
        self.subscriptions: Subscriptions = Subscriptions(db)
        self.api: Api = Api(db)
        self.groups: Groups = Groups(db)
        self.stats: Stats = Stats(db)

    def listener(self, queues: Sequence[str]) -> Listener | None:
        """None: without wake-ups, workers poll (see ``supports_listen``)."""
        return None

    def finish_listener(self) -> FinishListener | None:
        """None: without wake-ups, waiters for results poll."""
        return None

    def async_jobs(self) -> AsyncJobs | None:
        """None: the driver has no asyncio API (see ``Backend.async_jobs``)."""
        return None

    # -- lifecycle -------------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        with self._database.transaction() as conn:
            yield conn

    def close(self) -> None:
        self._database.close()

    def applied_migrations(self) -> set[int]:
        try:
            return {int(r[0]) for r in self._database.read("migration_versions")}
        except SchemaMismatch:
            return set()

    def schema_version(self) -> int:
        return max(self.applied_migrations(), default=0)

    def check_schema(self) -> None:
        problem = schema_problem(self.dialect, self.applied_migrations(), self._database.label)
        if problem:
            raise SchemaMismatch(problem)
