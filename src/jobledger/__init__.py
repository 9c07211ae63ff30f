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

Everything a user needs is importable from here, and ``__all__`` lists exactly that (a test
keeps it so). The modules behind these names are private (``jobledger._ledger``, …) and may
change. Public too are ``jobledger.push`` (receiving Standard Webhooks), ``jobledger.client``
(the HTTP API from Python) and ``jobledger.testing`` (fake provider, fault points, history
checker). Names are imported when first used, so that ``import jobledger`` stays quick.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._lazy import lazy_attributes as _lazy_attributes
from .errors import (
    BackendUnavailable,
    BrokerUnavailable,
    ConfigError,
    HandlerOutcome,
    InvalidTransition,
    JobFailed,
    JobledgerError,
    KeyConflict,
    LeadershipLost,
    LeaseLost,
    NotFound,
    PayloadError,
    Permanent,
    ResultNotReady,
    ResultTimeout,
    Retry,
    SchemaMismatch,
    SubscriptionExists,
)

__version__ = "0.1.0"

if _TYPE_CHECKING:
    from ._async_ledger import (
        AsyncLedger,
    )
    from ._ledger import (
        JobHistory,
        Ledger,
        RedriveResult,
    )
    from ._records import (
        Attempt,
        AttemptOutcome,
        CatchUp,
        ClaimedJob,
        Enqueued,
        Event,
        GroupLimits,
        GroupStatus,
        JobFilter,
        JobRow,
        JobSpec,
        JobState,
    )
    from ._runtime.context import (
        JobContext,
    )
    from ._runtime.hooks import (
        WorkerObserver,
    )
    from ._runtime.processes import (
        WorkerProcesses,
    )
    from ._runtime.worker import (
        Worker,
        WorkerStats,
    )
    from ._task import (
        Task,
    )
    from .brokers.consumer import (
        BrokerConsumer,
    )
    from .brokers.outbox import (
        Outbox,
    )
    from .brokers.relay import (
        Relay,
    )
    from .maintenance.scheduler import (
        Scheduler,
    )
    from .policy import (
        Backoff,
        check_response,
        parse_retry_after,
    )
    from .scheduling.schedule import (
        Schedule,
        ScheduleStatus,
        ScheduleTarget,
        TaskTarget,
        Tick,
    )

__all__ = [
    "AsyncLedger",
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
    "InvalidTransition",
    "JobContext",
    "JobFailed",
    "JobFilter",
    "JobHistory",
    "JobRow",
    "JobSpec",
    "JobState",
    "JobledgerError",
    "KeyConflict",
    "LeadershipLost",
    "LeaseLost",
    "Ledger",
    "NotFound",
    "Outbox",
    "PayloadError",
    "Permanent",
    "RedriveResult",
    "Relay",
    "ResultNotReady",
    "ResultTimeout",
    "Retry",
    "Schedule",
    "ScheduleStatus",
    "ScheduleTarget",
    "Scheduler",
    "SchemaMismatch",
    "SubscriptionExists",
    "Task",
    "TaskTarget",
    "Tick",
    "Worker",
    "WorkerObserver",
    "WorkerProcesses",
    "WorkerStats",
    "__version__",
    "check_response",
    "parse_retry_after",
]

# Where each lazily imported name lives.
_LAZY = {
    "AsyncLedger": "_async_ledger",
    "Attempt": "_records",
    "AttemptOutcome": "_records",
    "Backoff": "policy",
    "BrokerConsumer": "brokers.consumer",
    "CatchUp": "_records",
    "ClaimedJob": "_records",
    "Enqueued": "_records",
    "Event": "_records",
    "GroupLimits": "_records",
    "GroupStatus": "_records",
    "JobContext": "_runtime.context",
    "JobFilter": "_records",
    "JobHistory": "_ledger",
    "JobRow": "_records",
    "JobSpec": "_records",
    "JobState": "_records",
    "Ledger": "_ledger",
    "Outbox": "brokers.outbox",
    "RedriveResult": "_ledger",
    "Relay": "brokers.relay",
    "Schedule": "scheduling.schedule",
    "ScheduleStatus": "scheduling.schedule",
    "ScheduleTarget": "scheduling.schedule",
    "Scheduler": "maintenance.scheduler",
    "Task": "_task",
    "TaskTarget": "scheduling.schedule",
    "Tick": "scheduling.schedule",
    "Worker": "_runtime.worker",
    "WorkerObserver": "_runtime.hooks",
    "WorkerProcesses": "_runtime.processes",
    "WorkerStats": "_runtime.worker",
    "check_response": "policy",
    "parse_retry_after": "policy",
}


__getattr__ = _lazy_attributes(__name__, _LAZY, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
