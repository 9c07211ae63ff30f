"""The scheduler: one authority per cohort, holding a leader lease in the ledger, records ticks.

Each pass, for each cohort of schedules:

1. hold the cohort's leader lease — take it when it is free or expired, renew it when a third
   of it has passed. Whoever does not hold it does nothing for that cohort;
2. for each schedule that is not paused, list the ticks after its cursor that are due now, and
   let the catch-up policy choose which to run (on-time ticks and half-finished ones always run);
3. run each chosen tick: record it (unique on ``(schedule, tick_time)``), ask the eligibility
   function for the entities, and enqueue their jobs in batches. Each batch is one transaction
   that first checks the lease (``backend.leader.fence``), then enqueues, then adds the batch's counts to
   the tick's row. Then the tick is marked done and the cursor moves past it.

A scheduler that dies half-way leaves its tick ``running``; the next leader runs it again from
the start, and the keys make the repeat create only the jobs that are missing.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from .._faults import fault_point
from .._host import default_worker_name
from .._records import JobSpec, LeaderLease, TickRow, TickState, explicit_now
from ..errors import BackendUnavailable, ConfigError, LeadershipLost, PayloadError
from ..scheduling.schedule import Entity, Schedule, leader_name
from .leader import LeaderElection
from .looper import Looper

if TYPE_CHECKING:
    from .._records import InsertResult
    from ..backends.base import Backend
    from ..scheduling.schedule import ScheduleBook

__all__ = ["Scheduler", "SchedulerPass", "scheduler_service"]

log = logging.getLogger("jobledger.scheduler")


class SchedulerHost(Protocol):
    """What a scheduler needs of its ledger (``jobledger.Ledger`` is one)."""

    @property
    def backend(self) -> Backend: ...

    @property
    def schedules(self) -> ScheduleBook: ...

    @property
    def enqueue_many(self) -> Callable[..., list[InsertResult]]:
        """``Ledger.enqueue_many``: a tick's batch, in the scheduler's fenced transaction."""
        ...


class WorkerLike(Protocol):
    """The worker a scheduler runs beside: its name and its clock."""

    name: str
    clock: Callable[[], datetime] | None


_MAX_RETRY_DELAY = 300.0


@dataclass
class SchedulerPass:
    """What one pass of a scheduler did."""

    leading: list[str] = field(default_factory=list)
    """The cohorts whose lease this scheduler held."""
    ticks: list[TickRow] = field(default_factory=list)
    """The ticks it finished."""
    skipped: int = 0
    """Missed ticks the catch-up policies skipped."""
    errors: list[str] = field(default_factory=list)
    """Ticks that failed (their eligibility function, payload or key raised); tried again."""

    @property
    def jobs_created(self) -> int:
        return sum(t.jobs_created for t in self.ticks)


class Scheduler(Looper):
    """Runs a ledger's schedules while it holds their cohort's leader lease.

    Workers run one by default (see ``ledger.schedules.run_in_workers``); ``jobledger
    scheduler`` runs one alone. ``run_once(now=...)`` does a single pass with an explicit clock.

    - ``cohorts``: which cohorts to run (default: those of every declared schedule);
    - ``name``: how this scheduler is named in leases and ticks (default ``host:pid:random``);
    - ``lease_seconds``: the leader lease; another scheduler takes over within this long after
      the leader dies (default ``ledger.schedules.lease_seconds``, 30);
    - ``poll_interval``: seconds between passes (default 1); ticks run at most this late;
    - ``clock``: a function returning the time (default: the database's clock).
    """

    kind = "scheduler"

    def __init__(
        self,
        ledger: SchedulerHost,
        *,
        cohorts: Sequence[str] | None = None,
        name: str | None = None,
        lease_seconds: float | None = None,
        poll_interval: float | None = None,
        clock: Callable[[], datetime] | None = None,
    ):
        book = ledger.schedules
        self.ledger = ledger
        self.name = name or default_worker_name()
        self.lease_seconds = _positive(
            lease_seconds if lease_seconds is not None else book.lease_seconds, "lease_seconds"
        )
        self.poll_interval = _positive(
            poll_interval if poll_interval is not None else book.poll_interval, "poll_interval"
        )
        self.clock = clock if clock is not None else book.clock
        if self.clock is None and self.poll_interval > self.lease_seconds / 3:
            raise ConfigError(
                f"poll_interval ({self.poll_interval} s) must be at most a third of "
                f"lease_seconds ({self.lease_seconds} s): the leader renews between passes"
            )
        known = set(book.cohorts())
        self._cohorts = sorted(set(cohorts)) if cohorts else None
        unknown = set(self._cohorts or ()) - known
        if unknown:
            raise ConfigError(
                f"no schedule is declared in cohort(s) {', '.join(sorted(unknown))}; declared "
                f"cohorts: {', '.join(sorted(known)) or 'none'}"
            )
        self._elections: dict[str, LeaderElection] = {}
        self._declared: dict[str, tuple[str, frozenset[str]]] = {}
        self._failures: dict[str, tuple[int, datetime]] = {}
        self._pass_now: datetime | None = None
        super().__init__(self.poll_interval, max_backoff=self.lease_seconds / 3)

    def __repr__(self) -> str:
        return f"<Scheduler {self.name} cohorts={self.cohorts}>"

    @property
    def cohorts(self) -> list[str]:
        """The cohorts this scheduler runs: those it was given, or every declared one."""
        return self._cohorts if self._cohorts is not None else self.ledger.schedules.cohorts()

    @property
    def backend(self) -> Backend:
        return self.ledger.backend

    # -- time ------------------------------------------------------------------------------------

    def _now(self) -> datetime | None:
        """The time to hand the database: explicit, or None for its own clock."""
        if self._pass_now is not None:
            return self._pass_now
        return self.clock() if self.clock is not None else None

    def _py_now(self, cohort: str) -> datetime:
        """The time to decide what is due: explicit, or the database's clock as of the lease's
        last statement plus the time that has passed here since."""
        return self._election(cohort).database_now(self._now())

    # -- leases ----------------------------------------------------------------------------------

    def _election(self, cohort: str) -> LeaderElection:
        election = self._elections.get(cohort)
        if election is None:
            election = self._elections[cohort] = LeaderElection(
                lambda: self.backend.leader,
                leader_name(cohort),
                self.name,
                self.lease_seconds,
                self._now,
                label=f"scheduler {self.name}",
                what=f"cohort {cohort!r}",
            )
        return election

    @property
    def leading(self) -> list[str]:
        """The cohorts whose lease this scheduler believes it holds."""
        return sorted(c for c in self.cohorts if self._election(c).leading)

    def _hold(self, cohort: str) -> LeaderLease | None:
        return self._election(cohort).hold(self._now())

    def _keep(self, cohort: str) -> LeaderLease:
        """The cohort's lease, renewed if a third of it has passed; ``LeadershipLost`` if gone."""
        try:
            return self._election(cohort).keep(self._now())
        except LeadershipLost:
            self._declared.pop(cohort, None)
            raise

    def _lost(self, cohort: str) -> None:
        self._election(cohort).lost()
        self._declared.pop(cohort, None)

    def release(self, now: datetime | None = None) -> None:
        """Give up every lease now, so that another scheduler takes over at its next pass."""
        for election in self._elections.values():
            election.release(now or self._now())
        self._declared.clear()

    # -- passes ----------------------------------------------------------------------------------

    def run_once(self, now: datetime | None = None) -> SchedulerPass:
        """One pass over every cohort; ``now`` overrides the clock for this pass."""
        self._pass_now = explicit_now(now)
        result = SchedulerPass()
        try:
            for cohort in self.cohorts:
                if self._stop.is_set():
                    break
                lease = self._hold(cohort)
                if lease is None:
                    continue
                result.leading.append(cohort)
                try:
                    self._run_cohort(cohort, result)
                except LeadershipLost:
                    self._lost(cohort)
                    result.leading.remove(cohort)
        finally:
            self._pass_now = None
        return result

    def _declare(self, cohort: str, schedules: list[Schedule]) -> None:
        lease = self._keep(cohort)
        names = frozenset(s.name for s in schedules)
        if self._declared.get(cohort) == (lease.token, names):
            return
        self.backend.schedules.declare([s.definition() for s in schedules], lease, self._now())
        self._declared[cohort] = (lease.token, names)

    def _run_cohort(self, cohort: str, result: SchedulerPass) -> None:
        schedules = self.ledger.schedules.declared([cohort])
        self._declare(cohort, schedules)
        rows = {row.name: row for row in self.backend.schedules.all()}
        for schedule in schedules:
            if self._stop.is_set():
                return
            row = rows.get(schedule.name)
            if row is None or row.paused:
                continue
            self._keep(cohort)
            now = self._py_now(cohort)
            failed = self._failures.get(schedule.name)
            if failed is not None and now < failed[1]:
                continue
            self._run_schedule(cohort, schedule, row.cursor, now, result)

    def _run_schedule(
        self,
        cohort: str,
        schedule: Schedule,
        cursor: datetime,
        now: datetime,
        result: SchedulerPass,
    ) -> None:
        due, truncated = schedule.spec.ticks_between(cursor, now)
        if not due:
            return
        started = [
            t.tick_time
            for t in self.backend.schedules.ticks(
                schedule.name, limit=10_000, state=TickState.RUNNING, after=cursor
            )
        ]
        # More ticks are due than one pass enumerates: they are all long missed. Skip this
        # stretch (finishing any started tick in it); the policy applies where it ends.
        chosen = set(
            [t for t in due if t in set(started)] if truncated else schedule.plan(due, started, now)
        )
        skipped, last_skipped = 0, None
        for tick_time in due:
            if tick_time not in chosen:
                skipped, last_skipped = skipped + 1, tick_time
                continue
            if last_skipped is not None:
                self._skip(cohort, schedule, last_skipped, skipped, result)
                skipped, last_skipped = 0, None
            if not self._run_tick(cohort, schedule, tick_time, result):
                return
        if last_skipped is not None:
            self._skip(cohort, schedule, last_skipped, skipped, result)

    def _skip(
        self,
        cohort: str,
        schedule: Schedule,
        to: datetime,
        count: int,
        result: SchedulerPass,
    ) -> None:
        self.backend.schedules.advance(schedule.name, to, count, self._keep(cohort), self._now())
        result.skipped += count
        log.warning(
            "schedule %r: skipped %d missed tick(s) up to %s (catch_up=%s)",
            schedule.name,
            count,
            _iso(to),
            schedule.catch_up.value,
        )

    def _run_tick(
        self, cohort: str, schedule: Schedule, tick_time: datetime, result: SchedulerPass
    ) -> bool:
        """Run one tick to the end; False when it stopped early (stopping, or an error)."""
        row = self.backend.schedules.tick_start(
            schedule.name, tick_time, self._keep(cohort), self._now()
        )
        if row.state is TickState.DONE:
            self.backend.schedules.advance(
                schedule.name, tick_time, 0, self._keep(cohort), self._now()
            )
            return True
        if row.runs > 1:
            log.info(
                "schedule %r: resuming tick %s (run %d; %d jobs created before)",
                schedule.name,
                _iso(tick_time),
                row.runs,
                row.jobs_created,
            )
        tick = schedule.tick(tick_time)
        try:
            prepare = getattr(schedule.target, "prepare", None)
            if prepare is not None:
                # A target that needs something in the ledger first (HttpTarget: its
                # subscription) says so here; an error fails the tick, which is retried.
                prepare(self.ledger, tick)
            entities: Iterable[Entity | None] = (
                schedule.for_each(tick) if schedule.for_each is not None else [None]
            )
            for batch in _batches(entities, schedule.batch_size):
                if self._stop.is_set():
                    return False
                self._enqueue(cohort, schedule, tick, batch)
                fault_point("scheduler.after_batch")
        except (LeadershipLost, BackendUnavailable):
            raise
        except Exception as exc:  # the application's eligibility, payload or key code
            self._failed(schedule, tick_time, exc, result)
            return False
        fault_point("scheduler.before_finish")
        done = self.backend.schedules.tick_finish(
            schedule.name, tick_time, self._keep(cohort), self._now()
        )
        self._failures.pop(schedule.name, None)
        result.ticks.append(done)
        log.info(
            "schedule %r: tick %s done, %d job(s) created (%d existed)",
            schedule.name,
            _iso(tick_time),
            done.jobs_created,
            done.jobs_existing,
        )
        return True

    def _enqueue(
        self, cohort: str, schedule: Schedule, tick: Any, batch: Sequence[Entity | None]
    ) -> None:
        target = schedule.target
        correlation = f"{schedule.name}:{tick.iso}"
        specs = []
        for entity in batch:
            if entity is not None and (
                isinstance(entity, bool) or not isinstance(entity, str | int)
            ):
                raise PayloadError(
                    f"the eligibility function of schedule {schedule.name!r} yielded "
                    f"{entity!r}; it must yield entity ids (str or int)"
                )
            specs.append(
                JobSpec(
                    payload=target.payload(tick, entity),
                    key=schedule.key_for(tick, entity),
                    correlation_id=correlation,
                )
            )
        backend = self.backend
        with backend.transaction() as conn:
            self._election(cohort).fence(conn, self._now())
            results = self.ledger.enqueue_many(
                target.task,
                specs,
                queue=target.queue,
                conn=conn,
                on_conflict="report",
                now=self._now(),
            )
            created = sum(1 for r in results if r.created)
            conflicts = sum(1 for r in results if r.conflict)
            backend.schedules.tick_progress(
                schedule.name,
                tick.time,
                created,
                len(results) - created - conflicts,
                conflicts,
                conn,
            )
        if conflicts:
            log.warning(
                "schedule %r tick %s: %d key(s) exist with a different payload; left as they were",
                schedule.name,
                tick.iso,
                conflicts,
            )

    def _failed(
        self, schedule: Schedule, tick_time: datetime, exc: Exception, result: SchedulerPass
    ) -> None:
        count = self._failures.get(schedule.name, (0, tick_time))[0] + 1
        delay = min(_MAX_RETRY_DELAY, self.poll_interval * 2**count)
        lease_now = self._now() or datetime.now(UTC)
        self._failures[schedule.name] = (count, lease_now + timedelta(seconds=delay))
        message = f"{type(exc).__name__}: {exc}"
        result.errors.append(f"{schedule.name} {_iso(tick_time)}: {message}")
        log.error(
            "schedule %r: tick %s failed (%s); trying again in %.0f s",
            schedule.name,
            _iso(tick_time),
            message,
            delay,
            exc_info=exc,
        )
        with contextlib.suppress(BackendUnavailable):
            self.backend.schedules.tick_error(schedule.name, tick_time, message, self._now())

    # -- running ---------------------------------------------------------------------------------

    def run(self) -> None:
        """Pass after pass until ``stop()``; then give the leases up."""
        log.info(
            "scheduler %s started for cohort(s) %s (lease %.0f s, poll %.2f s)",
            self.name,
            ", ".join(self.cohorts) or "none",
            self.lease_seconds,
            self.poll_interval,
        )
        super().run()

    def stopped(self) -> None:
        self.release()
        log.info("scheduler %s stopped", self.name)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the current batch and release the leases. Safe from a signal handler when
        the scheduler runs in another thread."""
        super().stop(timeout)


def scheduler_service(ledger: SchedulerHost, worker: WorkerLike) -> Scheduler | None:
    """The worker service (see ``ledger.worker_services``) that runs the ledger's schedules in
    each worker, unless ``ledger.schedules.run_in_workers`` is off."""
    book = ledger.schedules
    if not book.run_in_workers or not len(book):
        return None
    return Scheduler(ledger, name=worker.name, clock=worker.clock or book.clock)


def _batches(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def _positive(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"{what} must be a number of seconds > 0, got {value!r}")
    return float(value)


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%MZ")
