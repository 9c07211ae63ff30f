"""SPEC §8 drills 1–5 against the configured database.

Each drill works in a queue of its own (``drill-<run>-<n>``) that no production worker reads,
with its own worker processes and a fake provider on 127.0.0.1. It reports passed or failed
with the evidence — rows, attempts, what the provider saw — and the jobs it made are deleted
afterwards (unless kept for inspection).

1. Enqueue the same key twice → one row.
2. Kill a worker after its claim → another worker reclaims only after the lease expires.
3. Kill a worker after the side effect and before completion → the retry carries the same key;
   the effect happens once; the job shows two attempts.
4. Staging drill: 10 jobs; lease 3; complete 2; let 1 lease expire; restart → 10 done, the
   expired job with 2 attempts.
5. 429 three times, then 400 → backoff three times, then dead; a selected redrive of it does not
   repeat an effect that already happened.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..._ledger import Ledger
from ..._records import (
    AttemptOutcome,
    JobFilter,
    JobRow,
    JobState,
)
from ..._task import Task
from ...errors import JobledgerError
from ..fakeprovider import FakeProvider, ProviderScript
from ..processes import WorkerProcesses, wait_exit
from .app import recipient, register

__all__ = ["DRILLS", "DrillResult", "run_drills"]

WAIT = 60.0
"""The longest any one step of a drill may take before the drill fails."""

DRILLS = {
    1: "enqueue the same key twice → one row",
    2: "kill a worker after its claim → reclaimed only after the lease expires",
    3: "kill a worker between the effect and completion → the effect happens once",
    4: "10 jobs, lease 3: complete 2, let 1 lease expire, restart → 10 done",
    5: "429 three times, then 400 → backoff, dead; a redrive does not repeat the effect",
}


@dataclass
class DrillResult:
    """One drill's verdict and the evidence it rests on."""

    number: int
    title: str
    passed: bool = True
    evidence: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def check(self, ok: bool, what: str) -> bool:
        """Record one piece of evidence; a false one fails the drill."""
        self.evidence.append(f"{'ok' if ok else 'FAILED'}: {what}")
        self.passed = self.passed and ok
        return ok

    def note(self, what: str) -> None:
        self.evidence.append(what)


class DrillFailed(Exception):
    """A step could not go on (a timeout, a worker that would not die): the drill fails."""


