"""A reference model of SPEC §2–3 in plain Python: what the ledger must do, with no database.

The stateful test drives the model and a real backend with the same operations and checks after
every step that they agree. The model knows nothing about SQL, threads or clocks: it is the
specification written as code, small enough to read in one sitting.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class Conflict(Exception):
    """Same key, different payload."""


@dataclass
class ModelJob:
    id: int
    key: str
    payload: dict
    state: str = "pending"
    priority: int = 0
    run_at: float = 0.0
    attempts: int = 0
    max_attempts: int = 3
    attempt_limit: int = 3
    lease_seconds: float = 30.0
    lease_until: float | None = None
    token: str | None = None
    tokens: list[str] = field(default_factory=list)
    """Every token this job was ever leased under, oldest first."""
    outcomes: list[str | None] = field(default_factory=list)
    """Attempt outcomes, one per claim; None while the attempt is open."""


class LedgerModel:
    """One queue of the ledger, as the SPEC describes it. Times are seconds on a test clock."""

    def __init__(self, max_attempts: int = 3, lease_seconds: float = 30.0):
        self.jobs: dict[int, ModelJob] = {}
        self.by_key: dict[str, int] = {}
        self.max_attempts = max_attempts
        self.lease_seconds = lease_seconds

    # enqueue: a new key creates a pending job; a known key returns it, or conflicts.
    def enqueue(
        self, job_id: int | None, key: str, payload: dict, run_at: float, priority: int
    ) -> tuple[int, bool]:
        if key in self.by_key:
            existing = self.jobs[self.by_key[key]]
            if existing.payload != payload:
                raise Conflict(key)
            return existing.id, False
        assert job_id is not None
        self.jobs[job_id] = ModelJob(
            id=job_id,
            key=key,
            payload=payload,
            priority=priority,
            run_at=run_at,
            max_attempts=self.max_attempts,
            attempt_limit=self.max_attempts,
            lease_seconds=self.lease_seconds,
        )
        self.by_key[key] = job_id
        return job_id, True

    def due(self, now: float) -> list[ModelJob]:
        ready = [j for j in self.jobs.values() if j.state == "pending" and j.run_at <= now]
        return sorted(ready, key=lambda j: (-j.priority, j.run_at, j.id))

    # claim: the best `limit` due jobs become leased, each under a new token.
    def claim(self, now: float, limit: int, tokens: dict[int, str]) -> list[int]:
        chosen = self.due(now)[:limit]
        for job in chosen:
            job.state = "leased"
            job.attempts += 1
            job.lease_until = now + job.lease_seconds
            job.token = tokens[job.id]
            job.tokens.append(job.token)
            job.outcomes.append(None)
        return [j.id for j in chosen]

    def _holds(self, job_id: int, token: str) -> ModelJob | None:
        job = self.jobs.get(job_id)
        if job is None or job.state != "leased" or job.token != token:
            return None
        return job

    def heartbeat(self, job_id: int, token: str, now: float) -> bool:
        job = self._holds(job_id, token)
        if job is None:
            return False
        job.lease_until = now + job.lease_seconds
        return True

    def complete(self, job_id: int, token: str) -> bool:
        job = self._holds(job_id, token)
        if job is None:
            return False
        job.state, job.lease_until = "done", None
        job.outcomes[-1] = "done"
        return True

    def fail(self, job_id: int, token: str, retry: bool, run_at: float) -> str | None:
        job = self._holds(job_id, token)
        if job is None:
            return None
        if retry and job.attempts < job.attempt_limit:
            job.state, job.run_at = "pending", run_at
            job.outcomes[-1] = "retry"
        else:
            job.state = "dead"
            job.outcomes[-1] = "dead"
        job.lease_until = None
        return job.state

    # rescue: expired leases go back to pending (budget left) or to dead.
    def rescue(self, now: float) -> dict[int, str]:
        moved = {}
        for job in self.jobs.values():
            if job.state == "leased" and job.lease_until is not None and job.lease_until < now:
                if job.attempts < job.attempt_limit:
                    job.state, job.run_at = "pending", now
                else:
                    job.state = "dead"
                job.lease_until = None
                job.outcomes[-1] = "lease_expired"
                moved[job.id] = job.state
        return moved

    def release(self, job_id: int, token: str) -> bool:
        job = self._holds(job_id, token)
        if job is None:
            return False
        job.state, job.lease_until = "pending", None
        job.attempt_limit += 1
        job.outcomes[-1] = "released"
        return True

    def redrive(self, job_id: int, now: float) -> bool:
        job = self.jobs[job_id]
        if job.state not in ("dead", "cancelled"):
            return False
        job.state, job.run_at, job.lease_until = "pending", now, None
        job.attempt_limit = job.attempts + job.max_attempts
        return True

    def resolve(self, job_id: int, to: str, now: float) -> bool:
        job = self.jobs[job_id]
        if job.state not in ("dead", "pending"):
            return False
        if to == "pending":
            job.attempt_limit = job.attempts + job.max_attempts
            job.run_at = now
        job.state, job.lease_until = to, None
        return True

    def cancel(self, job_id: int) -> bool:
        job = self.jobs[job_id]
        if job.state != "pending":
            return False
        job.state = "cancelled"
        return True
