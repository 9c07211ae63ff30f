"""The chaos run (SPEC §8 drill 7), shared by ``tests/chaos`` and ``bench/chaos.py``.

Worker processes drain thousands of jobs whose handler records an effect through the fake
provider; a monkey SIGKILLs a random worker after every so many finished jobs (and fault points
kill them between the effect and its record, and between the handler and its completion, after
so many passes); each dead worker is restarted; on PostgreSQL the server itself is crashed and
restarted mid-run. Every fault is paced by the work done, never by the clock, and the run fails
when it stops moving, not when it is slow: on a busy machine it takes longer and sees the same
faults per job. Afterwards the run's data —
jobs, attempts, effects, what the provider accepted — is checked, and can be exported as JSON
lines (one object per line, ``"kind"`` first) for a history checker.
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from jobledger import BackendUnavailable, JobFilter, JobState, Ledger
from jobledger.testing.fakeprovider import FakeProvider, ProviderScript
from jobledger.testing.history import HistoryRecorder, HistoryReport, check_paths
from jobledger.testing.processes import WorkerProcesses

from .pgcluster import PrivatePostgres
from .processes import ROOT
from .waiting import Patience

QUEUE = "chaos"
APP = "tests.apps.chaos_app:ledger"


@dataclass
class ChaosConfig:
    """How hard to shake. The defaults are the CI run."""

    jobs: int = 3000
    workers: int = 4
    concurrency: int = 4
    batch_size: int = 10
    lease_seconds: float = 2.0
    kill_every: tuple[int, int] = (60, 150)
    """The monkey SIGKILLs a random worker each time this many more jobs have finished (drawn
    uniformly): its pace follows the work done, not the clock, so a busy machine gets as many
    kills per job as an idle one."""
    stop_killing_at: float = 0.85
    """Fraction of jobs finished after which the monkey rests, so the run can end."""
    fault_points: tuple[str, ...] = ("effect.after_call", "worker.before_finish")
    """Fault points at which a worker SIGKILLs itself: between the provider's acceptance and the
    effect's record, and between the handler's return and its completion."""
    fault_kill_after: tuple[int, int] = (1, 660)
    """Each worker started SIGKILLs itself at each fault point the N-th time it reaches it, N
    drawn uniformly for each worker and point (``JOBLEDGER_FAULTS`` ``kill@N``): about one kill
    per 330 passes through each point, whatever the machine's speed."""
    db_restart_at: tuple[float, ...] = (0.4,)
    """Fractions of jobs finished at which the PostgreSQL server is crashed and restarted."""
    db_down_seconds: float = 1.0
    refuse_every: int = 150
    """Every n-th recipient is refused for good (400): those jobs are dead by policy."""
    rate_limit_every: int = 40
    """Every n-th recipient gets one 429 with Retry-After first."""
    stall_seconds: float = 60.0
    """The run fails when no job has finished for this long (machine seconds, see
    ``waiting.py``): a slow run is not a broken one, a stuck one is."""
    grouped_every: int = 2
    """Every n-th job carries a group, one of ``groups`` round the recipients (0: none does):
    the workers' claims take both kinds, the grouped ones round the groups (on PostgreSQL in
    one statement, the queue having no group limits)."""
    groups: int = 40
    seed: int | None = None
    """Seeds the monkey's choices and the fault points' N (a random seed when None; the figures
    say which)."""

    def group_of(self, n: int) -> str | None:
        """The group of the job for recipient ``n`` (``grouped_every``), or None."""
        every = self.grouped_every
        return f"tenant-{n % self.groups}" if every and n % every == 0 else None


@dataclass
class ChaosFigures:
    """What happened, in numbers."""

    backend: str
    jobs: int = 0
    grouped: int = 0
    """Jobs with a group, as the ledger has them at the end."""
    done: int = 0
    dead: int = 0
    kills: int = 0
    """SIGKILLs from the monkey."""
    fault_kills: int = 0
    """Workers that SIGKILLed themselves at a fault point."""
    restarts: int = 0
    """Worker processes started to replace killed ones."""
    db_restarts: int = 0
    seed: int = 0
    startup_failures: int = 0
    """Workers that started while the database was down, said so, and exited (code 2)."""
    attempts: int = 0
    lease_expiries: int = 0
    stale_writes: int = 0
    """Writes refused because their lease token was stale (``lease_lost`` events)."""
    effects: int = 0
    provider_accepted: int = 0
    provider_repeats_absorbed: int = 0
    duplicates: int = 0
    """Messages the provider sent twice: must be 0."""
    seconds: float = 0.0

    def line(self) -> str:
        return (
            f"chaos [{self.backend}]: {self.jobs} jobs ({self.grouped} with a group; "
            f"{self.done} done, {self.dead} dead) in "
            f"{self.seconds:.1f} s; kills {self.kills} + {self.fault_kills} at fault points, "
            f"worker restarts {self.restarts} ({self.startup_failures} after failing to "
            f"connect), database restarts {self.db_restarts}; attempts "
            f"{self.attempts}, lease expiries {self.lease_expiries}, stale writes refused "
            f"{self.stale_writes}; effects {self.effects}, provider accepted "
            f"{self.provider_accepted}, repeats absorbed {self.provider_repeats_absorbed}, "
            f"duplicates {self.duplicates}; seed {self.seed}"
        )


