"""Schedules: a cron expression, what each tick enqueues, and the keys that make a tick safe to
repeat.

A tick of a schedule creates jobs through ``enqueue_many``: one job (key
``weekly-digest:2026-W33``), or, with an eligibility function, one job per eligible entity
(``4187:2026-W33``). Keys are derived from the tick, so every scheduler that handles the same
tick — a second region, a restart, the leader that takes over from one that died half-way —
asks for the same keys, and the ledger creates each job once.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .._records import (
    CatchUp,
    LeaderLease,
    ScheduleDefinition,
    ScheduleRow,
    TickRow,
    TickState,
    encode_payload,
    explicit_now,
    lookup_text,
    operator_text,
    whole_number,
)
from .._task import DEFAULT_QUEUE, Task, validate_queue_name
from ..errors import ConfigError, NotFound, PayloadError
from .cron import CronSpec

if TYPE_CHECKING:
    from ..backends.base import Backend

__all__ = [
    "DEFAULT_COHORT",
    "Entity",
    "Schedule",
    "ScheduleBook",
    "ScheduleStatus",
    "ScheduleTarget",
    "TaskTarget",
    "Tick",
    "leader_name",
    "tick_payload",
]

Entity = str | int
"""What an eligibility function yields: the id of one entity (a customer, a property)."""

DEFAULT_COHORT = "default"
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,199}$")
_LABELS = ("schedule", "tick", "local", "date", "week", "month", "year")
# Labels a default key may use, coarsest first: the first that tells ticks apart is chosen.
_PERIODS = ("year", "month", "week", "date", "tick")
_SAMPLE_FROM = datetime(2026, 1, 1, tzinfo=UTC)
_SAMPLE_TICKS = 128


def leader_name(cohort: str) -> str:
    """The name of a cohort's leader lease in the ledger."""
    return f"scheduler:{cohort}"


@dataclass(frozen=True)
class Tick:
    """One firing of a schedule: its time in UTC and on the schedule's wall clock.

    The labels (``week``, ``date`` …) are taken from the local time, so a Monday 06:00
    Europe/Berlin tick belongs to that Monday's ISO week whatever its UTC date.
    """

    schedule: str
    time: datetime
    """The tick's instant, in UTC."""
    local: datetime
    """The same instant in the schedule's time zone."""

    @property
    def iso(self) -> str:
        """``2026-08-10T04:00Z``: the instant in UTC, unique per tick."""
        return self.time.strftime("%Y-%m-%dT%H:%MZ")

    @property
    def week(self) -> str:
        """``2026-W33``: the ISO week of the local date."""
        year, week, _ = self.local.isocalendar()
        return f"{year}-W{week:02d}"

    @property
    def date(self) -> str:
        """``2026-08-10``: the local date."""
        return self.local.strftime("%Y-%m-%d")

    @property
    def month(self) -> str:
        return self.local.strftime("%Y-%m")

    @property
    def year(self) -> str:
        return self.local.strftime("%Y")

    def labels(self) -> dict[str, str]:
        """The fields a key template can use (besides ``{entity}``)."""
        return {
            "schedule": self.schedule,
            "tick": self.iso,
            "local": self.local.isoformat(timespec="minutes"),
            "date": self.date,
            "week": self.week,
            "month": self.month,
            "year": self.year,
        }


@runtime_checkable
class ScheduleTarget(Protocol):
    """What a schedule's ticks enqueue: jobs of one task (or task name) in one queue.

    ``TaskTarget`` is the target of ``@ledger.schedule``. Other targets (a URL that receives a
    signed push, for instance) implement the same four members and are added with
    ``ledger.schedules.add(Schedule(..., target=...))``. A target may also have a method
    ``prepare(ledger, tick)``, called before each tick enqueues; if it raises, the tick fails
    and is retried (``jobledger.push.HttpTarget`` checks its subscription there).
    """

    @property
    def label(self) -> str:
        """What the target is, for people: ``task send_digest → queue digests``."""
        ...

    @property
    def task(self) -> Task | str:
        """The task (or task name) of the jobs a tick creates."""
        ...

    @property
    def queue(self) -> str | None:
        """Their queue; None for the task's own."""
        ...

    def check(self, schedule: Schedule) -> None:
        """Raise ``ConfigError`` if the target cannot serve ``schedule`` (called once, when the
        schedule is declared)."""
        ...

    def payload(self, tick: Tick, entity: Entity | None) -> dict[str, Any]:
        """The payload of the job for this tick (and entity, for a fan-out schedule)."""
        ...


