"""Histories of runs under faults, as JSON lines, and the checker that reads them.

A **history** is what the processes of one run saw, one JSON object per line, in one file or a
directory of files (one per process). Every record has ``t`` (wall time, seconds since the
epoch), ``event``, ``host`` and ``pid``; the rest depends on the event:

========================  =======================================================================
``enqueue``               an enqueue that returned: ``queue``, ``key``, ``job``, ``created``
``enqueue_failed``        an enqueue that raised, outcome unknown: ``queue``, ``key``, ``error``
``claim``                 ``worker``, ``queue``, ``key``, ``job``, ``attempt``, ``token``,
                          ``lease_until``
``heartbeat``             a renewal accepted: the same fields, with the new ``lease_until``
``complete``              a completion accepted (the job is done): ``job``, ``attempt``, ``token``
``fail``                  a failure accepted: ``outcome`` (``retry`` or ``dead``), ``error_class``
``lease_lost``            a write refused because the token was stale: ``action``
``rescue``                this worker's rescuer closed an expired lease: ``attempt``, ``state``
``effect``                an external effect was asked for (recorded by the provider):
                          ``queue``, ``key``, ``effect``, ``idem`` (its idempotency key),
                          ``delivered`` (false when the provider absorbed a repeat)
``fault``                 a fault the harness injected: ``kind``, ``phase`` (``start``, ``end``
                          or ``instant``), ``target``
``snapshot``              the ledger's own tables at the end follow: ``expect_final``
``ledger_job``            ``job``, ``queue``, ``key``, ``task``, ``state``, ``attempts``
``ledger_attempt``        ``job``, ``attempt``, ``token``, ``worker``, ``outcome``
``ledger_event``          ``job``, ``kind``, ``actor``, ``attempt``, ``token``
``ledger_effect``         ``queue``, ``key``, ``effect``, ``job``, ``attempt``
========================  =======================================================================

Who writes what: workers record their side through ``HistoryObserver`` (``jobledger worker
--history PATH`` or ``JOBLEDGER_HISTORY``); the harness records enqueues, faults and, at the end,
``snapshot`` (the ledger's jobs, attempts, events and effects); ``FakeProvider(history=...)``
records effects.

``check`` reads any history and reports, as violations: lost jobs, unfinished jobs, effects
delivered twice, completions by stale tokens, double completions, two leases for one attempt,
acknowledged writes the ledger does not have, refused writes the ledger applied, and keys with
more than one job. ``jobledger history check PATH…`` prints its summary.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._records import (
    ClaimedJob,
    Enqueued,
    JobFilter,
    RescueResult,
)
from .._runtime.hooks import WorkerObserver
from ..backends.base import Backend
from ..errors import JobledgerError

if TYPE_CHECKING:
    from .._ledger import Ledger
    from .._runtime.runtime import Runtime

__all__ = [
    "ENV",
    "HistoryError",
    "HistoryObserver",
    "HistoryRecorder",
    "HistoryReport",
    "Violation",
    "check",
    "check_paths",
    "install",
    "ledger_records",
    "load",
]

ENV = "JOBLEDGER_HISTORY"
"""The environment variable ``jobledger worker`` reads for a history path."""

FINAL_STATES = {"done", "dead", "cancelled"}
_OPERATOR_MOVES = {"redrive", "resolve"}


class HistoryError(JobledgerError):
    """A history file cannot be read: missing, or a line that is not a JSON object."""


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


# -- recording ---------------------------------------------------------------------------------


class HistoryRecorder:
    """Appends history records to a file, one JSON object per line, safe across threads.

    ``path`` is a file (appended to) or a directory (a new file per recorder in it, named after
    the host and process). Each record is written with one ``write`` on a file opened for
    appending, so records of processes sharing a file never interleave, and a process killed
    with SIGKILL loses nothing it had recorded.
    """

    def __init__(self, path: str | os.PathLike[str], host: str | None = None):
        self.host = host or socket.gethostname()
        self.pid = os.getpid()
        target = Path(path)
        if target.is_dir():
            target = target / f"{self.host}-{self.pid}-{uuid.uuid4().hex[:6]}.jsonl"
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
        self.path = target
        self._fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def record(self, event: str, **fields: Any) -> None:
        """Write one record now."""
        rec = {"t": round(time.time(), 6), "event": event, "host": self.host, "pid": self.pid}
        rec.update(fields)
        line = (json.dumps(rec, separators=(",", ":"), default=_jsonable) + "\n").encode()
        with self._lock:
            if self._fd < 0:
                return
            os.write(self._fd, line)

    def enqueued(self, queue: str, key: str, result: Enqueued) -> None:
        """An enqueue returned: the job is acknowledged and must never be lost."""
        self.record("enqueue", queue=queue, key=key, job=result.id, created=result.created)

    def enqueue_failed(self, queue: str, key: str, error: BaseException) -> None:
        """An enqueue raised: it may or may not have happened."""
        self.record(
            "enqueue_failed", queue=queue, key=key, error=f"{type(error).__name__}: {error}"
        )

    def fault(self, kind: str, phase: str = "instant", **detail: Any) -> None:
        """A fault the harness injected (``phase``: ``start``, ``end`` or ``instant``)."""
        self.record("fault", kind=kind, phase=phase, **detail)

    def snapshot(
        self,
        backend: Backend,
        queues: Sequence[str] | None = None,
        expect_final: bool = True,
    ) -> int:
        """Record the ledger's jobs, attempts, events and effects (of ``queues``, else all) so
        the checker can hold the history against them. ``expect_final``: every job should have
        reached a final state by now. Returns the number of jobs recorded."""
        self.record("snapshot", expect_final=expect_final)
        jobs = 0
        for rec in ledger_records(backend, queues):
            jobs += rec["event"] == "ledger_job"
            self.record(rec.pop("event"), **rec)
        return jobs

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> HistoryRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def ledger_records(
    source: Backend | Ledger, queues: Sequence[str] | None = None
) -> Iterator[dict[str, Any]]:
    """The ledger's own view, as history records: jobs, attempts, events, effects (of a ledger,
    or of its backend)."""
    from .._ledger import Ledger

    backend = source.backend if isinstance(source, Ledger) else source
    filters = [JobFilter(queue=q) for q in queues] if queues else [JobFilter()]
    for where in filters:
        for job in backend.history.find(where):
            yield {
                "event": "ledger_job",
                "job": job.id,
                "queue": job.queue,
                "key": job.key,
                "task": job.task,
                "state": job.state.value,
                "attempts": job.attempts,
            }
            for a in backend.history.attempts(job.id):
                yield {
                    "event": "ledger_attempt",
                    "job": a.job_id,
                    "attempt": a.attempt,
                    "token": a.lease_token,
                    "worker": a.worker,
                    "outcome": None if a.outcome is None else a.outcome.value,
                }
            for e in backend.history.events(job.id):
                detail = e.detail or {}
                yield {
                    "event": "ledger_event",
                    "job": e.job_id,
                    "kind": e.kind,
                    "actor": e.actor,
                    "attempt": detail.get("attempt"),
                    "token": detail.get("token"),
                }
            for eff in backend.effects.all(job.queue, job.key):
                yield {
                    "event": "ledger_effect",
                    "queue": eff["queue"],
                    "key": eff["key"],
                    "effect": eff["effect"],
                    "job": eff["job_id"],
                    "attempt": eff["attempt"],
                }


class HistoryObserver(WorkerObserver):
    """Records what a worker does: claims with tokens, heartbeats, outcomes, lease losses and
    rescues. Add it to ``ledger.observers`` (``install`` does)."""

    def __init__(self, recorder: HistoryRecorder):
        self.recorder = recorder

    def _job(self, event: str, worker: Runtime, job: ClaimedJob, **extra: Any) -> None:
        self.recorder.record(
            event,
            worker=worker.name,
            queue=job.queue,
            key=job.key,
            job=job.id,
            attempt=job.attempt,
            token=job.lease_token,
            **extra,
        )

    def on_claim(self, worker: Runtime, jobs: Sequence[ClaimedJob]) -> None:
        for job in jobs:
            self._job("claim", worker, job, lease_until=job.lease_until)

    def on_heartbeat(self, worker: Runtime, renewed: Sequence[tuple[ClaimedJob, datetime]]) -> None:
        for job, until in renewed:
            self._job("heartbeat", worker, job, lease_until=until)

    def on_outcomes(
        self, worker: Runtime, outcomes: Sequence[tuple[ClaimedJob, str, float, str | None]]
    ) -> None:
        for job, outcome, duration, error_class in outcomes:
            if outcome == "done":
                self._job("complete", worker, job, duration=round(duration, 6))
            else:
                self._job("fail", worker, job, outcome=outcome, error_class=error_class)

    def on_lease_lost(self, worker: Runtime, job: ClaimedJob, action: str) -> None:
        self._job("lease_lost", worker, job, action=action)

    def on_rescue(self, worker: Runtime, rescued: Sequence[RescueResult]) -> None:
        for r in rescued:
            self.recorder.record(
                "rescue",
                worker=worker.name,
                queue=r.queue,
                key=r.key,
                job=r.job_id,
                attempt=r.attempt,
                state=r.state.value,
            )


def install(ledger: Ledger, path: str | os.PathLike[str]) -> HistoryRecorder:
    """Record the history of this ledger's workers to ``path``; returns the recorder."""
    recorder = HistoryRecorder(path)
    ledger.observers.append(HistoryObserver(recorder))
    return recorder


