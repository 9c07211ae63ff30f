"""``Ledger``: the entry point. Tasks, enqueue, workers, and the operator's actions."""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Literal, TypedDict, Unpack, overload

from ._connections import raw_connection
from ._records import (
    MAX_KEY_LENGTH,
    Attempt,
    Enqueued,
    Event,
    GroupLimits,
    GroupStatus,
    InsertResult,
    JobFilter,
    JobRow,
    JobSpec,
    JobState,
    NewJob,
    PruneResult,
    QueueStats,
    RescueResult,
    aware_time,
    encode_payload,
    explicit_now,
    finite_number,
    job_id_number,
    keepable_time_after,
    lookup_text,
    operator_text,
    time_after,
    validate_correlation_id,
    validate_group,
    validate_key,
    whole_number,
)
from ._runtime.hooks import WorkerObserver, WorkerService
from ._services.finishes import FinishWatch
from ._services.health import Health
from ._services.jobs import JobReads
from ._services.keys import Keys
from ._services.listen import Listening
from ._services.publish import Publishing
from ._services.queues import QueueSettingsBook
from ._services.ratelimits import RateLimits
from ._services.sessions import Sessions
from ._services.stats import MinuteStatsBook
from ._services.subscriptions import Subscriptions
from ._signals import relayed_signals
from ._task import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_QUEUE,
    KeyRule,
    Task,
    validate_max_attempts,
    validate_queue_name,
)
from .backends import DEFAULT_URL, DatabaseURL, open_backend
from .backends.base import Backend
from .backends.url import REQUIRE_URL_ENV, default_url_refused
from .errors import (
    ConfigError,
    InvalidTransition,
    JobFailed,
    NotFound,
    PayloadError,
    ResultNotReady,
    ResultTimeout,
)
from .observability.tracing import current_trace_context
from .policy import DEFAULT_BACKOFF, Backoff

if TYPE_CHECKING:
    from ._runtime.hooks import AttemptTracer
    from ._runtime.outcomes import Observers
    from ._runtime.pull import PullLeases
    from ._runtime.worker import Worker, WorkerStats
    from .maintenance.pruner import Pruner
    from .maintenance.rescuer import Rescuer
    from .maintenance.scheduler import Scheduler
    from .scheduling.schedule import ScheduleBook, Tick

__all__ = [
    "DEFAULT_KEEP_KEYS",
    "DEFAULT_URL",
    "REQUIRE_URL_ENV",
    "JobHistory",
    "Ledger",
    "RedriveResult",
    "refuse_default_url",
]

log = logging.getLogger("jobledger.ledger")

_INT32 = 2**31 - 1

DEFAULT_KEEP_KEYS = timedelta(days=365)
"""How long the key of a pruned job keeps blocking duplicates, counted from when it finished."""


@dataclass(frozen=True)
class JobHistory:
    """A job with everything that happened to it: attempts, operator events, recorded effects."""

    job: JobRow
    attempts: list[Attempt]
    events: list[Event]
    effects: list[dict[str, Any]]


@dataclass(frozen=True)
class RedriveResult:
    """What a redrive moved (or, with ``dry_run``, would move)."""

    ids: list[int]
    dry_run: bool
    skipped: list[int] = field(default_factory=list)
    """Ids that matched but were no longer dead or cancelled when their turn came."""
    left: list[int] = field(default_factory=list)
    """Ids that matched and were not reached because ``stop`` was set: still as they were."""


class TaskOptions(TypedDict, total=False):
    """The options of ``Ledger.task`` (described there)."""

    name: str | None
    queue: str
    max_attempts: int
    lease_seconds: float
    backoff: Backoff | None
    priority: int
    key: KeyRule
    group: KeyRule
    timeout: float | None