PayloadRule = dict[str, Any] | Callable[..., dict[str, Any]] | None


class TaskTarget:
    """Ticks enqueue jobs of ``task``.

    ``payload`` is a dict (the same for every tick), a function of the tick (of the tick and
    the entity, for fan-out), or None for the default: ``{"tick": "2026-08-10T04:00Z"}``, plus
    ``"entity"`` for fan-out.
    """

    def __init__(self, task: Task | str, payload: PayloadRule = None, queue: str | None = None):
        if not isinstance(task, Task | str) or not task:
            raise ConfigError(
                f"a schedule's task must be a registered Task or a name, got {task!r}"
            )
        if payload is not None and not (isinstance(payload, dict) or callable(payload)):
            raise ConfigError("payload must be a dict, a function of the tick, or None")
        self._task = task
        self._payload = payload
        self._queue = None if queue is None else validate_queue_name(queue)
        self._fan_out = False

    @property
    def task(self) -> Task | str:
        return self._task

    @property
    def queue(self) -> str | None:
        return self._queue

    @property
    def label(self) -> str:
        name = self._task if isinstance(self._task, str) else self._task.name
        return f"task {name} → queue {_queue_of(self)}"

    def check(self, schedule: Schedule) -> None:
        self._fan_out = schedule.fan_out
        sample: dict[str, Any] | None = None
        if self._payload is None:
            sample = {"tick": "2026-01-05T05:00Z"}
            if schedule.fan_out:
                sample["entity"] = 1
        elif isinstance(self._payload, dict):
            try:
                encode_payload(self._payload)
            except PayloadError as exc:
                raise ConfigError(f"schedule {schedule.name!r}: {exc}") from None
            sample = self._payload
        if sample is None or isinstance(self._task, str):
            return
        try:
            self._task.check_payload(sample)
        except PayloadError:
            fields = ", ".join(sorted(sample)) or "no fields"
            raise ConfigError(
                f"schedule {schedule.name!r}: task {self._task.name!r} does not accept the "
                f"payload its ticks would carry ({fields}); accept those arguments or pass "
                "payload=... (a dict, or a function of the tick"
                + (" and the entity" if schedule.fan_out else "")
                + ")"
            ) from None

    def payload(self, tick: Tick, entity: Entity | None) -> dict[str, Any]:
        return tick_payload(self._payload, self._fan_out, tick, entity, {"tick": tick.iso})


def tick_payload(
    rule: dict[str, Any] | Callable[..., Any] | None,
    fan_out: bool,
    tick: Tick,
    entity: Entity | None,
    default: dict[str, Any],
) -> dict[str, Any]:
    """The payload of one job of a tick, for every kind of target: without a rule ``default``
    (and the entity when the schedule fans out), a copy of a dict, or what a function of the
    tick (and the entity) returns — which must be a dict."""
    if rule is None:
        return default | {"entity": entity} if fan_out else default
    if isinstance(rule, dict):
        return dict(rule)
    made = rule(tick, entity) if fan_out else rule(tick)
    if not isinstance(made, dict):
        raise PayloadError(
            f"the payload function of this schedule returned {type(made).__name__}, not a dict"
        )
    return made


KeyRule = str | Callable[..., str] | None