class _Drills:
    def __init__(self, ledger: Ledger, provider: FakeProvider, workdir: Path):
        self.ledger = ledger
        self.provider = provider
        self.workdir = workdir
        self.run = uuid.uuid4().hex[:8]
        self.job_ids: list[int] = []
        self.tasks: dict[str, Task] = register(ledger, provider.url, f"drill-{self.run}")

    # -- helpers ---------------------------------------------------------------------------------

    def queue(self, n: int) -> str:
        return f"drill-{self.run}-{n}"

    def workers(self, n: int) -> WorkerProcesses:
        queue = self.queue(n)
        return WorkerProcesses(
            "jobledger.testing.drill.app:ledger",
            self.ledger.url.raw,
            self.workdir,
            env={"JOBLEDGER_DRILL_QUEUE": queue, "JOBLEDGER_DRILL_PROVIDER": self.provider.url},
            args=(
                "--queues",
                queue,
                "--concurrency",
                "1",
                "--batch-size",
                "1",
                "--poll-interval",
                "0.05",
                "--rescue-interval",
                "0.1",
                "--grace",
                "5",
                "--log-level",
                "warning",
            ),
        )

    def enqueue(self, drill: int, task: str, count: int, key: str = "customer-{n}") -> list[int]:
        """Enqueue ``count`` jobs into the drill's queue, keyed ``d<drill>:<key>``."""
        ids = []
        for n in range(count):
            job_id = self.ledger.enqueue(
                self.tasks[task],
                {"n": n},
                key=f"d{drill}:" + key.format(n=n),
                queue=self.queue(drill),
            ).id
            self.job_ids.append(job_id)
            ids.append(job_id)
        return ids

    def wait(self, what: str, predicate: Callable[[], Any], timeout: float = WAIT) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise DrillFailed(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(0.05)

    def killed_at_fault(self, pool: WorkerProcesses, faults: str) -> None:
        """Start a worker that SIGKILLs itself at a fault point, and wait until it did."""
        proc = pool.start(faults=faults)
        code = wait_exit(proc, WAIT)
        if code != -signal.SIGKILL:
            if code is None:
                pool.kill(proc)
            raise DrillFailed(
                f"the worker set to die at {faults!r} exited with {code}: {pool.log_tail(proc)}"
            )

    def finished(self, ids: Iterable[int]) -> bool:
        return all(self.ledger.job(i).state.is_final for i in ids)

    def attempts_text(self, job: JobRow) -> str:
        parts = []
        for a in self.ledger.backend.history.attempts(job.id):
            outcome = a.outcome.value if a.outcome else "open"
            error = f" ({a.error_class})" if a.error_class else ""
            parts.append(f"#{a.attempt} {outcome}{error} by {a.worker}")
        return f"job {job.id} {job.key}: " + "; ".join(parts)

    # -- the drills ------------------------------------------------------------------------------

    def drill1(self, r: DrillResult) -> None:
        send, key, queue = self.tasks["send"], "d1:4187:2026-W33", self.queue(1)
        first = self.ledger.enqueue(send, {"n": 1}, key=key, queue=queue)
        self.job_ids.append(first.id)
        again = self.ledger.enqueue(send, {"n": 1}, key=key, queue=queue)
        rows = self.ledger.jobs(JobFilter(queue=queue, key_prefix=key))
        r.check(first.created, f"first enqueue created job {first.id}")
        r.check(
            not again.created and again.id == first.id,
            f"second enqueue created={again.created}, returned job {again.id}",
        )
        r.check(len(rows) == 1, f"{len(rows)} row(s) with key {key} in the queue")

    def drill2(self, r: DrillResult) -> None:
        [job_id] = self.enqueue(2, "send", 1)
        pool = self.workers(2)
        try:
            self.killed_at_fault(pool, "worker.after_claim=kill")
            held = self.ledger.job(job_id)
            r.check(
                held.state is JobState.LEASED,
                f"after the SIGKILL the job is {held.state.value}, lease until {held.lease_until}",
            )
            pool.start()
            self.wait("the job to be reclaimed and done", lambda: self.finished([job_id]))
        finally:
            pool.stop()
        job = self.ledger.job(job_id)
        attempts = self.ledger.backend.history.attempts(job_id)
        r.note(self.attempts_text(job))
        r.check(
            job.state is JobState.DONE and len(attempts) == 2,
            f"job is {job.state.value} after {len(attempts)} attempts",
        )
        if len(attempts) == 2 and held.lease_until is not None:
            first, second = attempts
            gap = (second.started_at - held.lease_until).total_seconds()
            r.check(
                first.outcome is AttemptOutcome.LEASE_EXPIRED, f"attempt 1 ended {first.outcome}"
            )
            r.check(gap >= 0, f"attempt 2 started {gap:.2f} s after attempt 1's lease expired")
            r.check(second.worker != first.worker, "attempt 2 ran on another worker")

    def drill3(self, r: DrillResult) -> None:
        [job_id] = self.enqueue(3, "send", 1)
        job = self.ledger.job(job_id)
        to = recipient(job.key, "email")
        pool = self.workers(3)
        try:
            self.killed_at_fault(pool, "effect.after_call=kill")
            before = self.provider.by_recipient[to]
            r.check(before == 1, f"the provider got {before} request(s) before the crash")
            pool.start()
            self.wait("the retry to finish the job", lambda: self.finished([job_id]))
        finally:
            pool.stop()
        job = self.ledger.job(job_id)
        r.note(self.attempts_text(job))
        r.check(
            job.state is JobState.DONE and job.attempts == 2,
            f"job is {job.state.value} after {job.attempts} attempts",
        )
        key = f"{job.key}:email"
        accepted = [m for k, m in self.provider.accepted.items() if k == key]
        requests = self.provider.by_recipient[to]
        r.check(
            len(accepted) == 1 and requests == 2,
            f"the provider got {requests} requests with Idempotency-Key {key} and sent "
            f"{len(accepted)} message (the retry carried the same key)",
        )
        effects = self.ledger.backend.effects.all(job.queue, job.key)
        r.check(
            [(e["effect"], e["attempt"]) for e in effects] == [("email", 2)],
            f"effects recorded: {[(e['effect'], e['attempt']) for e in effects]}",
        )

    def drill4(self, r: DrillResult) -> None:
        ids = self.enqueue(4, "send", 10, key="staging-{n}")
        pool = self.workers(4)
        try:
            self.killed_at_fault(pool, "worker.after_claim=kill@3")
            states = [self.ledger.job(i).state for i in ids]
            r.check(
                states.count(JobState.DONE) == 2 and states.count(JobState.LEASED) == 1,
                f"before the restart: {states.count(JobState.DONE)} done, "
                f"{states.count(JobState.LEASED)} leased by the dead worker, "
                f"{states.count(JobState.PENDING)} pending",
            )
            expired = [i for i, s in zip(ids, states, strict=True) if s is JobState.LEASED]
            pool.start()
            self.wait("the 10 jobs to finish", lambda: self.finished(ids))
        finally:
            pool.stop()
        jobs = [self.ledger.job(i) for i in ids]
        done = sum(j.state is JobState.DONE for j in jobs)
        twice = {j.id: j.attempts for j in jobs if j.attempts != 1}
        r.check(done == 10, f"{done} of 10 done")
        r.check(
            len(expired) == 1 and twice == {expired[0]: 2},
            f"jobs with other than 1 attempt: {twice} (the expired one: {expired})",
        )
        for j in jobs:
            if j.id in twice:
                r.note(self.attempts_text(j))
        sent = sum(1 for k in self.provider.accepted if k.startswith("d4:staging-"))
        r.check(sent == 10, f"the provider sent {sent} messages for 10 jobs")

    def drill5(self, r: DrillResult) -> None:
        [job_id] = self.enqueue(5, "notify", 1, key="customer-{n}:dunning")
        key = self.ledger.job(job_id).key
        email, sms = recipient(key, "email"), recipient(key, "sms")
        self.provider.limit(sms, 3)
        self.provider.refuse(sms)
        pool = self.workers(5)
        try:
            pool.start()
            self.wait("the job to be dead", lambda: self.ledger.job(job_id).state is JobState.DEAD)
            job = self.ledger.job(job_id)
            attempts = self.ledger.backend.history.attempts(job_id)
            r.note(self.attempts_text(job))
            outcomes = [(a.outcome.value if a.outcome else None, a.error_class) for a in attempts]
            r.check(
                outcomes == [("retry", "HTTP 429")] * 3 + [("dead", "HTTP 400")],
                f"attempts: {outcomes}",
            )
            gaps = [
                (b.started_at - a.started_at).total_seconds()
                for a, b in zip(attempts, attempts[1:], strict=False)
            ]
            r.check(
                len(gaps) == 3 and all(g >= 0.9 for g in gaps),
                "attempts started "
                + ", ".join(f"{g:.2f} s" for g in gaps)
                + " after the one before (Retry-After: 1)",
            )
            emails = self.provider.by_recipient[email]
            r.check(emails == 1, f"the e-mail went out once before the job died ({emails} request)")
            # The operator fixes the cause and redrives this one job.
            self.provider.refuse(sms, False)
            moved = self.ledger.redrive(ids=[job_id], actor="jobledger drill", reason="drill 5")
            r.check(moved.ids == [job_id], f"redrive moved {moved.ids}")
            self.wait("the redriven job to finish", lambda: self.finished([job_id]))
        finally:
            pool.stop()
        job = self.ledger.job(job_id)
        r.note(self.attempts_text(job))
        emails = self.provider.by_recipient[email]
        r.check(job.state is JobState.DONE, f"after the redrive the job is {job.state.value}")
        r.check(
            emails == 1,
            f"the e-mail was not repeated: {emails} request(s) to the provider in all",
        )
        effects = {
            e["effect"]: e["attempt"] for e in self.ledger.backend.effects.all(job.queue, job.key)
        }
        r.check(effects == {"email": 1, "sms": 5}, f"effects recorded at attempts {effects}")

    def cleanup(self) -> int:
        return self.ledger.backend.history.purge(self.job_ids)


def run_drills(
    ledger: Ledger,
    only: Iterable[int] | None = None,
    *,
    keep: bool = False,
    provider: FakeProvider | None = None,
    on_result: Callable[[DrillResult], None] | None = None,
) -> list[DrillResult]:
    """Run the drills (all, or ``only`` these numbers) on ``ledger``'s database and return their
    results. The ledger must be migrated. Jobs the drills made are deleted unless ``keep``."""
    numbers = sorted(set(only or DRILLS))
    unknown = [n for n in numbers if n not in DRILLS]
    if unknown:
        raise JobledgerError(f"no drill numbered {unknown}; the drills are 1 to {max(DRILLS)}")
    workdir = Path(tempfile.mkdtemp(prefix="jobledger-drill-"))
    own_provider = provider is None
    provider = provider or FakeProvider(ProviderScript())
    if own_provider:
        provider.start()
    drills = _Drills(ledger, provider, workdir)
    results = []
    try:
        for n in numbers:
            result = DrillResult(n, DRILLS[n])
            started = time.monotonic()
            try:
                getattr(drills, f"drill{n}")(result)
            except (DrillFailed, JobledgerError) as exc:
                result.check(False, str(exc))
            result.seconds = round(time.monotonic() - started, 2)
            results.append(result)
            if on_result is not None:
                on_result(result)
    finally:
        if own_provider:
            provider.stop()
        if not keep:
            drills.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    return results