class Ledger:
    """A durable job ledger on one database.

    ``Ledger()`` reads ``JOBLEDGER_URL``, else uses ``sqlite:///jobledger.db`` and says so in a
    warning naming the file, when the database is first opened; ``JOBLEDGER_REQUIRE_URL=1``
    makes that first open raise ``ConfigError`` instead. Nothing touches
    the database until first use (or ``open()``); then the schema is created or upgraded
    (``auto_migrate``) and checked. ``create=False`` refuses to create a SQLite file that does not
    exist; with ``auto_migrate=False`` too, nothing is ever created (the CLI opens it so, so that
    a mistyped URL is an error rather than a new, empty ledger).

    ``listen_url`` (else ``JOBLEDGER_LISTEN_URL``, for a PostgreSQL ledger) is where LISTEN
    sessions connect when not to the URL itself: a direct URL of the same database when the URL
    goes through a pooler in transaction mode (``?pooler=transaction``; docs/deployment.md).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        auto_migrate: bool = True,
        create: bool = True,
        listen_url: str | None = None,
    ):
        raw = url or os.environ.get("JOBLEDGER_URL")
        self.url = DatabaseURL.parse(raw or DEFAULT_URL)
        # Said (or refused) when the database is opened, not here: a URL set later by
        # use_url (the CLI's --url for an app's module-level Ledger()) is not a default.
        self._url_defaulted = not raw
        self._listen_url = listen_url
        if listen_url is None and self.url.dialect == "postgres":
            self._listen_url = os.environ.get("JOBLEDGER_LISTEN_URL")
        self.url = self.url.listening_at(self._listen_url)
        self.auto_migrate = auto_migrate
        self.create = create
        self._backend: Backend | None = None
        self._open_lock = threading.Lock()
        self._tasks: dict[str, Task] = {}
        self._wakes: weakref.WeakSet[threading.Event] = weakref.WeakSet()
        self.default_backoff = DEFAULT_BACKOFF
        self.observers: list[WorkerObserver] = []
        """Told what this ledger's workers do (metrics, logs); see ``jobledger.WorkerObserver``."""
        self._pruning = False
        self.worker_services: list[Callable[[Worker], WorkerService | None]] = []
        """Factories of services each worker runs beside itself (the scheduler, metrics)."""
        self._schedules: ScheduleBook | None = None
        # The services the HTTP API and the CLI reach the storage through (jobledger._services).
        self.queue_settings = QueueSettingsBook(self)
        self.keys = Keys(self)
        self.sessions = Sessions(self)
        self.subscriptions = Subscriptions(self)
        self.publishing = Publishing(self)
        self.rate_limits = RateLimits(self)
        self.job_reads = JobReads(self)
        self.minute_stats = MinuteStatsBook(self)
        self.listening = Listening(self)
        self.finishes = FinishWatch(self)
        self.health = Health(self)
        self.result_poll_interval: float | None = None
        """The longest pause between two looks at a job while ``result`` waits for it, in
        seconds. None: 0.25 s where the database cannot tell of finished jobs (SQLite: the
        pauses start at 10 ms and double up to it), 2 s where it can (PostgreSQL's LISTEN wakes
        the waiter; looking again anyway covers a notification missed while the connection was
        made again, and an operator's cancel, which tells no one)."""

    def __repr__(self) -> str:
        return f"Ledger({self.url.redacted!r})"

    @property
    def schedules(self) -> ScheduleBook:
        """The cron schedules declared with ``@ledger.schedule``, and the operator's view of
        those in the ledger (status, ticks, pause, resume); see docs/scheduling.md."""
        if self._schedules is None:
            # The scheduling stack (cron, time zones) is imported by the ledgers that use it.
            from .scheduling.schedule import ScheduleBook

            with self._open_lock:
                if self._schedules is None:
                    self._schedules = ScheduleBook(self)
        return self._schedules

    # -- the database ------------------------------------------------------------------------------

    @property
    def backend(self) -> Backend:
        """The open backend; opening (and migrating) on first use."""
        return self._backend or self._open()

    def _open(self, conn: Any = None) -> Backend:
        """Open the backend, migrate it (``auto_migrate``) and check its schema. ``conn`` is the
        application's connection when the first use is an enqueue in its transaction: a
        migrated database is then checked without the write lock that transaction holds."""
        with self._open_lock:
            if self._backend is None:
                self._say_default_url()
                backend = open_backend(self.url, create=self.create)
                try:
                    if self.auto_migrate:
                        backend.migrate(conn)
                    backend.check_schema()
                except BaseException:
                    backend.close()
                    raise
                self._backend = backend
            return self._backend

    def open(self) -> Ledger:
        """Open the database now rather than on first use (migrating it with ``auto_migrate``),
        so that a wrong URL or a missing schema fails here; return the ledger."""
        if self._backend is None:
            self._open()
        return self

    def _say_default_url(self) -> None:
        """Before the default database is first opened: refuse it if the deployment says so,
        else name the file in one warning (a worker misconfigured in production would otherwise
        idle on an empty file without a word)."""
        if not self._url_defaulted:
            return
        refuse_default_url()
        log.warning(
            "no database URL given (Ledger(url) or JOBLEDGER_URL): using the SQLite file %s; "
            "%s=1 refuses this default",
            self.url.sqlite_path.resolve(),
            REQUIRE_URL_ENV,
        )
        self._url_defaulted = False

    def schema_version(self) -> int:
        """The highest migration applied to the database, 0 when it has none."""
        return self.backend.schema_version()

    def use_url(self, url: str) -> None:
        """Point this ledger at another database (before first use), e.g. from ``--url``."""
        if self._backend is not None:
            raise ConfigError("the ledger is already open; set its URL before first use")
        parsed = DatabaseURL.parse(url)
        self.url = parsed.listening_at(self._listen_url if parsed.dialect == "postgres" else None)
        self._url_defaulted = False

    def use_listen_url(self, listen_url: str | None) -> None:
        """Where LISTEN sessions connect (before first use), e.g. from ``--listen-url``: a
        direct URL of the same PostgreSQL database when the ledger's URL goes through a pooler
        in transaction mode (docs/deployment.md)."""
        if self._backend is not None:
            raise ConfigError("the ledger is already open; set its listen URL before first use")
        # A SQLite ledger has nothing to listen on: a listen URL set for the PostgreSQL
        # deployment (JOBLEDGER_LISTEN_URL) does not make its commands fail.
        if listen_url and self.url.dialect == "postgres":
            self._listen_url = listen_url
            self.url = self.url.listening_at(listen_url)

    def migrate(self) -> list[str]:
        """Create or upgrade the schema; return the migrations applied now."""
        if self._backend is None:
            self._say_default_url()
        backend = self._backend or open_backend(self.url, create=True)
        applied = backend.migrate()
        if self._backend is None:
            backend.check_schema()
            self._backend = backend
        return applied

    def close(self) -> None:
        self.finishes.close()
        with self._open_lock:
            if self._backend is not None:
                self._backend.close()
                self._backend = None

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- tasks -------------------------------------------------------------------------------------

    @overload
    def task(self, fn: Callable[..., Any], /, **options: Unpack[TaskOptions]) -> Task: ...

    @overload
    def task(
        self, fn: None = None, /, **options: Unpack[TaskOptions]
    ) -> Callable[[Callable[..., Any]], Task]: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        backoff: Backoff | None = None,
        priority: int = 0,
        key: KeyRule = None,
        group: KeyRule = None,
        timeout: float | None = None,
    ) -> Task | Callable[[Callable[..., Any]], Task]:
        """Register a handler, sync or async: ``@ledger.task(queue="digests", max_attempts=8)``.

        - ``name``: stored in each job; defaults to the function's name. Unique per ledger.
        - ``queue``: where its jobs wait (default ``"default"``).
        - ``max_attempts``: the retry budget, lease expiries included (default 10).
        - ``lease_seconds``: how long an attempt may run unrenewed (default 60; the worker
          renews every third of it while the handler runs).
        - ``backoff``: delays between attempts (default ``Backoff(base=2, cap=3600)``, full jitter).
        - ``priority``: default priority of its jobs (higher runs first).
        - ``key``: how to derive a job's key from its payload when ``enqueue`` is given none:
          a format string such as ``"{customer_id}:{week}"`` or a function of the payload.
        - ``group``: the group (tenant) of a job when ``enqueue`` is given none, the same way:
          e.g. ``"{customer_id}"``. Groups share a queue fairly; see ``set_group_limits``.
        - ``timeout``: the longest an attempt may run, in seconds (default: no bound). An
          attempt that runs past it is recorded as ``timed_out``, its lease is no longer
          renewed, and the job is retried by its backoff or parked dead when its attempts are
          spent; whatever the abandoned handler writes later is refused by the fence. Async
          handlers are cancelled; a sync handler's thread cannot be (see docs/concepts.md).
        """

        def register(func: Callable[..., Any]) -> Task:
            task = Task(
                fn=func,
                name=name or func.__name__,
                queue=queue,
                max_attempts=max_attempts,
                lease_seconds=lease_seconds,
                backoff=backoff or self.default_backoff,
                priority=_priority(priority),
                key=key,
                group=group,
                timeout=timeout,
                ledger=self,
            )
            existing = self._tasks.get(task.name)
            if existing is not None and existing.fn is not func:
                raise ConfigError(
                    f"a task named {task.name!r} is already registered ({existing.fn!r})"
                )
            self._tasks[task.name] = task
            return task

        return register(fn) if fn is not None else register

    def schedule(
        self,
        cron: str,
        *,
        tz: str = "UTC",
        name: str | None = None,
        for_each: Callable[[Tick], Iterable[str | int]] | None = None,
        key: str | Callable[..., str] | None = None,
        payload: dict[str, Any] | Callable[..., dict[str, Any]] | None = None,
        queue: str | None = None,
        catch_up: str = "latest",
        max_catch_up: int = 100,
        grace: float | timedelta = 300.0,
        cohort: str = "default",  # scheduling.schedule.DEFAULT_COHORT
        batch_size: int = 1000,
    ) -> Callable[[Task | Callable[..., Any]], Task]:
        """Run a task on a cron schedule. Put it above ``@ledger.task`` (a plain function
        becomes a task with default settings)::

            @ledger.schedule("0 6 * * MON", tz="Europe/Berlin", for_each=active_customers,
                             payload=lambda tick, c: {"customer_id": c, "week": tick.week})
            @ledger.task(queue="digests")
            def send_digest(ctx, customer_id: int, week: str) -> None: ...

        - ``cron``: 5 fields (minute hour day-of-month month day-of-week) with names, ranges,
          lists and steps, or ``@daily`` and its kin; ``tz``: an IANA zone. Daylight saving
          follows cron: a 02:30 schedule fires once on both change-over days.
        - ``for_each(tick)``: an eligibility function; each tick then makes one job per entity
          id it yields. Without it, each tick makes one job.
        - ``key``: a template over ``{schedule} {tick} {local} {date} {week} {month} {year}``
          and ``{entity}``, or a function of the tick (and entity). Default: the schedule's
          name (or the entity) and the coarsest label that tells ticks apart, e.g.
          ``weekly-digest:2026-W33`` or ``4187:2026-W33``.
        - ``payload``: a dict, or a function of the tick (and entity); default
          ``{"tick": "2026-08-10T04:00Z"}`` plus ``"entity"`` for fan-out.
        - ``catch_up``: ``skip``, ``latest`` (default) or ``all`` (at most ``max_catch_up``)
          for ticks missed by more than ``grace`` seconds (default 300).
        - ``cohort``: schedules of a cohort share one leader lease (default ``"default"``).
        - ``batch_size``: jobs enqueued per transaction (default 1000).

        A bad expression, zone, key or option raises ``ConfigError`` here, at declaration.
        """
        from .scheduling.cron import CronSpec
        from .scheduling.schedule import Schedule, TaskTarget

        CronSpec(cron, tz)  # refuse a bad expression or zone before registering anything

        def register(fn: Task | Callable[..., Any]) -> Task:
            new_task = not isinstance(fn, Task)
            task = fn if isinstance(fn, Task) else self.task(fn)
            try:
                self.schedules.add(
                    Schedule(
                        name or task.name,
                        cron,
                        target=TaskTarget(task, payload, queue),
                        tz=tz,
                        for_each=for_each,
                        key=key,
                        catch_up=catch_up,
                        max_catch_up=max_catch_up,
                        grace=grace,
                        cohort=cohort,
                        batch_size=batch_size,
                    )
                )
            except ConfigError:
                if new_task:  # a refused schedule leaves nothing registered behind
                    self._tasks.pop(task.name, None)
                raise
            return task

        return register

    def scheduler(self, **options: Any) -> Scheduler:
        """Build a ``Scheduler`` for this ledger's schedules (see its options) without starting
        it. ``scheduler.run()`` runs it in this thread; workers run one by themselves."""
        from .maintenance.scheduler import Scheduler

        return Scheduler(self, **options)

    def _schedules_declared(self) -> None:
        # The first schedule is declared: every worker runs the scheduler beside itself from
        # now on (unless ``schedules.run_in_workers`` is off); see maintenance/scheduler.py.
        from .maintenance.scheduler import scheduler_service

        self.worker_services.append(partial(scheduler_service, self))

    def get_task(self, name: str) -> Task | None:
        return self._tasks.get(name)

    def tasks(self) -> list[Task]:
        return list(self._tasks.values())

    def queues(self) -> list[str]:
        """The queues of the registered tasks."""
        return sorted({t.queue for t in self._tasks.values()})

    # -- enqueue -----------------------------------------------------------------------------------

    def enqueue(
        self,
        task: Task | str,
        payload: dict[str, Any] | None = None,
        *,
        key: str | None = None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        conn: Any = None,
        correlation_id: str | None = None,
        group: str | None = None,
        now: datetime | None = None,
    ) -> Enqueued:
        """Put one job in the ledger; return ``(id, created)``.

        A key that already exists in the queue creates nothing and returns the existing job with
        ``created=False``; with a different task or payload it raises ``KeyConflict`` and changes
        nothing. With ``conn`` (an open psycopg or sqlite3 connection on the ledger's database,
        or a SQLAlchemy ``Connection`` or ``Session`` on one) the job is written in the caller's
        transaction and exists only if that commits. Inside an OpenTelemetry span, the span's
        trace context is stored with the job (its attempts' spans link to it).
        ``group`` (or the task's group rule) puts the job in a group: see ``set_group_limits``.
        """
        spec = _one_spec(payload, key, delay, run_at, priority, correlation_id, group)
        results = self._insert(
            task, [spec], queue=queue, conn=conn, now=now, priority_given=priority is not None
        )
        return results[0].enqueued()

    def enqueue_many(
        self,
        task: Task | str,
        jobs: Iterable[JobSpec | dict[str, Any]],
        *,
        queue: str | None = None,
        conn: Any = None,
        on_conflict: Literal["raise", "report"] = "raise",
        now: datetime | None = None,
    ) -> list[InsertResult]:
        """Enqueue a batch in one transaction. Each item is a ``JobSpec`` or a dict with the same
        fields (``payload``, ``key``, ``delay``, ``run_at``, ``priority``, ``correlation_id``,
        ``group``).

        ``on_conflict="raise"``: one conflicting key raises ``KeyConflict`` and nothing of the
        batch is written. ``"report"``: the others are written and the conflicts are marked.
        """
        specs = _specs(jobs)
        return self._insert(
            task,
            specs,
            queue=queue,
            conn=conn,
            now=now,
            on_conflict=on_conflict,
            priority_given=True,
        )

    def _insert(
        self,
        task_ref: Task | str,
        specs: Sequence[_Spec],
        *,
        queue: str | None,
        conn: Any,
        now: datetime | None,
        on_conflict: Literal["raise", "report"] = "raise",
        priority_given: bool,
    ) -> list[InsertResult]:
        build = self._job_builder(task_ref, queue=queue, now=now, priority_given=priority_given)
        jobs: Sequence[NewJob]
        stream_from = None if self._backend is None else self._backend.jobs.stream_from
        if conn is None and stream_from is not None and len(specs) >= stream_from:
            jobs = _BuiltAsRead(specs, build)
        else:
            jobs = build(specs)
        return self._write(jobs, now, conn, on_conflict)

    def _write(
        self,
        jobs: Sequence[NewJob],
        now: datetime | None,
        conn: Any,
        on_conflict: Literal["raise", "report"],
    ) -> list[InsertResult]:
        # A SQLAlchemy Connection or Session: the DBAPI connection under it, in its transaction.
        conn = raw_connection(conn)
        backend = self._backend or self._open(conn)
        return self._written(backend.jobs.insert(jobs, now, conn=conn, on_conflict=on_conflict))

    def _new_jobs(
        self,
        task_ref: Task | str,
        specs: Sequence[_Spec],
        *,
        queue: str | None,
        now: datetime | None,
        priority_given: bool,
    ) -> list[NewJob]:
        """The jobs an enqueue writes, checked: the task's rules (key, group, priority,
        payload), the queue, the due time, a correlation id for each. ``AsyncLedger`` builds
        its jobs here too, and only writes them its own way."""
        build = self._job_builder(task_ref, queue=queue, now=now, priority_given=priority_given)
        return build(specs)

    def _job_builder(
        self,
        task_ref: Task | str,
        *,
        queue: str | None,
        now: datetime | None,
        priority_given: bool,
    ) -> Callable[[Sequence[_Spec]], list[NewJob]]:
        """``_new_jobs`` in two halves: what the batch shares is looked up and checked now
        (the task, the queue, the clock, the trace context); the function returned builds the
        jobs of any part of the batch."""
        explicit_now(now)
        task = self._resolve_task(task_ref)
        name = task.name if isinstance(task, Task) else task
        target_queue = validate_queue_name(
            queue or (task.queue if isinstance(task, Task) else DEFAULT_QUEUE)
        )
        max_attempts = task.max_attempts if isinstance(task, Task) else DEFAULT_MAX_ATTEMPTS
        lease_seconds = task.lease_seconds if isinstance(task, Task) else DEFAULT_LEASE_SECONDS
        # What the task adds to each job, looked up once for the batch (None: nothing).
        check = task.check_payload if isinstance(task, Task) else None
        key_rule = task.derive_key if isinstance(task, Task) and task.key is not None else None
        group_rule = (
            task.derive_group if isinstance(task, Task) and task.group is not None else None
        )
        task_priority = task.priority if isinstance(task, Task) and not priority_given else None
        clock = now or datetime.now(UTC)
        # The batch is one enqueue: its jobs share the caller's trace context (None, the
        # common case, without OpenTelemetry or outside a span).
        trace_context = current_trace_context()

        def build(specs: Sequence[_Spec]) -> list[NewJob]:
            new_jobs = []
            # One call to the random source for the part: a correlation id per job.
            random_ids = os.urandom(16 * len(specs)).hex()
            for n, (payload, key, delay, run_at, priority, correlation_id, group) in enumerate(
                specs
            ):
                payload_json = encode_payload(payload)
                if check is not None:
                    check(payload)
                if key is None and key_rule is not None:
                    key = key_rule(payload)
                if key is None:
                    raise PayloadError(
                        f"a key is required: pass key=... (the business identity of this job, e.g. "
                        f"'4187:2026-W33') or give task {name!r} a key rule"
                    )
                if (
                    type(key) is not str
                    or not 0 < len(key) <= MAX_KEY_LENGTH
                    or not key.isprintable()
                ):
                    # A common key (printable, so without a control character) needs no more; any
                    # other is checked in full (some keys that are not printable are valid).
                    key = validate_key(key)
                if task_priority is not None:
                    priority = task_priority
                if type(priority) is not int or not -_INT32 <= priority <= _INT32:
                    priority = _priority(priority)  # the common case above; this one says why not
                if group is None and group_rule is not None:
                    group = group_rule(payload)
                run_at = (
                    now if delay is None and run_at is None else _run_at(delay, run_at, clock, now)
                )
                new_jobs.append(
                    NewJob(
                        target_queue,
                        key,
                        name,
                        payload_json,
                        priority,
                        run_at,
                        max_attempts,
                        lease_seconds,
                        random_ids[32 * n : 32 * n + 32]
                        if correlation_id is None or correlation_id == ""
                        else validate_correlation_id(correlation_id),
                        None if group is None else validate_group(group),
                        trace_context,
                    )
                )
            return new_jobs

        return build

    def _written(self, results: list[InsertResult]) -> list[InsertResult]:
        """After an insert: wake this process's idle workers if a job was created (other
        processes' are woken by the insert's NOTIFY, where the database has it)."""
        if any(r.created for r in results):
            self._wake_workers()
        return results

    def _resolve_task(self, task: Task | str) -> Task | str:
        if isinstance(task, Task):
            return task
        if not isinstance(task, str):
            raise ConfigError(f"task must be a registered Task or a task name, got {task!r}")
        return self._tasks.get(task, task)

    # -- in-process wake-ups -------------------------------------------------------------------------

    def _register_wake(self, event: threading.Event) -> None:
        self._wakes.add(event)

    def _unregister_wake(self, event: threading.Event) -> None:
        self._wakes.discard(event)

    def _wake_workers(self) -> None:
        if self._wakes:  # most enqueuing processes run no worker
            for event in list(self._wakes):
                event.set()

    # -- workers -----------------------------------------------------------------------------------

    def attempt_tracer(self) -> AttemptTracer | None:
        """What follows each attempt of this ledger's workers as a span: OpenTelemetry's, when
        this process uses it (has imported it, to configure its SDK), else None."""
        from .observability.tracing import attempt_tracer

        return attempt_tracer()

    def worker(self, queues: Sequence[str] | None = None, **options: Any) -> Worker:
        """Build a ``Worker`` (see its options) without starting it: ``run()`` runs it in this
        thread; ``start()`` / ``stop(timeout=...)``, ``with`` and ``async with`` run it in
        threads of its own, inside the application (docs/integrations.md)."""
        from ._runtime.worker import Worker  # asyncio and the runtime: only for workers

        self._install_housekeeping()
        return Worker(self, queues, **options)

    def run_worker(
        self,
        queues: Sequence[str] | None = None,
        *,
        concurrency: int = 4,
        batch_size: int = 10,
        burst: bool = False,
        handle_signals: bool = True,
        stop: threading.Event | None = None,
        **options: Any,
    ) -> WorkerStats:
        """Run a worker in this thread until SIGTERM/SIGINT, until ``stop`` (an event) is set,
        or with ``burst=True`` until nothing is due. The first signal, or the event, stops
        claiming and lets running jobs finish (``grace_seconds``, default 30); a second signal
        stops waiting. Signal handlers are installed only in the main thread (and not with
        ``handle_signals=False``). To start and stop a worker from code without a thread of
        your own, see ``worker()``: ``start()``, ``stop(timeout=...)``, ``with``,
        ``async with``."""
        from ._runtime.worker import Worker  # asyncio and the runtime: only for workers

        self._install_housekeeping()
        worker = Worker(
            self, queues, concurrency=concurrency, batch_size=batch_size, burst=burst, **options
        )
        if stop is not None:
            worker.stop_when(stop)
        if not handle_signals:
            return worker.run()
        # The first SIGTERM or SIGINT stops gracefully, the next one hard (off the signal
        # handler, and only in the main thread: see ``_signals``).
        with relayed_signals(lambda signum, count: worker.stop(graceful=not worker.stopping)):
            return worker.run()

    # -- reading -----------------------------------------------------------------------------------

    def job(self, job_id: int) -> JobRow:
        """The job with this id, or ``NotFound``."""
        return self.backend.history.get(job_id)

    def job_by_key(self, key: str, queue: str | None = None) -> JobRow:
        """The job with this key (in ``queue``, or in the only queue that has it)."""
        lookup_text(key, "a key", f"no job with key {key!r}")
        if queue is not None:
            lookup_text(queue, "a queue's name", f"no job with key {key!r}")
            try:
                return self.backend.history.get_by_key(queue, key)
            except NotFound as exc:
                raise NotFound(f"{exc}{self._pruned_note(key, queue)}") from None
        found = self.backend.history.find_key(key)
        if not found:
            raise NotFound(f"no job with key {key!r}{self._pruned_note(key, queue)}")
        if len(found) > 1:
            queues = ", ".join(sorted(j.queue for j in found))
            raise NotFound(f"key {key!r} exists in several queues ({queues}); name the queue")
        return found[0]

    def _pruned_note(self, key: str, queue: str | None) -> str:
        tombs = self.backend.history.tombstones(key, queue)
        if not tombs:
            return ""
        t = tombs[0]
        return (
            f"; job {t.job_id} had this key in queue {t.queue!r}, finished {t.state.value} and "
            f"was pruned at {t.pruned_at:%Y-%m-%d %H:%M:%S} UTC; the key stays taken until "
            f"{t.expires_at:%Y-%m-%d %H:%M:%S} UTC"
        )

    def find(self, ref: int | str, queue: str | None = None) -> JobRow:
        """A job by id (an int, or a string of digits with no job of that key) or by key."""
        if isinstance(ref, bool) or not isinstance(ref, int | str):
            raise ConfigError(f"a job is named by its id or its key, got {ref!r}")
        if isinstance(ref, int):
            return self.job(ref)
        try:
            return self.job_by_key(ref, queue)
        except NotFound:
            if ref.isdigit():
                return self.job(int(ref))
            raise

    def result(
        self,
        ref: int | str,
        *,
        queue: str | None = None,
        timeout: float | timedelta | None = None,
    ) -> Any:
        """What the handler of a finished job returned — by key or id, as ``find`` takes them.

        A done job: the JSON value its handler returned, as stored (None when it returned None,
        when an operator resolved it, or when what it returned could not be stored: its
        history then says why). A dead or cancelled job: ``JobFailed``, with its state and last
        error. A job not finished yet: ``ResultNotReady`` — or, with ``timeout`` (seconds),
        wait up to that long for it to finish, then as above, or ``ResultTimeout`` (a
        ``TimeoutError``). On PostgreSQL the wait is woken by the completion's NOTIFY from any
        process; on SQLite it polls (``result_poll_interval``). ``NotFound`` for an unknown key
        or id, and for a job that was pruned (saying when).
        """
        wait = None
        if timeout is not None:
            wait = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
            if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait < 1e9:
                raise ConfigError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
        job = self.find(ref, queue)
        if wait is None or job.state.is_final:
            return _result_of(job)
        deadline = time.monotonic() + wait
        event = self.finishes.arm(job.queue, connect_wait=wait)
        cap = self.result_poll_interval or (0.25 if event is None else 2.0)
        pause = min(0.01, cap)
        try:
            while True:
                if event is not None:
                    event.clear()
                try:
                    job = self.job(job.id)
                except NotFound:
                    note = self._pruned_note(job.key, job.queue)
                    raise NotFound(f"job {job.id} is gone while waiting for it{note}") from None
                if job.state.is_final:
                    return _result_of(job)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ResultTimeout(job.id, job.queue, job.key, job.state, wait)
                if event is None:
                    time.sleep(min(pause, left))
                    pause = min(pause * 2, cap)
                else:
                    event.wait(min(cap, left))
        finally:
            if event is not None:
                self.finishes.disarm(event)

    def history(self, job_id: int) -> JobHistory:
        job = self.backend.history.get(job_id)
        return JobHistory(
            job=job,
            attempts=self.backend.history.attempts(job_id),
            events=self.backend.history.events(job_id),
            effects=self.backend.effects.all(job.queue, job.key),
        )

    def jobs(self, where: JobFilter | None = None, order: str = "id") -> list[JobRow]:
        """The jobs ``where`` selects (default: all), in ``order`` (``id``, ``-id``,
        ``updated``, ``run_at``)."""
        return self.backend.history.find(_filter(where), order)

    def stats(
        self, now: datetime | None = None, late_after_seconds: float = 300.0
    ) -> list[QueueStats]:
        """Jobs per queue and state; ``late_pending``: pending jobs due longer ago than
        ``late_after_seconds`` (a finite number ≥ 0; one longer than any job can have waited
        counts none late)."""
        explicit_now(now)
        if (
            isinstance(late_after_seconds, bool)
            or not isinstance(late_after_seconds, int | float)
            or not 0 <= late_after_seconds < math.inf  # not NaN either
        ):
            raise ConfigError(
                f"late_after_seconds must be a finite number ≥ 0, got {late_after_seconds!r}"
            )
        return self.backend.stats.queues(now, late_after_seconds)

    # -- operators ---------------------------------------------------------------------------------

    def rescue(self, now: datetime | None = None) -> list[RescueResult]:
        """Close expired leases now (workers do this on their own every few seconds)."""
        explicit_now(now)
        return self.rescuer().run_once(now)

    def pruner(self, holder: str, interval: float = 600.0) -> Pruner:
        """The housekeeping of the small tables (old rollups, expired sessions and
        tombstones), done by whichever pruner holds its leader lease; ``start()`` runs it."""
        from .maintenance.pruner import Pruner

        return Pruner(lambda: self.backend, holder, interval)

    def _install_housekeeping(self) -> None:
        """Give this ledger's workers the dashboard's per-minute rollups and the pruner."""
        from .observability.rollup import install_rollups

        install_rollups(self)
        if not self._pruning:
            self._pruning = True
            self.worker_services.append(lambda worker: self.pruner(worker.name))

    def rescuer(
        self,
        interval: float = 5.0,
        on_rescue: Callable[[list[RescueResult]], None] | None = None,
    ) -> Rescuer:
        """The rescuer of this ledger (``start()`` runs it every ``interval`` seconds on a
        thread): expired leases back to pending, or to dead when their budget is spent. Every
        transport's leases are rescued by it; workers run one in their own loop."""
        from .maintenance.rescuer import Rescuer

        return Rescuer(lambda: self.backend, interval, on_rescue)

    def pull_leases(self, observers: Observers) -> PullLeases:
        """Pull consumers' leases over this ledger (receive, ack, nack, extend), telling
        ``observers`` of outcomes and refused writes; a nack retries by the queue's declared
        backoff."""
        from ._runtime.pull import PullLeases

        return PullLeases(lambda: self.backend, observers, self._queue_backoff)

    def _queue_backoff(self, queue: str) -> Backoff:
        try:
            return self.queue_settings.get(queue).settings.backoff
        except NotFound:
            return DEFAULT_BACKOFF

    def redrive(
        self,
        *,
        actor: str,
        reason: str,
        ids: Sequence[int] | None = None,
        where: JobFilter | None = None,
        dry_run: bool = False,
        rate: float | None = None,
        budget: int | None = None,
        batch: int = 100,
        now: datetime | None = None,
        progress: Callable[[int, int], None] | None = None,
        stop: threading.Event | None = None,
    ) -> RedriveResult:
        """Give dead jobs a fresh retry budget and put them back to pending.

        Select by ``ids`` or a ``where`` filter (default: dead jobs). ``rate`` (jobs per second)
        spreads a large redrive out so the downstream is not stampeded. The job keeps its key,
        history and recorded effects, so an effect that already happened is not repeated.
        ``stop``, once set, ends the redrive between two batches (a paced wait ends at once):
        the result's ``left`` holds the jobs it did not reach.
        """
        explicit_now(now)
        if not actor or not reason:
            raise ConfigError(
                "redrive needs an actor and a reason; both are recorded in the job's history"
            )
        operator_text(actor, "actor"), operator_text(reason, "reason")
        if rate is not None and (
            isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate < math.inf
        ):
            raise ConfigError(f"rate must be a finite number > 0 jobs per second, got {rate!r}")
        if budget is not None:
            validate_max_attempts(budget)
        selection = _filter(where)
        if selection.states is None:
            selection = _replace(selection, states=(JobState.DEAD,))
        if ids is not None:
            selection = _replace(selection, ids=tuple(job_id_number(i) for i in ids))
        matched = [j.id for j in self.backend.history.find(selection)]
        if dry_run:
            return RedriveResult(matched, True)
        moved: list[int] = []
        reached = len(matched)
        step = max(1, min(batch, int(rate))) if rate else batch
        started = time.monotonic()
        for offset in range(0, len(matched), step):
            chunk = matched[offset : offset + step]
            if rate:
                # Pace by the total so far, not per chunk, so slow chunks are not "made up" twice.
                due = started + offset / rate
                pause = due - time.monotonic()
                if pause > 0:
                    if stop is None:
                        time.sleep(pause)
                    else:
                        stop.wait(pause)
            if stop is not None and stop.is_set():
                reached = offset
                break
            moved.extend(self.backend.history.redrive(chunk, actor, reason, now, budget))
            if progress is not None:
                progress(len(moved), len(matched))
        if moved:
            self._wake_workers()
        skipped = sorted(set(matched[:reached]) - set(moved))
        return RedriveResult(moved, False, skipped, matched[reached:])

    def resolve(
        self,
        job: int | str,
        *,
        actor: str,
        note: str,
        state: JobState | str = JobState.DONE,
        queue: str | None = None,
        now: datetime | None = None,
        only_dead: bool = False,
    ) -> JobRow:
        """An operator's repair after checking the outside world: a dead or pending job becomes
        done (or pending again, with a fresh budget). Recorded with actor and note. With
        ``only_dead``, a job that is no longer dead (redriven meanwhile by someone else) is
        refused (``InvalidTransition``) in the same write, as a job in any other state is."""
        explicit_now(now)
        if not actor or not note:
            raise ConfigError(
                "resolve needs an actor and a note; both are recorded in the job's history"
            )
        operator_text(actor, "actor"), operator_text(note, "note")
        try:
            state = JobState(state)
        except ValueError:
            raise ConfigError(f"resolve makes a job done or pending, not {state!r}") from None
        if not isinstance(only_dead, bool):
            raise ConfigError(f"only_dead must be True or False, got {only_dead!r}")
        row = self.find(job, queue)
        return self.backend.history.resolve(row.id, state, actor, note, now, only_dead=only_dead)

    def cancel(
        self,
        job: int | str,
        *,
        actor: str,
        reason: str,
        queue: str | None = None,
        now: datetime | None = None,
    ) -> JobRow:
        """Withdraw a pending job; it will not run. Recorded with actor and reason."""
        explicit_now(now)
        if not actor or not reason:
            raise ConfigError(
                "cancel needs an actor and a reason; both are recorded in the job's history"
            )
        operator_text(actor, "actor"), operator_text(reason, "reason")
        row = self.find(job, queue)
        if row.state is not JobState.PENDING:
            raise InvalidTransition(
                f"cannot cancel job {row.id}: it is {row.state.value} (only pending jobs can be cancelled)"
            )
        return self.backend.history.cancel(row.id, actor, reason, now)

    # -- groups ------------------------------------------------------------------------------------

    def set_group_limits(
        self,
        queue: str,
        *,
        max_leased: int | None = None,
        rate: float | None = None,
        burst: float | None = None,
        now: datetime | None = None,
    ) -> GroupLimits:
        """Limit what each group of ``queue`` may do; ``None`` lifts a limit.

        ``max_leased``: at most this many of one group's jobs leased at once. ``rate``: one
        group's jobs start at most this many times per second on average, in bursts of up to
        ``burst`` (default one second's worth). Every claim enforces them (workers, the HTTP
        API's pull and push), across processes and hosts. Takes effect at the next claim.
        """
        explicit_now(now)
        limits = GroupLimits(max_leased, rate, burst)
        self.backend.groups.limits_put(validate_queue_name(queue), limits, now)
        return limits

    def group_limits(self, queue: str) -> GroupLimits:
        """The limits each group of ``queue`` has (no limits unless set)."""
        return self.backend.groups.limits_get(validate_queue_name(queue))

    def groups(self, queue: str, now: datetime | None = None) -> list[GroupStatus]:
        """The groups of ``queue`` with live jobs or a pause: pending, due, leased, paused-until."""
        explicit_now(now)
        return self.backend.groups.all(validate_queue_name(queue), now)

    def pause_group(
        self,
        queue: str,
        group: str,
        *,
        until: datetime | None = None,
        seconds: float | None = None,
        reason: str = "paused by an operator",
        now: datetime | None = None,
    ) -> datetime:
        """Claim none of the group's jobs before ``until`` (or ``seconds`` from now). A pause
        only ever extends: a shorter one than the group already has changes nothing. Returns
        the time the group is paused until. ``seconds`` is a finite number > 0 and ``until`` an
        aware datetime; anything else is a ``ConfigError`` that pauses nothing."""
        explicit_now(now)
        if (until is None) == (seconds is None):
            raise ConfigError("pause_group needs until= or seconds=, one of them")
        operator_text(reason, "reason")
        if until is None:
            if (
                isinstance(seconds, bool)
                or not isinstance(seconds, int | float)
                or not 0 < seconds < math.inf  # not NaN either
            ):
                raise ConfigError(f"seconds must be a finite number > 0, got {seconds!r}")
            until = keepable_time_after(now or datetime.now(UTC), seconds, "seconds")
        else:
            aware_time(until, "until")
        return self.backend.groups.pause(
            validate_queue_name(queue), validate_group(group), until, reason, now
        )

    def resume_group(self, queue: str, group: str, now: datetime | None = None) -> bool:
        """Lift a group's pause now. Returns False when the group was not paused."""
        explicit_now(now)
        return self.backend.groups.resume(validate_queue_name(queue), validate_group(group), now)

    def prune(
        self,
        older_than: float | timedelta,
        *,
        include_dead: bool = False,
        keep_keys: float | timedelta | None = DEFAULT_KEEP_KEYS,
        queue: str | None = None,
        batch: int = 1000,
        dry_run: bool = False,
        now: datetime | None = None,
        progress: Callable[[PruneResult], None] | None = None,
    ) -> PruneResult:
        """Delete finished jobs, with their attempts, events and effects, in batches.

        Done and cancelled jobs that finished more than ``older_than`` (seconds or a timedelta)
        ago go; dead jobs only with ``include_dead`` (they wait for an operator). Each pruned
        key keeps blocking enqueue for ``keep_keys`` after its job finished (default 365 days;
        ``None`` or 0 frees keys at once): enqueue of such a key creates nothing and reports the
        pruned job (``InsertResult.pruned``). Tombstones past their horizon are deleted too,
        and, unless ``queue`` is given, schedule ticks older than ``older_than`` that are
        finished and behind their schedule's cursor (``PruneResult.ticks``).
        Every batch is one short transaction over the next ``batch`` (1 to 10000) jobs by id:
        prune walks the primary key from the oldest job and stops at the first jobs created
        after the cut-off, so it needs no index of its own on the jobs table. Expired
        tombstones and ticks go at most ``batch`` a transaction too. ``queue`` must be a valid
        queue name (``ConfigError`` otherwise); one with no jobs is pruned of nothing.
        """
        explicit_now(now)
        age = _seconds(older_than)
        if age is None or age < 0:
            raise ConfigError(f"older_than must be a duration >= 0, got {older_than!r}")
        keep = _seconds(keep_keys) if keep_keys is not None else None
        if keep is not None and keep < 0:
            raise ConfigError(f"keep_keys must be a duration >= 0, got {keep_keys!r}")
        whole_number(batch, 1, 10_000, "batch")
        if queue is not None:
            validate_queue_name(queue)
        states = [JobState.DONE, JobState.CANCELLED] + ([JobState.DEAD] if include_dead else [])
        before = time_after(now or datetime.now(UTC), -age)
        total = PruneResult(by_state={s.value: 0 for s in states} if dry_run else {})
        after: int | None = 0
        while after is not None:
            result, after = self.backend.history.prune(
                before, states, keep or None, queue, batch, after, now, dry_run
            )
            total = total + result
            if progress is not None and result.jobs:
                progress(total)
        if dry_run:
            return total
        expired = _in_batches(lambda: self.backend.history.prune_tombstones(now, batch), batch)
        total = total + PruneResult(expired_tombstones=expired)
        # Schedule ticks are not of a queue: a prune of every queue takes them too.
        if queue is None:
            ticks = _in_batches(lambda: self.backend.schedules.tick_prune(before, batch), batch)
            total = total + PruneResult(ticks=ticks)
        return total