class Schedule:
    """A cron schedule whose ticks enqueue jobs, declared in code.

    Built by ``@ledger.schedule(...)`` (see there for the options) or directly with a target
    and added with ``ledger.schedules.add(schedule)``. Everything is checked here, when the
    schedule is built: a bad expression, zone, key template or option raises ``ConfigError``.
    """

    def __init__(
        self,
        name: str,
        cron: str,
        *,
        target: ScheduleTarget,
        tz: str = "UTC",
        for_each: Callable[[Tick], Iterable[Entity]] | None = None,
        key: KeyRule = None,
        catch_up: CatchUp | str = CatchUp.LATEST,
        max_catch_up: int = 100,
        grace: float | timedelta = 300.0,
        cohort: str = DEFAULT_COHORT,
        batch_size: int = 1000,
    ):
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(
                f"schedule name {name!r} is invalid: 1-200 characters, letters, digits and _ . : -"
            )
        self.name = name
        self.spec = CronSpec(cron, tz)
        if not isinstance(target, ScheduleTarget):
            raise ConfigError(f"schedule {name!r}: target {target!r} is not a ScheduleTarget")
        self.target = target
        if for_each is not None and not callable(for_each):
            raise ConfigError(f"schedule {name!r}: for_each must be a function of the tick")
        self.for_each = for_each
        try:
            self.catch_up = CatchUp(catch_up)
        except ValueError:
            raise ConfigError(
                f"schedule {name!r}: catch_up must be one of skip, latest, all; got {catch_up!r}"
            ) from None
        self.max_catch_up = whole_number(
            max_catch_up, 1, 10_000, f"schedule {name!r}: max_catch_up"
        )
        self.grace_seconds = _grace(grace, name)
        if not isinstance(cohort, str) or not _NAME.match(cohort):
            raise ConfigError(
                f"schedule {name!r}: cohort {cohort!r} is invalid: letters, digits and _ . : -"
            )
        self.cohort = cohort
        self.batch_size = whole_number(batch_size, 1, 10_000, f"schedule {name!r}: batch_size")
        self._samples = [self.tick(t) for t in _sample_ticks(self.spec)]
        self.key = key
        self.key_template = self._check_key(key)
        target.check(self)

    def __repr__(self) -> str:
        return f"<Schedule {self.name!r} {self.spec.expression!r} tz={self.spec.tz!r}>"

    @property
    def fan_out(self) -> bool:
        """True when an eligibility function fans each tick out into one job per entity."""
        return self.for_each is not None

    @property
    def cron(self) -> str:
        return self.spec.expression

    @property
    def tz(self) -> str:
        return self.spec.tz

    # -- ticks and keys ------------------------------------------------------------------------

    def tick(self, time: datetime) -> Tick:
        """The tick of this schedule at ``time`` (an aware datetime)."""
        utc = time.astimezone(UTC)
        return Tick(self.name, utc, utc.astimezone(self.spec.zone))

    def next_tick(self, after: datetime) -> datetime | None:
        return self.spec.next_after(after)

    def key_for(self, tick: Tick, entity: Entity | None = None) -> str:
        """The job key of this tick (and entity)."""
        if callable(self.key):
            made = self.key(tick, entity) if self.fan_out else self.key(tick)
            if not isinstance(made, str):
                raise PayloadError(
                    f"schedule {self.name!r}: the key function returned {type(made).__name__}"
                )
            return made
        return self.key_template.format(**tick.labels(), entity=entity)

    def _check_key(self, key: KeyRule) -> str:
        if callable(key):
            return f"<{getattr(key, '__qualname__', 'function')}>"
        if key is None:
            return self._default_key()
        if not isinstance(key, str) or not key:
            raise ConfigError(
                f"schedule {self.name!r}: key must be a template such as '{{entity}}:{{week}}' "
                "or a function of the tick"
            )
        allowed = set(_LABELS) | {"entity"}
        try:
            fields = {f for _, f, _, _ in string.Formatter().parse(key) if f is not None}
        except ValueError as exc:
            raise ConfigError(f"schedule {self.name!r}: key template {key!r}: {exc}") from None
        unknown = fields - allowed
        if unknown:
            raise ConfigError(
                f"schedule {self.name!r}: key template {key!r} uses unknown field(s) "
                f"{', '.join(sorted(unknown))}; available: "
                + ", ".join(f"{{{f}}}" for f in (*_LABELS, "entity"))
            )
        if self.fan_out and "entity" not in fields:
            raise ConfigError(
                f"schedule {self.name!r}: a fan-out key needs {{entity}} (e.g. "
                f"'{{entity}}:{{week}}'), or every entity would get the same key"
            )
        if not self.fan_out and "entity" in fields:
            raise ConfigError(
                f"schedule {self.name!r}: key template {key!r} uses {{entity}}, but the schedule "
                "has no for_each eligibility function"
            )
        clash = self._first_clash(key)
        if clash is not None:
            first, second = clash
            raise ConfigError(
                f"schedule {self.name!r}: key template {key!r} gives ticks {first} and {second} "
                "the same key, so the second would create nothing; use a finer field such as "
                "{date} or {tick}"
            )
        return key

    def _default_key(self) -> str:
        prefix = "{entity}" if self.fan_out else "{schedule}"
        for period in _PERIODS:
            template = f"{prefix}:{{{period}}}"
            if self._first_clash(template) is None:
                return template
        return f"{prefix}:{{tick}}"  # pragma: no cover - tick labels are always distinct

    def _first_clash(self, template: str) -> tuple[str, str] | None:
        seen: dict[str, str] = {}
        for tick in self._samples:
            key = template.format(**tick.labels(), entity=1)
            if key in seen:
                return seen[key], tick.iso
            seen[key] = tick.iso
        return None

    # -- catch-up ------------------------------------------------------------------------------

    def plan(
        self, due: Sequence[datetime], started: Iterable[datetime], now: datetime
    ) -> list[datetime]:
        """Which of the ``due`` ticks (oldest first) to run now; the others are skipped.

        Ticks at most ``grace`` seconds old are on time and always run. Ticks already started
        (left running by a scheduler that died) always run: they must be finished. The catch-up
        policy decides about the older, missed ones.
        """
        grace = timedelta(seconds=self.grace_seconds)
        on_time = [t for t in due if now - t <= grace]
        missed = [t for t in due if now - t > grace]
        chosen: list[datetime]
        if self.catch_up is CatchUp.SKIP:
            chosen = []
        elif self.catch_up is CatchUp.LATEST:
            chosen = missed[-1:] if missed and not on_time else []
        else:
            chosen = missed[-self.max_catch_up :]
        started_set = set(started)
        run = set(chosen) | set(on_time) | {t for t in due if t in started_set}
        return sorted(run)

    def definition(self) -> ScheduleDefinition:
        return ScheduleDefinition(
            name=self.name,
            cohort=self.cohort,
            cron=self.spec.expression,
            time_zone=self.spec.tz,
            catch_up=self.catch_up,
            max_catch_up=self.max_catch_up,
            grace_seconds=self.grace_seconds,
            target=self.target.label,
            key_template=self.key_template,
            fan_out=self.fan_out,
        )


