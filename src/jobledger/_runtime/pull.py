"""Pull consumers' leases: the runtime's adapter for ``POST /v1/queue/receive|ack|nack|extend``.

A receive is a claim, exactly as a worker makes one. The consumer holds the lease (its receipt
names the job and the token), so nothing is held here between requests: each ack, nack or
extend finds the job again, checks the receipt against its lease, and hands the outcome to the
runtime's ``Recorder`` — the same fenced writes, the same meanings, the same history (a refused
write is a ``lease_lost`` event) as a Python worker's. A nack's failure is built by the one
retry policy (``outcomes.failure``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from .._records import AttemptOutcome, ClaimedJob, Failure, JobRow, JobState, Lease
from ..errors import NotFound
from ..policy import Backoff, Decision
from .leases import LeaseHold
from .outcomes import Finished, Observers, Recorder, failure

if TYPE_CHECKING:
    from ..backends.base import Backend

__all__ = ["Held", "PullLeases", "Stale"]

#: How an attempt closed by its own receipt's ack or nack ended (the only writes that token
#: can make); an attempt that expired, timed out or was given back was not settled by it.
_SETTLED_BY_RECEIPT = {
    AttemptOutcome.DONE: "acked",
    AttemptOutcome.RETRY: "nacked",
    AttemptOutcome.DEAD: "nacked",
}


@dataclass(frozen=True, slots=True)
class Held:
    """A receipt that still holds its message's lease."""

    job: JobRow
    lease: Lease


@dataclass(frozen=True, slots=True)
class Stale:
    """A receipt that no longer holds its message: ``why`` says what became of it.
    ``attempt`` is the attempt the receipt's token opened (None when the token is unknown to
    this message, or the message does not exist)."""

    job: JobRow | None
    why: str
    attempt: int | None = None
    settled: bool = False
    """The receipt's own ack or nack closed its attempt: a repeat (an answer that was lost and
    asked again), not a write that came too late — nothing was lost, and nothing is recorded."""


class PullLeases:
    """The leases of pull consumers over one ledger's storage.

    ``observers`` hear of outcomes and refused writes (the server's metrics); ``backoff_of``
    gives a queue's retry backoff (its declared settings)."""

    def __init__(
        self,
        backend: Callable[[], Backend],
        observers: Observers,
        backoff_of: Callable[[str], Backoff],
        clock: Callable[[], datetime | None] = lambda: None,
    ):
        self._backend = backend
        self._observers = observers
        self._backoff_of = backoff_of
        self._clock = clock

    def _recorder(self, actor: str) -> Recorder:
        return Recorder(self._backend, actor, self._observers, self._clock)

    # -- receive ----------------------------------------------------------------------------------

    def receive(
        self, queue: str, holder: str, limit: int, lease_seconds: float | None
    ) -> list[ClaimedJob]:
        """Lease up to ``limit`` due messages of ``queue`` for ``holder``."""
        return self._backend().jobs.claim([queue], holder, limit, self._clock(), lease_seconds)

    def give_back(self, jobs: Sequence[ClaimedJob]) -> None:
        """Messages received that nobody will read (the consumer went away): back at once,
        uncharged."""
        self._backend().jobs.release([Lease(j.id, j.lease_token, j.attempt) for j in jobs])

    # -- receipts ---------------------------------------------------------------------------------

    def find(self, job_id: int, token: str) -> Held | Stale:
        """What a receipt holds."""
        backend = self._backend()
        try:
            job = backend.history.get(job_id)
        except NotFound:
            return Stale(None, "no such message")
        if job.state is JobState.LEASED and job.lease_token == token:
            return Held(job, Lease(job.id, token, job.attempts))
        earlier = next(
            (a for a in backend.history.attempts(job.id) if a.lease_token == token), None
        )
        if earlier is None:
            return Stale(job, "no such lease")
        settled = _SETTLED_BY_RECEIPT.get(earlier.outcome) if earlier.outcome else None
        if settled is not None:
            return Stale(job, f"already {settled} under this receipt", earlier.attempt, True)
        now = "leased under another receipt" if job.state is JobState.LEASED else job.state.value
        return Stale(job, f"the message is {now}", earlier.attempt)

    def refuse(self, stale: Stale, token: str, action: str, actor: str) -> None:
        """Record a genuine late write (the receipt's token opened an earlier attempt) in the
        message's history, as the worker records its own."""
        if stale.job is None or stale.attempt is None or stale.settled:
            return
        job = _claimed(stale.job, token, stale.attempt)
        self._recorder(actor).lease_lost(LeaseHold(job), action)

    # -- outcomes ---------------------------------------------------------------------------------

    def ack(self, held: Held, actor: str) -> str:
        """The message is done: ``done``, or ``lease_lost`` when its lease ran out a moment
        before (nothing changed)."""
        item = Finished(_hold(held), action="ack")
        self._recorder(actor).write([item])
        return item.outcome

    def nack(self, held: Held, verdict: Decision, actor: str) -> tuple[str, Failure]:
        """The delivery failed as ``verdict`` says (a retry after its delay, else the queue's
        backoff; or dead): ``retry``, ``dead`` or ``lease_lost``, and the failure written."""
        backoff = self._backoff_of(held.job.queue)
        hold = _hold(held)
        now = self._clock() or datetime.now(UTC)
        item = Finished(hold, failure(hold.job, held.lease, verdict, backoff, now), action="nack")
        self._recorder(actor).write([item])
        assert item.failure is not None
        return item.outcome, item.failure

    def extend(self, held: Held, lease_seconds: float, actor: str) -> datetime | None:
        """The lease now ends ``lease_seconds`` from now; None when it was lost meanwhile (the
        refusal recorded as any other's)."""
        renewed = self._backend().jobs.heartbeat([held.lease], self._clock(), lease_seconds)
        until = renewed.get(held.job.id)
        if until is None:
            self._recorder(actor).lease_lost(_hold(held), "extend")
        return until


def _hold(held: Held) -> LeaseHold:
    return LeaseHold(_claimed(held.job, held.lease.token, held.lease.attempt))


def _claimed(job: JobRow, token: str, attempt: int) -> ClaimedJob:
    """A message as the runtime sees a claimed job (for its records and log lines): the row's
    fields, with the receipt's token and attempt."""
    lease_until = job.lease_until or job.updated_at
    return ClaimedJob(
        *(job.id, job.queue, job.key, job.task, job.payload, attempt, token, lease_until),
        *(job.lease_seconds, job.run_at, job.priority, job.correlation_id, job.budget_left),
        group=job.group,
    )
