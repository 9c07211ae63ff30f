"""A job as Django's ``TaskResult``: its status, timestamps, attempts, errors and return value.

| jobledger state | ``TaskResultStatus`` |
|---|---|
| pending (new, deferred, or waiting to be retried) | ``READY`` |
| leased (an attempt is running) | ``RUNNING`` |
| done | ``SUCCESSFUL`` |
| dead, cancelled | ``FAILED`` |
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils import timezone

from ..._records import AttemptOutcome, JobState
from . import compat

if TYPE_CHECKING:
    from ..._ledger import JobHistory, Ledger

__all__ = ["STATUS", "local_time", "task_result"]

STATUS = {
    JobState.PENDING: "READY",
    JobState.LEASED: "RUNNING",
    JobState.DONE: "SUCCESSFUL",
    JobState.DEAD: "FAILED",
    JobState.CANCELLED: "FAILED",
}

_CAUSE = "\nThe above exception was the direct cause of the following exception:\n"


def task_result(ledger: Ledger, history: JobHistory, task: Any, alias: str) -> Any:
    """The ``TaskResult`` of a job whose payload holds a Django task's arguments."""
    job = history.job
    attempts = [a for a in history.attempts if a.outcome is not AttemptOutcome.RELEASED]
    errors = [
        compat.TaskError(
            exception_class_path=a.error_class,
            traceback=_original(a.error_class, a.traceback or a.error_message or ""),
        )
        for a in attempts
        if a.error_class is not None
    ]
    status = compat.TaskResultStatus[STATUS[job.state]]
    result = compat.TaskResult(
        task=task,
        id=str(job.id),
        status=status,
        enqueued_at=local_time(job.created_at),
        started_at=local_time(attempts[0].started_at) if attempts else None,
        last_attempted_at=local_time(attempts[-1].started_at) if attempts else None,
        finished_at=local_time(job.finished_at) if job.state.is_final else None,
        args=list(job.payload.get("args", [])),
        kwargs=dict(job.payload.get("kwargs", {})),
        backend=alias,
        errors=errors,
        worker_ids=[a.worker for a in attempts],
    )
    if job.state is JobState.DONE:
        object.__setattr__(result, "_return_value", job.result)
    return result


def _original(error_class: str, trace: str) -> str:
    """The traceback of the task's own exception: the worker records it as the cause of the
    jobledger outcome it was turned into (see ``ledger._as_outcome``); that last part goes.
    (A ``Retry`` or ``Permanent`` the task raised itself keeps its whole traceback.)"""
    cut = trace.rfind(_CAUSE)
    own_outcome = error_class.startswith("jobledger.errors.")
    if cut != -1 and not own_outcome and "jobledger.errors." in trace[cut:]:
        return trace[:cut].rstrip("\n") + "\n"
    return trace


def local_time(at: datetime | None) -> datetime | None:
    """An aware UTC time as Django expects it: aware with USE_TZ, else naive local time."""
    if at is None or settings.USE_TZ:
        return at
    naive: datetime = timezone.make_naive(at)
    return naive