def _grace(value: float | timedelta, name: str) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
        or seconds < 0
    ):
        raise ConfigError(f"schedule {name!r}: grace must be >= 0 seconds, got {value!r}")
    return float(seconds)


def _sample_ticks(spec: CronSpec) -> list[datetime]:
    """The first ticks after a fixed moment: the same in every process, so that every scheduler
    derives the same default key."""
    ticks, _ = spec.ticks_between(_SAMPLE_FROM, _SAMPLE_FROM + timedelta(days=366 * 30), 128)
    return ticks[:_SAMPLE_TICKS]


# -- the book of schedules --------------------------------------------------------------------


@dataclass(frozen=True)
class ScheduleStatus:
    """A schedule as an operator sees it: its row, its next and last tick, its cohort's leader."""

    row: ScheduleRow
    next_tick: datetime | None
    """The first tick after the cursor (in the past when the scheduler is behind)."""
    last_tick: TickRow | None
    leader: LeaderLease | None
    """The cohort's lease (possibly expired), or None when no scheduler ever led it."""

    @property
    def declared_by_leader(self) -> bool:
        """False when the cohort's current leader did not declare this schedule (it was removed
        from the code, or renamed): nobody ticks it."""
        return (
            self.leader is not None
            and self.leader.valid
            and self.row.declared_at >= self.leader.acquired_at
        )

    def to_dict(self) -> dict[str, Any]:
        row, last, leader = self.row, self.last_tick, self.leader
        return {
            "name": row.name,
            "cohort": row.cohort,
            "cron": row.cron,
            "time_zone": row.time_zone,
            "target": row.target,
            "key": row.key_template,
            "fan_out": row.fan_out,
            "catch_up": row.catch_up.value,
            "max_catch_up": row.max_catch_up,
            "grace_seconds": row.grace_seconds,
            "paused": row.paused,
            "pause_changed_at": _iso(row.pause_changed_at),
            "pause_changed_by": row.pause_changed_by,
            "pause_note": row.pause_note,
            "cursor": _iso(row.cursor),
            "next_tick": _iso(self.next_tick),
            "skipped_ticks": row.skipped_ticks,
            "declared_by_leader": self.declared_by_leader,
            "last_tick": None if last is None else tick_dict(last),
            "leader": None if leader is None else leader_dict(leader),
        }