def _result_of(job: JobRow) -> Any:
    """The result of a job as it is now: its stored value, or why there is none."""
    if job.state is JobState.DONE:
        return job.result
    if job.state.is_final:
        raise JobFailed(job.id, job.queue, job.key, job.state, job.last_error, job.last_error_class)
    raise ResultNotReady(job.id, job.queue, job.key, job.state)


def _in_batches(delete: Callable[[], int], batch: int) -> int:
    """Run ``delete`` (one batch, returning how many rows it removed) until a batch comes back
    short; return the total."""
    total = 0
    while True:
        removed = delete()
        total += removed
        if removed < batch:
            return total


def _priority(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -_INT32 <= value <= _INT32:
        raise ConfigError(f"priority must be a whole number (32-bit), got {value!r}")
    return value


def _seconds(delay: float | timedelta | None) -> float | None:
    if delay is None:
        return None
    if isinstance(delay, timedelta):
        return delay.total_seconds()
    return finite_number(delay, "delay")


def _run_at(
    delay: float | None, run_at: datetime | None, clock: datetime, explicit_now: datetime | None
) -> datetime | None:
    if delay is not None and run_at is not None:
        raise ConfigError("give delay or run_at, not both")
    if run_at is not None:
        return aware_time(run_at, "run_at")
    if delay is not None:
        if delay < 0:
            raise ConfigError(f"delay must be >= 0 seconds, got {delay!r}")
        return keepable_time_after(clock, delay, "delay")
    # Due now: by the explicit clock if one was given, else by the database's clock.
    return explicit_now


_SPEC_FIELDS = frozenset(
    {"payload", "key", "delay", "run_at", "priority", "correlation_id", "group"}
)


#: One job of an enqueue as ``_new_jobs`` reads it: a plain tuple of ``JobSpec``'s fields in
#: their order (payload, key, delay, run_at, priority, correlation_id, group), whether it was
#: given as a ``JobSpec`` or as a dict. Made and unpacked in a few C steps: no object per job.
_Spec = tuple[Any, str | None, float | None, datetime | None, Any, str | None, str | None]

_spec_fields = attrgetter(
    "payload", "key", "delay", "run_at", "priority", "correlation_id", "group"
)


def _one_spec(
    payload: dict[str, Any] | None,
    key: str | None,
    delay: float | timedelta | None,
    run_at: datetime | None,
    priority: int | None,
    correlation_id: str | None,
    group: str | None,
) -> _Spec:
    """The job of ``enqueue``'s arguments."""
    return (
        payload if payload is not None else {},
        key,
        _seconds(delay),
        run_at,
        priority if priority is not None else 0,
        correlation_id,
        group,
    )


def _specs(jobs: Iterable[JobSpec | dict[str, Any]]) -> list[_Spec]:
    """The jobs of ``enqueue_many``'s items."""
    return [_spec_fields(j) if isinstance(j, JobSpec) else _spec_from_dict(j) for j in jobs]


def _spec_from_dict(item: dict[str, Any]) -> _Spec:
    if not _SPEC_FIELDS.issuperset(item):
        raise ConfigError(
            f"unknown job fields {sorted(set(item) - _SPEC_FIELDS)}; expected payload, key, delay, run_at, priority, correlation_id, group"
        )
    get = item.get
    delay = get("delay")
    return (
        get("payload", {}),
        get("key"),
        None if delay is None else _seconds(delay),
        get("run_at"),
        get("priority", 0),
        get("correlation_id"),
        get("group"),
    )


def _filter(where: Any) -> JobFilter:
    """``where`` if it is a ``JobFilter`` (None: one that selects every job)."""
    if where is None:
        return JobFilter()
    if not isinstance(where, JobFilter):
        raise ConfigError(f"where must be a JobFilter, got {where!r}")
    return where


def _replace(where: JobFilter, **changes: Any) -> JobFilter:
    from dataclasses import replace

    return replace(where, **changes)


def refuse_default_url() -> None:
    """Raise ``ConfigError`` when no database URL was given and ``JOBLEDGER_REQUIRE_URL``
    forbids the default one (the CLI calls it for a ``--url`` left to its default too)."""
    error = default_url_refused()
    if error is not None:
        raise error


class _BuiltAsRead(Sequence[NewJob]):
    """The jobs of a large batch, built as they are first read (``Ledger._job_builder``).

    A backend whose jobs role has a ``stream_from`` reads a batch of at least that many a piece
    at a time while it writes it (PostgreSQL's ``COPY``): built as read, the batch's jobs are
    made while the database inserts the pieces before them, instead of all before the first
    is sent (bulk enqueue +7 %, docs/benchmarks.md). A job that fails its checks raises the
    same error as it would have before any was written: in the middle of the batch's
    transaction, which then rolls back, so nothing of the batch is written."""

    #: At least this many jobs are built at a time (or the rest of the batch).
    CHUNK = 200

    def __init__(self, specs: Sequence[_Spec], build: Callable[[Sequence[_Spec]], list[NewJob]]):
        self._specs = specs
        self._build = build
        self._built: list[NewJob] = []

    def __len__(self) -> int:
        return len(self._specs)

    def _through(self, stop: int) -> None:
        """Build the jobs up to index ``stop`` (exclusive), at least ``CHUNK`` more."""
        built = len(self._built)
        if stop > built:
            end = min(len(self._specs), max(stop, built + self.CHUNK))
            self._built.extend(self._build(self._specs[built:end]))

    @overload
    def __getitem__(self, index: int) -> NewJob: ...

    @overload
    def __getitem__(self, index: slice) -> list[NewJob]: ...

    def __getitem__(self, index: int | slice) -> NewJob | list[NewJob]:
        if isinstance(index, slice):
            self._through(index.indices(len(self))[1] if index.step in (None, 1) else len(self))
            return self._built[index]
        self._through(len(self) if index < 0 else index + 1)
        return self._built[index]

    def __iter__(self) -> Iterator[NewJob]:
        self._through(len(self))
        return iter(self._built)