# -- reading -----------------------------------------------------------------------------------


def load(paths: Iterable[str | os.PathLike[str]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Read the records of one history (files, or directories of ``*.jsonl`` files).

    Returns the records in time order and notes about what was skipped: a last line cut short
    (its writer was killed mid-write) is skipped with a note; any other bad line is an error.
    """
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted(p.glob("*.jsonl")))
        elif p.is_file():
            files.append(p)
        else:
            raise HistoryError(f"history {str(p)!r} does not exist")
    records: list[dict[str, Any]] = []
    notes: list[str] = []
    for path in files:
        lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                rec = None
            if not isinstance(rec, dict) or "event" not in rec:
                if number == len(lines):  # no newline after it: a write cut short
                    notes.append(f"{path}:{number}: incomplete last line skipped")
                    continue
                raise HistoryError(f"{path}:{number}: not a history record: {line[:80]!r}")
            records.append(rec)
    records.sort(key=lambda r: float(r.get("t", 0.0)))
    return records, notes


# -- checking ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Violation:
    """One broken guarantee found in a history."""

    kind: str
    message: str
    job: int | None = None


@dataclass
class HistoryReport:
    """What ``check`` found in one history: figures and violations."""

    name: str
    records: int = 0
    hosts: list[str] = field(default_factory=list)
    processes: int = 0
    """Distinct recorders: (host, pid) pairs."""
    seconds: float = 0.0
    operations: dict[str, int] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    figures: dict[str, int] = field(default_factory=dict)
    ledger: dict[str, int] | None = None
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def by_kind(self) -> dict[str, list[Violation]]:
        kinds: dict[str, list[Violation]] = defaultdict(list)
        for v in self.violations:
            kinds[v.kind].append(v)
        return dict(sorted(kinds.items()))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "records": self.records,
            "hosts": self.hosts,
            "processes": self.processes,
            "seconds": round(self.seconds, 3),
            "operations": self.operations,
            "faults": self.faults,
            "figures": self.figures,
            "ledger": self.ledger,
            "violations": [v.__dict__ for v in self.violations],
            "violation_counts": {k: len(v) for k, v in self.by_kind().items()},
            "notes": self.notes,
        }

    def summary(self, examples: int = 5) -> str:
        """A few lines for a person (and CI's log)."""
        ops = self.operations
        fig = self.figures
        lines = [
            f"history {self.name}: {self.records} records from {self.processes} recorders "
            f"({', '.join(self.hosts)}) over {self.seconds:.1f} s",
            "  operations: "
            f"{ops.get('enqueue', 0)} enqueues acknowledged "
            f"({fig.get('enqueue_unknown', 0)} unknown), "
            f"{ops.get('claim', 0)} claims, {ops.get('complete', 0)} completions, "
            f"{ops.get('fail', 0)} failures, {ops.get('heartbeat', 0)} heartbeats, "
            f"{ops.get('lease_lost', 0)} lease losses, {ops.get('rescue', 0)} rescues, "
            f"{fig.get('effects_delivered', 0)} effects delivered "
            f"(+{fig.get('effects_absorbed', 0)} repeats absorbed by idempotency key)",
            "  faults: "
            + (
                ", ".join(f"{n} {kind}" for kind, n in sorted(self.faults.items()))
                if self.faults
                else "none recorded"
            ),
        ]
        if self.ledger is not None:
            led = self.ledger
            states = ", ".join(
                f"{led[k]} {k.removeprefix('state_')}"
                for k in sorted(led)
                if k.startswith("state_")
            )
            lines.append(
                f"  ledger: {led.get('jobs', 0)} jobs ({states or 'none'}), "
                f"{led.get('attempts', 0)} attempts ({led.get('lease_expired', 0)} lease expired), "
                f"{led.get('lease_lost_events', 0)} lease_lost events, "
                f"{led.get('effects', 0)} effects recorded"
            )
        else:
            lines.append("  ledger: no snapshot (lost jobs and acknowledged writes not confirmed)")
        kinds = self.by_kind()
        lines.append(
            f"  violations: {len(self.violations)}"
            + (" (" + ", ".join(f"{k} {len(v)}" for k, v in kinds.items()) + ")" if kinds else "")
        )
        for kind, found in kinds.items():
            for v in found[:examples]:
                lines.append(f"    {kind}: {v.message}")
            if len(found) > examples:
                lines.append(f"    {kind}: … and {len(found) - examples} more")
        for note in self.notes:
            lines.append(f"  note: {note}")
        return "\n".join(lines)


def check(records: Sequence[dict[str, Any]], name: str = "history") -> HistoryReport:
    """Check one history (records of every process of one run) for broken guarantees."""
    report = HistoryReport(name=name, records=len(records))
    ops: Counter[str] = Counter(r["event"] for r in records)
    report.operations = dict(sorted(ops.items()))
    report.hosts = sorted({str(r.get("host")) for r in records if r.get("host")})
    report.processes = len({(r.get("host"), r.get("pid")) for r in records if "pid" in r})
    times = [float(r["t"]) for r in records if "t" in r]
    report.seconds = (max(times) - min(times)) if times else 0.0
    report.faults = dict(
        Counter(
            str(r.get("kind"))
            for r in records
            if r["event"] == "fault" and r.get("phase", "instant") in ("start", "instant")
        )
    )

    def bad(kind: str, message: str, job: int | None = None) -> None:
        report.violations.append(Violation(kind, message, job))

    by_event: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_event[r["event"]].append(r)

    # The ledger's own view, when the run ended with a snapshot.
    snapshots = by_event.get("snapshot", [])
    has_ledger = bool(snapshots)
    expect_final = any(s.get("expect_final") for s in snapshots)
    ledger_jobs = {r["job"]: r for r in by_event.get("ledger_job", [])}
    ledger_attempts = {(r["job"], r["attempt"]): r for r in by_event.get("ledger_attempt", [])}
    attempts_by_job: dict[int, list[int]] = defaultdict(list)
    for job, attempt in ledger_attempts:
        attempts_by_job[job].append(attempt)
    operator_moves: Counter[int] = Counter(
        r["job"] for r in by_event.get("ledger_event", []) if r.get("kind") in _OPERATOR_MOVES
    )

    # Keys with more than one job: from enqueues, claims and the ledger alike.
    ids_by_key: dict[tuple[str, str], set[int]] = defaultdict(set)
    for event in ("enqueue", "claim", "ledger_job"):
        for r in by_event.get(event, []):
            ids_by_key[(r["queue"], r["key"])].add(r["job"])
    for (queue, key), ids in sorted(ids_by_key.items()):
        if len(ids) > 1:
            bad("key_with_several_jobs", f"key {key!r} in queue {queue!r} names jobs {sorted(ids)}")

    # Lost and unfinished jobs.
    acknowledged = {r["job"]: r for r in by_event.get("enqueue", [])}
    report.figures["jobs_acknowledged"] = len(acknowledged)
    report.figures["enqueue_unknown"] = len(by_event.get("enqueue_failed", []))
    if has_ledger:
        for job, r in sorted(acknowledged.items()):
            if job not in ledger_jobs:
                bad(
                    "lost_job",
                    f"job {job} (key {r['key']!r}) was acknowledged at enqueue but is not in "
                    "the ledger",
                    job,
                )
        if expect_final:
            for job, lj in sorted(ledger_jobs.items()):
                if lj["state"] not in FINAL_STATES:
                    bad(
                        "unfinished_job",
                        f"job {job} (key {lj['key']!r}) is still {lj['state']} after "
                        f"{lj['attempts']} attempts at the end of the run",
                        job,
                    )
    else:
        finished = {r["job"] for r in by_event.get("complete", [])} | {
            r["job"] for r in by_event.get("fail", []) if r.get("outcome") == "dead"
        }
        open_jobs = sorted(set(acknowledged) - finished)
        if open_jobs:
            report.notes.append(
                f"{len(open_jobs)} acknowledged jobs have no final outcome in the history; "
                "without a ledger snapshot they cannot be called lost"
            )

    # Claims: one lease per attempt, and the ledger has every claim it acknowledged.
    claims: dict[tuple[int, int], set[str]] = defaultdict(set)
    claim_queue: dict[int, str] = {}
    for r in by_event.get("claim", []):
        claims[(r["job"], r["attempt"])].add(r["token"])
        claim_queue[r["job"]] = r["queue"]
    ledger_queues = {r["queue"] for r in ledger_jobs.values()}
    for (job, attempt), tokens in sorted(claims.items()):
        if len(tokens) > 1:
            bad(
                "double_lease",
                f"attempt {attempt} of job {job} was granted under {len(tokens)} tokens",
                job,
            )
        if has_ledger and claim_queue[job] in ledger_queues:
            row = ledger_attempts.get((job, attempt))
            if row is None or row["token"] not in tokens:
                bad(
                    "lost_write",
                    f"claim of job {job} attempt {attempt} was acknowledged but the ledger "
                    + ("has no such attempt" if row is None else "names another token"),
                    job,
                )
    claimed_attempts: dict[int, set[int]] = defaultdict(set)
    for job, attempt in claims:
        claimed_attempts[job].add(attempt)
    for job, attempts in attempts_by_job.items():
        claimed_attempts[job].update(attempts)

    # Completions: by the current token only, once per job, and as the ledger has them.
    completions: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in by_event.get("complete", []):
        completions[r["job"]].append(r)
    for job, done in sorted(completions.items()):
        moves = operator_moves.get(job, 0)
        if len({(r["attempt"], r["token"]) for r in done}) > 1 + moves:
            bad(
                "double_completion",
                f"job {job} was completed {len(done)} times, by attempts "
                f"{sorted(r['attempt'] for r in done)}",
                job,
            )
        for r in done:
            later = sorted(a for a in claimed_attempts.get(job, ()) if a > r["attempt"])
            if later and not moves:
                bad(
                    "stale_completion",
                    f"job {job} was completed by attempt {r['attempt']} "
                    f"({r.get('worker')}) although attempt {later[0]} had been claimed",
                    job,
                )
            if has_ledger and job in ledger_jobs:
                row = ledger_attempts.get((job, r["attempt"]))
                if row is None or row["token"] != r["token"]:
                    bad(
                        "stale_completion",
                        f"job {job} attempt {r['attempt']} was completed under a token the "
                        "ledger does not know for that attempt",
                        job,
                    )
                elif row["outcome"] != "done":
                    bad(
                        "lost_write",
                        f"job {job} attempt {r['attempt']} was acknowledged done, but the "
                        f"ledger closed it as {row['outcome']}",
                        job,
                    )

    # Failures acknowledged as written must be in the ledger as written.
    for r in by_event.get("fail", []):
        job = r["job"]
        if has_ledger and job in ledger_jobs:
            row = ledger_attempts.get((job, r["attempt"]))
            if row is None or row["token"] != r["token"] or row["outcome"] != r.get("outcome"):
                bad(
                    "lost_write",
                    f"job {job} attempt {r['attempt']} was acknowledged as "
                    f"{r.get('outcome')}, but the ledger has "
                    f"{'nothing' if row is None else row['outcome']}",
                    job,
                )

    # A refused write must not have happened after all. (A renewal refused by the attempt's
    # own completion is not recorded as refused: the hold is ended once its outcome is handed
    # on, Runtime.finish and ctx.transaction().)
    for r in by_event.get("lease_lost", []):
        row = ledger_attempts.get((r["job"], r["attempt"]))
        if row is not None and row["token"] == r["token"] and row["outcome"] == "done":
            bad(
                "refused_write_applied",
                f"job {r['job']} attempt {r['attempt']}: {r.get('action')} was refused as "
                "stale, yet the ledger shows that attempt done",
                r["job"],
            )

    # Effects: at most one delivery per (queue, key, effect); every recorded effect delivered.
    delivered: Counter[tuple[str, str, str]] = Counter()
    absorbed = 0
    provider_effects: set[str] = set()
    for r in by_event.get("effect", []):
        ident = (
            (str(r.get("queue") or ""), str(r["key"]), str(r.get("effect") or ""))
            if r.get("key")
            else ("", str(r.get("idem")), "")
        )
        provider_effects.add(ident[2])
        if r.get("delivered", True):
            delivered[ident] += 1
        else:
            absorbed += 1
    report.figures["effects_delivered"] = sum(delivered.values())
    report.figures["effects_absorbed"] = absorbed
    for (queue, key, effect), n in sorted(delivered.items()):
        if n > 1:
            bad(
                "duplicate_effect",
                f"effect {effect or '?'!r} of key {key!r} (queue {queue!r}) was delivered "
                f"{n} times",
            )
    recorded: Counter[tuple[str, str, str]] = Counter(
        (r["queue"], r["key"], r["effect"]) for r in by_event.get("ledger_effect", [])
    )
    for (queue, key, effect), n in sorted(recorded.items()):
        if n > 1:
            bad("duplicate_effect", f"effect {effect!r} of key {key!r} recorded {n} times")
        if effect in provider_effects and delivered.get((queue, key, effect), 0) == 0:
            bad(
                "phantom_effect",
                f"the ledger records effect {effect!r} of key {key!r}, which the provider "
                "never delivered",
            )

    if has_ledger:
        states = Counter(r["state"] for r in ledger_jobs.values())
        outcomes = Counter(r["outcome"] for r in ledger_attempts.values())
        report.ledger = {
            "jobs": len(ledger_jobs),
            "attempts": len(ledger_attempts),
            "lease_expired": outcomes.get("lease_expired", 0),
            "lease_lost_events": sum(
                1 for r in by_event.get("ledger_event", []) if r.get("kind") == "lease_lost"
            ),
            "effects": sum(recorded.values()),
            **{f"state_{s}": n for s, n in sorted(states.items())},
        }
    return report


def check_paths(
    paths: Sequence[str | os.PathLike[str]],
    name: str | None = None,
    extra_records: Sequence[dict[str, Any]] | None = None,
) -> HistoryReport:
    """Load one history from ``paths`` (plus ``extra_records``, e.g. a live ledger snapshot
    from ``ledger_records``) and check it."""
    records, notes = load(paths)
    if extra_records:
        records.extend(extra_records)
    report = check(records, name or ", ".join(Path(p).name for p in paths))
    report.notes[:0] = notes
    return report