def tick_dict(tick: TickRow) -> dict[str, Any]:
    return {
        "schedule": tick.schedule,
        "tick_time": _iso(tick.tick_time),
        "state": tick.state.value,
        "leader": tick.leader,
        "term": tick.term,
        "runs": tick.runs,
        "jobs_created": tick.jobs_created,
        "jobs_existing": tick.jobs_existing,
        "conflicts": tick.conflicts,
        "started_at": _iso(tick.started_at),
        "finished_at": _iso(tick.finished_at),
        "error": tick.error,
    }


def leader_dict(lease: LeaderLease) -> dict[str, Any]:
    return {
        "name": lease.name,
        "holder": lease.holder,
        "term": lease.term,
        "valid": lease.valid,
        "until": _iso(lease.until),
        "acquired_at": _iso(lease.acquired_at),
        "renewed_at": _iso(lease.renewed_at),
    }


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat().replace("+00:00", "Z")


class ScheduleHost(Protocol):
    """What the book of schedules needs of its ledger (``jobledger.Ledger`` is one)."""

    @property
    def backend(self) -> Backend: ...

    def _schedules_declared(self) -> None: ...


class ScheduleBook:
    """The schedules of one ledger (``ledger.schedules``): those declared in code, and the
    operator's view of those stored in the ledger.

    Settings for the schedulers this process runs (inside workers, or ``jobledger
    scheduler``): ``lease_seconds`` (30), ``poll_interval`` (1 s), ``clock`` (None: the
    database's clock), ``run_in_workers`` (True; ``jobledger worker --no-scheduler`` turns it
    off).
    """

    def __init__(self, ledger: ScheduleHost):
        self._ledger = ledger
        self._schedules: dict[str, Schedule] = {}
        self.run_in_workers = True
        self.lease_seconds = 30.0
        self.poll_interval = 1.0
        self.clock: Callable[[], datetime] | None = None

    def __len__(self) -> int:
        return len(self._schedules)

    def __iter__(self) -> Iterator[Schedule]:
        return iter(list(self._schedules.values()))

    def __contains__(self, name: object) -> bool:
        return name in self._schedules

    # -- declared in code ----------------------------------------------------------------------

    def add(self, schedule: Schedule) -> Schedule:
        """Declare a schedule. A second schedule with the same name, or one that would give the
        same keys in the same queue as another, raises ``ConfigError``."""
        existing = self._schedules.get(schedule.name)
        if existing is not None and existing is not schedule:
            raise ConfigError(f"a schedule named {schedule.name!r} is already declared")
        for other in self._schedules.values():
            if (
                other is not schedule
                and not callable(other.key)
                and not callable(schedule.key)
                and other.key_template == schedule.key_template
                and "{schedule}" not in schedule.key_template
                and _queue_of(other.target) == _queue_of(schedule.target)
            ):
                raise ConfigError(
                    f"schedules {other.name!r} and {schedule.name!r} would give the same keys "
                    f"({schedule.key_template!r}) in queue {_queue_of(schedule.target)!r}; give "
                    "one of them another key= template"
                )
        if not self._schedules:
            self._ledger._schedules_declared()
        self._schedules[schedule.name] = schedule
        return schedule

    def get(self, name: str) -> Schedule:
        try:
            return self._schedules[name]
        except KeyError:
            raise ConfigError(f"no schedule named {name!r} is declared") from None

    def declared(self, cohorts: Iterable[str] | None = None) -> list[Schedule]:
        """The schedules declared in this process, of some cohorts or all."""
        wanted = None if cohorts is None else set(cohorts)
        return [s for s in self._schedules.values() if wanted is None or s.cohort in wanted]

    def cohorts(self) -> list[str]:
        return sorted({s.cohort for s in self._schedules.values()})

    # -- stored in the ledger ------------------------------------------------------------------

    def status(self, now: datetime | None = None) -> list[ScheduleStatus]:
        """Every schedule the ledger knows, with its next and last tick and its leader."""
        explicit_now(now)
        backend = self._ledger.backend
        leaders = {lease.name: lease for lease in backend.leader.leases(now)}
        result = []
        for row in backend.schedules.all():
            last = backend.schedules.ticks(row.name, limit=1)
            try:
                next_tick = CronSpec(row.cron, row.time_zone).next_after(row.cursor)
            except ConfigError:
                next_tick = None
            result.append(
                ScheduleStatus(
                    row=row,
                    next_tick=next_tick,
                    last_tick=last[0] if last else None,
                    leader=leaders.get(leader_name(row.cohort)),
                )
            )
        return result

    def row(self, name: str) -> ScheduleRow:
        """The schedule named ``name`` as the ledger keeps it, or ``NotFound``."""
        lookup_text(name, "a schedule's name", f"no schedule named {name!r} in the ledger")
        for row in self._ledger.backend.schedules.all():
            if row.name == name:
                return row
        raise NotFound(f"no schedule named {name!r} in the ledger")

    def ticks(
        self, name: str | None = None, limit: int = 20, state: TickState | str | None = None
    ) -> list[TickRow]:
        """Recorded ticks, most recent first, with the jobs each created: at most ``limit``
        (1 to 10,000), in ``state`` if given; anything else is a ``ConfigError``."""
        if name is not None:
            self.row(name)
        whole_number(limit, 1, 10_000, "limit")
        try:
            wanted = None if state is None else TickState(state)
        except ValueError:
            states = ", ".join(s.value for s in TickState)
            raise ConfigError(f"state must be one of {states}, got {state!r}") from None
        return self._ledger.backend.schedules.ticks(name, limit, wanted)

    def leaders(self, now: datetime | None = None) -> list[LeaderLease]:
        """The scheduling authorities: one lease per cohort (the other singletons' leases —
        the relay's, the pruner's — are not schedulers')."""
        explicit_now(now)
        prefix = leader_name("")
        return [x for x in self._ledger.backend.leader.leases(now) if x.name.startswith(prefix)]

    def pause(
        self, name: str, *, actor: str, note: str | None = None, now: datetime | None = None
    ) -> ScheduleRow:
        """Stop a schedule from ticking until it is resumed. A tick already running finishes."""
        explicit_now(now)
        if not actor:
            raise ConfigError("pause needs an actor; it is recorded on the schedule")
        operator_text(actor, "actor"), operator_text(note, "note", optional=True)
        lookup_text(name, "a schedule's name", f"no schedule named {name!r} in the ledger")
        return self._ledger.backend.schedules.pause(name, True, actor, note, now)

    def resume(
        self,
        name: str,
        *,
        actor: str,
        note: str | None = None,
        skip_missed: bool = False,
        now: datetime | None = None,
    ) -> ScheduleRow:
        """Let a paused schedule tick again. The ticks it missed meanwhile are caught up by its
        catch-up policy, or, with ``skip_missed``, skipped: it carries on from now."""
        explicit_now(now)
        if not actor:
            raise ConfigError("resume needs an actor; it is recorded on the schedule")
        operator_text(actor, "actor"), operator_text(note, "note", optional=True)
        row = self.row(name)  # NotFound for a name no schedule can have (lookup_text)
        cursor, skipped = None, 0
        if skip_missed:
            clock = now or datetime.now(UTC)
            missed, _ = CronSpec(row.cron, row.time_zone).ticks_between(row.cursor, clock)
            cursor, skipped = clock, len(missed)
        return self._ledger.backend.schedules.pause(
            name, False, actor, note, now, cursor=cursor, skipped=skipped
        )


def _queue_of(target: ScheduleTarget) -> str:
    if target.queue is not None:
        return target.queue
    task = target.task
    return DEFAULT_QUEUE if isinstance(task, str) else task.queue
