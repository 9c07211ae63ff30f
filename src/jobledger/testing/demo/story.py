"""The weekly digest story: schedule, run with crashes, report.

1. A throw-away database (a temporary SQLite file, or a fresh schema on PostgreSQL).
2. A fake e-mail provider on 127.0.0.1 that honours ``Idempotency-Key``, answers some customers
   429 with ``Retry-After`` a few times, accepts one customer's message and then lets the request
   time out, and permanently refuses one customer.
3. The weekly digest schedule (Mondays 06:00 Europe/Berlin, fanned out to one job per active
   customer, key ``customer:week``) fires for this week's Monday; a second scheduler pass over
   the same tick — a restarted or second scheduler — creates nothing.
4. Worker processes drain the queue; one of them is killed with SIGKILL while it holds leases,
   and restarted. Its jobs come back when their leases expire.
5. The report: every active customer got exactly one message, except the refused one, whose job
   is dead — waiting for an operator.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit
from zoneinfo import ZoneInfo

from ..._ledger import Ledger
from ..._records import AttemptOutcome, JobFilter, JobState
from ...backends import DatabaseURL
from ...errors import ConfigError, JobledgerError
from ..fakeprovider import FakeProvider, ProviderScript
from ..processes import WorkerProcesses
from .app import QUEUE, register

__all__ = ["DemoReport", "Snapshot", "run_demo"]


@dataclass
class Snapshot:
    """Progress while the demo runs."""

    total: int
    finished: int
    attempts: int
    lease_expiries: int
    kills: int
    phase: str


@dataclass
class DemoReport:
    """What the demo saw. ``problems`` is empty when the story came out as it must."""

    database: str
    week: str
    customers: int
    active_customers: int
    scheduled: int
    scheduled_again: int
    jobs: int
    done: int
    dead: int
    attempts: int
    retries: dict[str, int]
    lease_expiries: int
    effects_recorded: int
    workers: int
    killed_worker: str
    killed_holding: int
    restarts: int
    provider_accepted: int
    provider_repeats_absorbed: int
    provider_duplicate_sends: int
    provider_rate_limited: int
    provider_refused: int
    provider_timeouts: int
    dead_jobs: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    kept: bool = False
    """True when the database was kept (``--keep``): ``database`` names it."""
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def iso_week(day: datetime | None = None) -> str:
    year, week, _ = (day or datetime.now(UTC)).isocalendar()
    return f"{year}-W{week:02d}"


def _this_weeks_tick(now: datetime | None = None) -> datetime:
    """The weekly digest's latest tick, in UTC: this week's Monday 06:00 in Berlin, or last
    week's before it (from Monday 00:00 to 06:00 in Berlin this week's tick is still to come,
    and its jobs would not be due)."""
    local = (now or datetime.now(UTC)).astimezone(ZoneInfo("Europe/Berlin"))
    monday = (local - timedelta(days=local.weekday())).replace(
        hour=6, minute=0, second=0, microsecond=0
    )
    if monday > local:
        monday -= timedelta(days=7)  # wall-clock arithmetic: still 06:00 in Berlin
    return monday.astimezone(UTC)


def _fresh_database(url: str | None, workdir: Path) -> tuple[str, Callable[[Ledger], None]]:
    """The database URL the demo uses, and how to throw it away afterwards."""
    if url is None:
        return f"sqlite:///{workdir / 'demo.db'}", lambda ledger: None
    parsed = DatabaseURL.parse(url)
    if parsed.dialect == "sqlite":
        if parsed.sqlite_path.exists():
            raise ConfigError(
                f"the demo needs a fresh database, and {parsed.redacted} exists; "
                "name a new file or leave out --url"
            )
        return url, lambda ledger: parsed.sqlite_path.unlink(missing_ok=True)
    # PostgreSQL: a schema of the demo's own, dropped afterwards.
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query["schema"] = f"jobledger_demo_{uuid.uuid4().hex[:8]}"
    fresh = urlunsplit(parts._replace(query=urlencode(query)))
    return fresh, lambda ledger: ledger.backend.schema_drop()


def run_demo(
    url: str | None = None,
    *,
    customers: int = 200,
    workers: int = 3,
    concurrency: int = 2,
    latency: float = 0.12,
    keep: bool = False,
    timeout: float = 180.0,
    progress: Callable[[Snapshot], None] | None = None,
) -> DemoReport:
    """Run the weekly digest story and return its report (see the module docstring)."""
    if customers < 20:
        raise ConfigError(f"the demo needs at least 20 customers, got {customers}")
    if workers < 2:
        raise ConfigError(f"the demo needs at least 2 workers (it kills one), got {workers}")
    started_at = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="jobledger-demo-"))
    db_url, throw_away = _fresh_database(url, workdir)
    everyone = list(range(4101, 4101 + customers))
    active = [c for i, c in enumerate(everyone) if i % 10 != 9]  # every tenth one has left
    rate_limited = active[3 : 3 + max(2, customers // 40)]
    slow = active[-7]
    refused = active[-3]
    script = ProviderScript(
        rate_limit={f"customer-{c}": 2 for c in rate_limited},
        retry_after_seconds=1,
        timeout_after_accept={f"customer-{slow}"},
        timeout_seconds=2.5,
        refuse={f"customer-{refused}"},
        latency_seconds=latency,
    )
    provider = FakeProvider(script).start()
    ledger = Ledger(db_url)
    pool: WorkerProcesses | None = None
    try:
        ledger.migrate()
        task = register(ledger, provider.url)

        ledger.schedule(
            "0 6 * * MON",
            tz="Europe/Berlin",
            name="weekly-digest",
            for_each=lambda tick: active,
            payload=lambda tick, customer: {"customer_id": customer, "week": tick.week},
        )(task)
        tick_time = _this_weeks_tick()
        week = iso_week(tick_time)
        # The schedule is declared just before this week's tick, then the tick fires (one job
        # per active customer). A second scheduler — another process or region, or this one
        # restarted — going over the same tick creates nothing: the tick is recorded once and
        # every key already names its job.
        ledger.scheduler().run_once(now=tick_time - timedelta(minutes=1))
        scheduled = ledger.scheduler().run_once(now=tick_time).jobs_created
        scheduled_again = (
            ledger.scheduler().run_once(now=tick_time + timedelta(minutes=1)).jobs_created
        )
        total = len(active)

        pool = WorkerProcesses(
            "jobledger.testing.demo.app:ledger",
            db_url,
            workdir,
            env={"JOBLEDGER_DEMO_PROVIDER": provider.url},
            args=(
                "--concurrency",
                str(concurrency),
                "--batch-size",
                str(concurrency),
                "--poll-interval",
                "0.1",
                "--rescue-interval",
                "0.5",
                "--log-level",
                "warning",
            ),
        )
        for _ in range(workers):
            pool.start()
        killed, holding, kills = "", 0, 0

        def snapshot(phase: str) -> Snapshot:
            stats = next(iter(ledger.stats(late_after_seconds=3600)), None)
            counts = stats.counts if stats else {}
            finished = counts.get("done", 0) + counts.get("dead", 0)
            return Snapshot(
                total,
                finished,
                sum(stats.attempts.values()) if stats else 0,
                stats.lease_expiries_last_hour if stats else 0,
                kills,
                phase,
            )

        deadline = time.monotonic() + timeout
        while True:
            snap = snapshot("running" if not killed else "after the crash")
            if progress is not None:
                progress(snap)
            if snap.finished >= total:
                break
            if time.monotonic() > deadline:
                raise JobledgerError(
                    f"the demo did not finish within {timeout:.0f} s "
                    f"({snap.finished} of {total} jobs); worker logs are in {workdir}"
                )
            if not killed and snap.finished >= total * 0.4:
                victim, _ = _holder(ledger, pool)
                if victim is not None:
                    pool.kill(victim)
                    kills += 1
                    # Count its leases after the kill: between the look and the kill it may have
                    # finished some, or all (then the next holder is killed in its turn). Now
                    # dead, it holds these until they expire.
                    holding = _held_by(ledger, victim.pid)
                    if holding:
                        killed = f"pid {victim.pid}"
                    pool.start()  # restart it
            time.sleep(0.1)
        pool.stop()
        report = DemoReport(
            database=DatabaseURL.parse(db_url).redacted
            if url or keep
            else "a throw-away SQLite file",
            week=week,
            customers=customers,
            active_customers=len(active),
            scheduled=scheduled,
            scheduled_again=scheduled_again,
            workers=workers,
            killed_worker=killed,
            killed_holding=holding,
            restarts=kills,
            seconds=round(time.monotonic() - started_at, 1),
            kept=keep,
            **_tally(ledger, provider),
        )
        report.problems = _problems(report, f"{refused}:{week}")
        return report
    finally:
        if pool is not None:
            pool.stop()
        provider.stop()
        if not keep:
            try:
                throw_away(ledger)
            finally:
                ledger.close()
                shutil.rmtree(workdir, ignore_errors=True)
        else:
            ledger.close()


def _held_by(ledger: Ledger, pid: int) -> int:
    leased = ledger.jobs(JobFilter(queue=QUEUE, states=(JobState.LEASED,)))
    return sum(1 for j in leased if j.leased_by and j.leased_by.split(":")[-2] == str(pid))


def _holder(ledger: Ledger, pool: WorkerProcesses) -> tuple[subprocess.Popen[bytes] | None, int]:
    """The live worker holding the most leases right now (None when none holds any)."""
    leased = ledger.jobs(JobFilter(queue=QUEUE, states=(JobState.LEASED,)))
    held = Counter(j.leased_by.split(":")[-2] for j in leased if j.leased_by)
    best, most = None, 0
    for proc in pool.alive():
        n = held.get(str(proc.pid), 0)
        if n > most:
            best, most = proc, n
    return best, most


def _tally(ledger: Ledger, provider: FakeProvider) -> dict[str, Any]:
    """The report's counts from what the ledger and the provider hold at the end."""
    jobs = ledger.jobs(JobFilter(queue=QUEUE))
    retries: Counter[str] = Counter()
    expiries = effects = 0
    for job in jobs:
        for attempt in ledger.backend.history.attempts(job.id):
            if attempt.outcome is AttemptOutcome.RETRY:
                retries[attempt.error_class or "?"] += 1
            elif attempt.outcome is AttemptOutcome.LEASE_EXPIRED:
                expiries += 1
        effects += len(ledger.backend.effects.all(QUEUE, job.key))
    stats = provider.stats()
    dead = [j for j in jobs if j.state is JobState.DEAD]
    return {
        "jobs": len(jobs),
        "done": sum(1 for j in jobs if j.state is JobState.DONE),
        "dead": len(dead),
        "attempts": sum(j.attempts for j in jobs),
        "retries": dict(retries.most_common()),
        "lease_expiries": expiries,
        "effects_recorded": effects,
        "provider_accepted": stats["accepted"],
        "provider_repeats_absorbed": stats["duplicates"],
        "provider_duplicate_sends": stats["duplicate_sends"],
        "provider_rate_limited": stats["rate_limited"],
        "provider_refused": stats["refused"],
        "provider_timeouts": stats["timeouts"],
        "dead_jobs": [
            {"id": j.id, "key": j.key, "attempts": j.attempts, "error": j.last_error} for j in dead
        ],
    }


def _problems(report: DemoReport, expected_dead: str) -> list[str]:
    """What came out other than the story must: empty when every check holds."""
    active = report.active_customers
    dead_keys = {d["key"] for d in report.dead_jobs}
    checks = [
        (report.scheduled == active, f"scheduled {report.scheduled} jobs for {active} customers"),
        (report.scheduled_again == 0, f"scheduling again created {report.scheduled_again} jobs"),
        (dead_keys == {expected_dead}, f"dead jobs {sorted(dead_keys)}"),
        (report.done == active - 1, f"{report.done} done of {active - 1} deliverable"),
        (
            report.provider_accepted == report.done,
            f"provider accepted {report.provider_accepted} messages for {report.done} done jobs",
        ),
        (report.effects_recorded == report.done, f"{report.effects_recorded} effects recorded"),
        (
            report.provider_duplicate_sends == 0,
            f"{report.provider_duplicate_sends} duplicate messages sent",
        ),
        (report.attempts >= report.jobs, f"{report.attempts} attempts for {report.jobs} jobs"),
        (
            bool(report.killed_worker),
            "no worker was holding a lease when the demo meant to kill one",
        ),
    ]
    return [what for ok, what in checks if not ok]
