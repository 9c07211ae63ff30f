"""jobledger: a durable job ledger.

One row per business task (its key), claimed under an expiring lease whose token fences every
write, retried with backoff, parked as dead when it cannot succeed, and redriven by an operator
without repeating its effect. SQLite is the embedded default; PostgreSQL is for production.

    from jobledger import Ledger

    ledger = Ledger("sqlite:///jobs.db")

    @ledger.task(queue="digests", max_attempts=8, lease_seconds=60)
    def send_digest(ctx, customer_id: int, week: str) -> None:
        provider.send(customer_id, week, idempotency_key=ctx.key)

    ledger.enqueue(send_digest, {"customer_id": 4187, "week": "2026-W33"}, key="4187:2026-W33")
    ledger.run_worker(queues=["digests"], concurrency=4, burst=True)
"""

from ._faults import fault_point
from ._records import (
    Attempt,
    AttemptOutcome,
    CatchUp,
    ClaimedJob,
    Enqueued,
    Event,
    GroupLimits,
    GroupStatus,
    InsertResult,
    JobFilter,
    JobRow,
    JobSpec,
    JobState,
    LeaderLease,
    PruneResult,
    ScheduleRow,
    TickRow,
    TickState,
    Tombstone,
)
from .brokers.consumer import BrokerConsumer
from .brokers.outbox import Outbox
from .brokers.relay import Relay
from .context import JobContext
from .errors import (
    BackendUnavailable,
    BrokerUnavailable,
    ConfigError,
    HandlerOutcome,
    InvalidTransition,
    JobledgerError,
    KeyConflict,
    LeadershipLost,
    LeaseLost,
    NotFound,
    PayloadError,
    Permanent,
    Retry,
    SchemaMismatch,
)
from .ledger import JobHistory, Ledger, RedriveResult
from .policy import Backoff, check_response, classify, parse_retry_after
from .scheduling.schedule import (
    Schedule,
    ScheduleBook,
    ScheduleStatus,
    ScheduleTarget,
    TaskTarget,
    Tick,
)
from .scheduling.scheduler import Scheduler, SchedulerPass
from .task import Task
from .worker import Worker, WorkerStats

__version__ = "0.1.0"

__all__ = [
    "Attempt",
    "AttemptOutcome",
    "BackendUnavailable",
    "Backoff",
    "BrokerConsumer",
    "BrokerUnavailable",
    "CatchUp",
    "ClaimedJob",
    "ConfigError",
    "Enqueued",
    "Event",
    "GroupLimits",
    "GroupStatus",
    "HandlerOutcome",
    "InsertResult",
    "InvalidTransition",
    "JobContext",
    "JobFilter",
    "JobHistory",
    "JobRow",
    "JobSpec",
    "JobState",
    "JobledgerError",
    "KeyConflict",
    "LeaderLease",
    "LeadershipLost",
    "LeaseLost",
    "Ledger",
    "NotFound",
    "Outbox",
    "PayloadError",
    "Permanent",
    "PruneResult",
    "RedriveResult",
    "Relay",
    "Retry",
    "Schedule",
    "ScheduleBook",
    "ScheduleRow",
    "ScheduleStatus",
    "ScheduleTarget",
    "Scheduler",
    "SchedulerPass",
    "SchemaMismatch",
    "Task",
    "TaskTarget",
    "Tick",
    "TickRow",
    "TickState",
    "Tombstone",
    "Worker",
    "WorkerStats",
    "check_response",
    "classify",
    "fault_point",
    "parse_retry_after",
]