@dataclass
class ChaosRun:
    """A finished run: its figures, what broke (``problems``), and its data for export."""

    config: ChaosConfig
    figures: ChaosFigures
    problems: list[str] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    effects: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    provider_messages: list[dict[str, Any]] = field(default_factory=list)
    log_tail: str = ""
    history: HistoryReport | None = None
    """The history checker's verdict on the run's recorded history (see ``jobledger.testing.history``)."""

    def export_jsonl(self, path: Path) -> int:
        """Write the run as JSON lines: a ``run`` line, then one line per job, attempt, event,
        effect and provider message. Returns the number of lines."""
        lines = [{"kind": "run", "config": asdict(self.config), "figures": asdict(self.figures)}]
        for kind, rows in (
            ("job", self.jobs),
            ("attempt", self.attempts),
            ("event", self.events),
            ("effect", self.effects),
            ("provider_message", self.provider_messages),
        ):
            lines.extend({"kind": kind, **row} for row in rows)
        with open(path, "w", encoding="utf-8") as out:
            for line in lines:
                out.write(json.dumps(line, default=_iso) + "\n")
        return len(lines)


def _iso(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def run_chaos(
    url: str,
    workdir: Path,
    config: ChaosConfig | None = None,
    *,
    server: PrivatePostgres | None = None,
    say: Callable[[str], None] = lambda _: None,
    history: Path | None = None,
) -> ChaosRun:
    """Run the chaos test against ``url`` (a fresh database); ``server`` is the private
    PostgreSQL to crash and restart, when the database is one.

    ``history`` (a directory): every worker, the provider and this harness record the run's
    history there, and the history checker judges it at the end (``run.history``)."""
    config = config or ChaosConfig()
    seed = config.seed if config.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    figures = ChaosFigures(
        backend="postgres" if url.startswith("postgres") else "sqlite", seed=seed
    )
    recipients = range(config.jobs)
    refused = {n for n in recipients if n % config.refuse_every == config.refuse_every - 1}
    script = ProviderScript(
        rate_limit={f"recipient-{n}": 1 for n in recipients if n % config.rate_limit_every == 7},
        retry_after_seconds=1,
        refuse={f"recipient-{n}" for n in refused},
    )
    ledger = Ledger(url)
    ledger.migrate()
    ledger.task(
        lambda ctx, n: None, name="deliver", queue=QUEUE, lease_seconds=config.lease_seconds
    )
    harness = HistoryRecorder(history, host="harness") if history else None
    provider_history = HistoryRecorder(history, host="provider") if history else None
    keys = [f"message-{n}" for n in recipients]
    results = ledger.enqueue_many(
        "deliver",
        [
            {"payload": {"n": n}, "key": key, "group": config.group_of(n)}
            for n, key in zip(recipients, keys, strict=True)
        ],
    )
    if harness is not None:
        for key, result in zip(keys, results, strict=True):
            harness.enqueued(QUEUE, key, result.enqueued())
    figures.jobs = len(results)
    started = time.monotonic()
    worker_env = {"JOBLEDGER_HISTORY": str(history)} if history else {}
    with FakeProvider(script, history=provider_history) as provider:
        pool = WorkerProcesses(
            APP,
            url,
            workdir,
            env={
                "PYTHONPATH": str(ROOT),
                "CHAOS_PROVIDER_URL": provider.url,
                "CHAOS_LEASE_SECONDS": str(config.lease_seconds),
                **worker_env,
            },
            args=(
                "--concurrency",
                str(config.concurrency),
                "--batch-size",
                str(config.batch_size),
                "--poll-interval",
                "0.05",
                "--rescue-interval",
                "0.2",
                "--grace",
                "3",
                "--log-level",
                "warning",
            ),
        )
        try:
            for _ in range(config.workers):
                pool.start(faults=_fault_kills(config, rng))
            _shake(ledger, pool, config, figures, rng, server, say, harness)
        finally:
            pool.stop()
        figures.seconds = time.monotonic() - started
        run = _collect(ledger, provider, config, figures, refused)
    if harness is not None and history is not None:
        harness.snapshot(ledger.backend, [QUEUE])
        harness.close()
        assert provider_history is not None
        provider_history.close()
        run.history = check_paths([history], f"chaos [{figures.backend}]")
        if not run.history.ok:
            run.problems.append(run.history.summary(examples=10))
        if run.problems:
            run.log_tail = "\n".join(pool.log_tail(p, 10) for p in pool.procs[-3:])
    ledger.close()
    return run


def _counts(ledger: Ledger) -> str:
    """The queue's jobs by state, for a stalled run's message."""
    try:
        [stats] = [s for s in ledger.stats() if s.queue == QUEUE] or [None]
    except BackendUnavailable as exc:
        return f"(unknown: {exc})"
    counts = stats.counts if stats is not None else {}
    return (
        f"{sum(counts.values())} jobs ({', '.join(f'{n} {s}' for s, n in sorted(counts.items()))})"
    )


def _fault_kills(config: ChaosConfig, rng: random.Random) -> str:
    """One worker's ``JOBLEDGER_FAULTS``: a kill at the N-th pass through each fault point."""
    return ",".join(
        f"{point}=kill@{rng.randint(*config.fault_kill_after)}" for point in config.fault_points
    )


def _finished(ledger: Ledger) -> int | None:
    try:
        [stats] = [s for s in ledger.stats() if s.queue == QUEUE] or [None]
    except BackendUnavailable:
        return None  # the server is restarting
    if stats is None:
        return 0
    return stats.counts.get("done", 0) + stats.counts.get("dead", 0)


def _shake(
    ledger: Ledger,
    pool: WorkerProcesses,
    config: ChaosConfig,
    figures: ChaosFigures,
    rng: random.Random,
    server: PrivatePostgres | None,
    say: Callable[[str], None],
    harness: HistoryRecorder | None = None,
) -> None:
    next_kill = rng.randint(*config.kill_every)
    restarts_due = sorted(config.db_restart_at) if server is not None else []
    finished = 0
    patience = Patience(config.stall_seconds)
    replaced: set[int] = set()
    by_monkey: set[int] = set()
    while True:
        # Replace every worker that died: killed by the monkey or at a fault point.
        for proc in pool.procs:
            if proc.pid in replaced or proc.poll() is None:
                continue
            replaced.add(proc.pid)
            last_line = pool.log_tail(proc, 1)
            if proc.returncode == 2 and ("unavailable" in last_line or "locked" in last_line):
                # Started while the database was down (or, on SQLite, its lock busy for the whole
                # busy timeout): it says so and exits, and its supervisor (systemd, Kubernetes;
                # here, us) starts it again.
                figures.startup_failures += 1
            elif proc.returncode != -signal.SIGKILL:
                raise AssertionError(
                    f"worker {proc.pid} exited with {proc.returncode}: {pool.log_tail(proc, 20)}"
                )
            elif proc.pid not in by_monkey:
                figures.fault_kills += 1
            pool.start(faults=_fault_kills(config, rng))
            figures.restarts += 1
        progress = finished / figures.jobs
        if finished >= next_kill and progress < config.stop_killing_at:
            victims = pool.alive()
            if victims:
                victim = rng.choice(victims)
                by_monkey.add(victim.pid)
                pool.kill(victim)
                figures.kills += 1
                if harness is not None:
                    harness.fault("sigkill", pid=victim.pid)
            next_kill = finished + rng.randint(*config.kill_every)
        if restarts_due and progress >= restarts_due[0]:
            restarts_due.pop(0)
            if harness is not None:
                harness.fault("database_restart", phase="start")
            down = server.restart(config.db_down_seconds)  # type: ignore[union-attr]
            if harness is not None:
                harness.fault("database_restart", phase="end")
            figures.db_restarts += 1
            say(f"database crashed and restarted at {progress:.0%} (down {down:.1f} s)")
        count = _finished(ledger)
        if count is not None:
            if count > finished:
                patience.reset()
            finished = count
            if finished >= figures.jobs and not restarts_due:
                return
        if patience.expired():
            raise AssertionError(
                f"chaos run stalled at {finished} of {figures.jobs} jobs finished: "
                f"{patience.describe()}; the ledger holds {_counts(ledger)}; {figures.line()}"
            )
        time.sleep(0.05)


def _collect(
    ledger: Ledger,
    provider: FakeProvider,
    config: ChaosConfig,
    figures: ChaosFigures,
    refused: set[int],
) -> ChaosRun:
    run = ChaosRun(config, figures)
    jobs = ledger.jobs(JobFilter(queue=QUEUE))
    backend = ledger.backend
    effects_by_key: dict[str, list[dict[str, Any]]] = {}
    for job in jobs:
        run.jobs.append(
            {
                "id": job.id,
                "key": job.key,
                "state": job.state.value,
                "group": job.group,
                "attempts": job.attempts,
                "attempt_limit": job.attempt_limit,
                "last_error_class": job.last_error_class,
                "created_at": job.created_at,
                "finished_at": job.finished_at,
            }
        )
        for a in backend.history.attempts(job.id):
            run.attempts.append(
                {
                    "job_id": a.job_id,
                    "attempt": a.attempt,
                    "worker": a.worker,
                    "lease_token": a.lease_token,
                    "started_at": a.started_at,
                    "finished_at": a.finished_at,
                    "outcome": a.outcome.value if a.outcome else None,
                    "error_class": a.error_class,
                }
            )
        for e in backend.history.events(job.id):
            run.events.append(
                {"job_id": e.job_id, "at": e.at, "type": e.kind, "actor": e.actor, "note": e.note}
            )
        effects = backend.effects.all(QUEUE, job.key)
        effects_by_key[job.key] = effects
        run.effects.extend(
            {
                "key": f["key"],
                "effect": f["effect"],
                "job_id": f["job_id"],
                "attempt": f["attempt"],
                "recorded_at": f["recorded_at"],
            }
            for f in effects
        )
    with provider._lock:
        run.provider_messages = [
            {"idempotency_key": key, "to": m["to"], "at": m["at"]}
            for key, m in provider.accepted.items()
        ]
    stats = provider.stats()
    by_state = {s: sum(1 for j in jobs if j.state is s) for s in JobState}
    figures.done = by_state[JobState.DONE]
    figures.dead = by_state[JobState.DEAD]
    figures.grouped = sum(1 for j in jobs if j.group is not None)
    figures.attempts = sum(j.attempts for j in jobs)
    figures.lease_expiries = sum(1 for a in run.attempts if a["outcome"] == "lease_expired")
    figures.stale_writes = sum(1 for e in run.events if e["type"] == "lease_lost")
    figures.effects = len(run.effects)
    figures.provider_accepted = stats["accepted"]
    figures.provider_repeats_absorbed = stats["duplicates"]
    figures.duplicates = stats["duplicate_sends"]

    problems = run.problems
    if len(jobs) != figures.jobs:
        problems.append(f"{figures.jobs} jobs enqueued, {len(jobs)} in the ledger (lost some)")
    expected = sum(1 for n in range(figures.jobs) if config.group_of(n) is not None)
    if figures.grouped != expected:
        problems.append(f"{expected} jobs enqueued with a group, {figures.grouped} have one")
    unfinished = [j.key for j in jobs if not j.state.is_final]
    if unfinished:
        problems.append(f"{len(unfinished)} jobs not finished: {unfinished[:5]}")
    refused_keys = {f"message-{n}" for n in refused}
    for job in jobs:
        if job.state is JobState.DEAD:
            by_policy = job.key in refused_keys or job.attempts >= job.attempt_limit
            if not by_policy:
                problems.append(f"{job.key} is dead without cause: {job.last_error}")
        elif job.key in refused_keys:
            problems.append(f"{job.key} was refused by the provider, yet is {job.state.value}")
        effects = effects_by_key.get(job.key, [])
        if job.state is JobState.DONE and [e["effect"] for e in effects] != ["email"]:
            problems.append(f"{job.key} is done with effects {[e['effect'] for e in effects]}")
        if job.key in refused_keys and effects:
            problems.append(f"{job.key} was refused, yet has effects recorded")
    if figures.duplicates:
        problems.append(f"the provider sent {figures.duplicates} messages twice")
    accepted_keys = {m["idempotency_key"] for m in run.provider_messages}
    done_keys = {f"{j.key}:email" for j in jobs if j.state is JobState.DONE}
    if accepted_keys != done_keys:
        problems.append(
            f"the provider accepted {len(accepted_keys)} messages for {len(done_keys)} done jobs: "
            f"{sorted(accepted_keys ^ done_keys)[:5]}"
        )
    if figures.attempts < figures.jobs:
        problems.append(f"{figures.attempts} attempts for {figures.jobs} jobs")
    return run
