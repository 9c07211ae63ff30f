"""Why a job is where it is, in sentences an operator can act on: the dashboard's answer to
"why is this job stuck?"."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..._records import Attempt, GroupLimits, GroupStatus, JobRow, JobState
from .render import seconds, when

__all__ = ["diagnose"]


#: How much of the last error a diagnosis quotes; the job page shows all of it under it.
ERROR_QUOTED = 200


def _last_error(job: JobRow) -> str:
    if not job.last_error and not job.last_error_class:
        return ""
    error = f"{job.last_error_class or 'Error'}: {job.last_error or ''}".strip()
    if len(error) > ERROR_QUOTED:
        error = error[:ERROR_QUOTED].rstrip() + "… (the whole error is below)"
    return error


def _held_by_group(
    job: JobRow, group: GroupStatus | None, limits: GroupLimits | None, now: datetime
) -> str | None:
    """Why a due job's group keeps it from being claimed, if it does."""
    if group is None:
        return None
    name = f"{group.name!r}"
    if group.paused_until is not None and group.paused_until > now:
        wait = seconds((group.paused_until - now).total_seconds())
        reason = f" ({group.paused_reason})" if group.paused_reason else ""
        return (
            f"Its group {name} is paused until {when(group.paused_until)} (in {wait}){reason}: "
            "none of the group's jobs is claimed before then, the other groups go on. "
            f"jobledger groups resume {job.queue} {group.name} lifts the pause."
        )
    if limits is not None and limits.max_leased is not None and group.leased >= limits.max_leased:
        return (
            f"Its group {name} has {group.leased} jobs leased, the queue's limit per group: "
            "it is claimed when one of them finishes."
        )
    if limits is not None and limits.rate is not None and (group.tokens or 0) < 1:
        return (
            f"Its group {name} is held to {limits.rate:g} jobs per second (the queue's rate per "
            "group): it is claimed when the group's bucket refills."
        )
    return None


def diagnose(
    job: JobRow,
    attempts: Sequence[Attempt],
    now: datetime,
    group: GroupStatus | None = None,
    limits: GroupLimits | None = None,
) -> list[str]:
    """What the job is waiting for, what went wrong, and what would move it on. ``group`` and
    ``limits``: the job's group and its queue's group limits, when it has a group."""
    lines: list[str] = []
    error = _last_error(job)
    budget = f"attempt {job.attempts} of {job.attempt_limit}"
    if job.state is JobState.PENDING:
        if job.run_at > now:
            wait = seconds((job.run_at - now).total_seconds())
            if job.attempts and error:
                lines.append(
                    f"Waiting to be retried at {when(job.run_at)} (in {wait}): {budget} "
                    f"failed with {error}."
                )
            else:
                lines.append(f"Scheduled for {when(job.run_at)} (in {wait}); nothing is wrong.")
        elif held := _held_by_group(job, group, limits, now):
            lines.append(held)
            if job.attempts and error:
                lines.append(f"Its last attempt ({job.attempts}) failed with {error}.")
        else:
            late = seconds((now - job.run_at).total_seconds())
            lines.append(
                f"Due for {late} and not claimed yet. If that keeps growing, no worker is taking "
                f"queue {job.queue!r}: start one (jobledger worker APP --queues {job.queue}), "
                "or check that its workers are not all busy with longer or higher-priority jobs."
            )
            if job.attempts and error:
                lines.append(f"Its last attempt ({job.attempts}) failed with {error}.")
    elif job.state is JobState.LEASED:
        started = attempts[-1].started_at if attempts else job.updated_at
        holder = job.leased_by or "a worker"
        if job.lease_until is not None and job.lease_until < now:
            lines.append(
                f"Its lease ran out {seconds((now - job.lease_until).total_seconds())} ago: "
                f"{holder} died or stalled. A rescuer (every worker and server runs one) returns "
                "it to pending within seconds — or to dead if no attempts are left."
            )
        else:
            lines.append(
                f"Running on {holder} ({budget}) for "
                f"{seconds((now - started).total_seconds())}; its lease is renewed while the "
                f"handler runs and now ends at {when(job.lease_until)}."
            )
            lines.append(
                "If the handler hangs, its worker keeps renewing the lease: stop that worker "
                "and the job is returned to the queue once the lease expires."
            )
    elif job.state is JobState.DEAD:
        kind = (
            "a permanent error"
            if job.attempts < job.attempt_limit
            else f"its budget of {job.attempt_limit} attempts was spent"
        )
        lines.append(f"Dead after {budget}: {kind}" + (f" — {error}." if error else "."))
        lines.append(
            "Fix the cause, then redrive it (a fresh budget; effects already recorded are not "
            "repeated), or resolve it with a note if it was handled by hand."
        )
    elif job.state is JobState.DONE:
        lines.append(f"Done at {when(job.finished_at)} after {job.attempts} attempt(s).")
    else:
        lines.append(f"Cancelled at {when(job.finished_at or job.updated_at)}; it will not run.")
    return lines
