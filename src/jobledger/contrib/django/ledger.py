"""The ledger behind a ``TaskBackend``: one per backend and process, and the handlers that run
Django tasks in jobledger's workers.

A job's task name is the Django task's ``module_path``. A worker does not need the tasks
registered beforehand: the first job that names one imports it (it must be a Django ``Task``)
and registers a handler that calls its function with the job's ``args`` and ``kwargs``.
"""

from __future__ import annotations

import math
import os
import threading
import traceback
from collections.abc import Callable
from dataclasses import replace
from inspect import iscoroutinefunction
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from django.utils import timezone
from django.utils.module_loading import import_string

from ..._ledger import Ledger
from ..._task import Task
from ...errors import HandlerOutcome, PayloadError, Permanent, Retry
from ...policy import classify
from . import compat

if TYPE_CHECKING:
    from ..._runtime.context import JobContext
    from .backend import TaskBackend

__all__ = ["DjangoLedger", "check_json", "exception_path", "import_task", "ledger_for"]

_LEDGERS: dict[tuple[int, str, str], DjangoLedger] = {}
_LEDGERS_LOCK = threading.Lock()


def ledger_for(backend: TaskBackend, url: str) -> DjangoLedger:
    """The ledger of this backend alias on ``url`` in this process. Django builds a backend per
    thread; they share one ledger (and its connections). A forked child builds its own."""
    token = (os.getpid(), backend.alias, url)
    with _LEDGERS_LOCK:
        ledger = _LEDGERS.get(token)
        if ledger is None:
            ledger = _LEDGERS[token] = DjangoLedger(url, backend)
        else:
            ledger.django_backend = backend  # the settings may have changed (override_settings)
        return ledger


class DjangoLedger(Ledger):
    """A ``Ledger`` that knows the Django tasks of one task backend by their module paths."""

    def __init__(self, url: str, backend: TaskBackend):
        super().__init__(url)
        self.django_backend = backend
        self._django_lock = threading.Lock()

    def get_task(self, name: str) -> Task | None:
        task = super().get_task(name)
        if task is not None:
            return task
        found = import_task(name)
        return None if found is None else self.django_task(found)

    def django_task(self, django_task: Any) -> Task:
        """The jobledger task that runs ``django_task``, registered on first use."""
        path = django_task.module_path
        task = super().get_task(path)
        if task is not None:
            return task
        with self._django_lock:
            task = super().get_task(path)
            if task is None:
                settings = self.django_backend.settings.for_task(path)
                task = self.task(
                    _handler(self, django_task),
                    name=path,
                    queue=django_task.queue_name,
                    max_attempts=settings.max_attempts,
                    lease_seconds=settings.lease_seconds,
                    backoff=settings.backoff,
                    timeout=settings.timeout,
                )
            return task


def import_task(path: str) -> Any:
    """The Django ``Task`` at this module path, or None (not importable, or not a task)."""
    try:
        found = import_string(path)
    except ImportError:
        return None
    return found if isinstance(found, compat.Task) else None


def _handler(ledger: DjangoLedger, django_task: Any) -> Callable[..., Any]:
    """A jobledger handler that runs the Django task's function with the job's arguments (an
    async handler for an ``async def`` task, run on the worker's event loop)."""
    if iscoroutinefunction(django_task.func):

        async def run_async(ctx: JobContext, args: list[Any], kwargs: dict[str, Any]) -> Any:
            attempt = _Attempt(ledger, ctx, django_task)
            try:
                leading = await sync_to_async(attempt.begin)()
                try:
                    returned = await django_task.func(*leading, *args, **kwargs)
                except Exception as exc:
                    raise await sync_to_async(attempt.failed)(exc) from exc
                return await sync_to_async(attempt.succeeded)(returned)
            finally:
                await sync_to_async(attempt.end)()

        return run_async

    def run(ctx: JobContext, args: list[Any], kwargs: dict[str, Any]) -> Any:
        attempt = _Attempt(ledger, ctx, django_task)
        try:
            leading = attempt.begin()
            try:
                returned = django_task.func(*leading, *args, **kwargs)
            except Exception as exc:
                raise attempt.failed(exc) from exc
            return attempt.succeeded(returned)
        finally:
            attempt.end()

    return run


class _Attempt:
    """One run of a Django task in a worker, around the call of its function: fresh Django
    database connections before and after (as Django's own workers have them), the task's
    context, the signals, and the return value kept with the job."""

    def __init__(self, ledger: DjangoLedger, ctx: JobContext, django_task: Any):
        self.ledger = ledger
        self.ctx = ctx
        self.task = django_task
        self.sender = type(ledger.django_backend)
        self.running: Any = None

    def begin(self) -> list[Any]:
        """Get ready to call the function; return the arguments that go before the job's (the
        context, for a task that takes it)."""
        close_old_connections()
        # The running TaskResult, read only when the task takes its context or something
        # listens to the signals (Django's own logging does).
        if (
            self.task.takes_context
            or compat.task_started.has_listeners()
            or compat.task_finished.has_listeners()
        ):
            self.running = self.ledger.django_backend.get_result(str(self.ctx.job_id))
            compat.task_started.send(sender=self.sender, task_result=self.running)
        return [compat.TaskContext(task_result=self.running)] if self.task.takes_context else []

    def succeeded(self, returned: Any) -> Any:
        try:
            value = _returned(returned)
        except Permanent as exc:
            raise self.failed(exc) from None
        if self.running is not None:
            result = self._finished(compat.TaskResultStatus.SUCCESSFUL)
            object.__setattr__(result, "_return_value", value)
            compat.task_finished.send(sender=self.sender, task_result=result)
        return value

    def failed(self, exc: Exception) -> HandlerOutcome:
        """The outcome the exception means. ``task_finished`` is sent only when it ends the job
        (failed for good): an attempt that will be retried is READY again, not finished."""
        outcome = _as_outcome(exc)
        retried = isinstance(outcome, Retry) and self.ctx.budget_left > 0
        if self.running is not None and not retried:
            result = self._finished(compat.TaskResultStatus.FAILED)
            result.errors.append(
                compat.TaskError(
                    exception_class_path=exception_path(exc),
                    traceback="".join(traceback.format_exception(exc)),
                )
            )
            compat.task_finished.send(sender=self.sender, task_result=result)
        return outcome

    def end(self) -> None:
        close_old_connections()

    def _finished(self, status: Any) -> Any:
        running = self.running
        return replace(
            running, status=status, finished_at=timezone.now(), errors=list(running.errors)
        )


def _as_outcome(exc: Exception) -> HandlerOutcome:
    """The task's exception as jobledger's outcome, decided by the one retry policy but named by
    its class's full path (Django's ``TaskError.exception_class_path``). The original is the
    outcome's cause, so its traceback is the one recorded."""
    if isinstance(exc, Retry | Permanent):
        if exc.error_class == type(exc).__name__:  # not named by the task: name it by its path
            exc.error_class = exception_path(exc)
        return exc
    if isinstance(exc, HandlerOutcome):
        return exc
    decision = classify(exc)
    path = exception_path(exc)
    if decision.retry:
        return Retry(decision.message, after=decision.delay, error_class=path)
    return Permanent(decision.message, error_class=path)


def exception_path(exc: BaseException) -> str:
    kind = type(exc)
    return f"{kind.__module__}.{kind.__qualname__}"


def _returned(value: Any) -> Any:
    """A task's return value, which must be JSON (it is stored with the job)."""
    try:
        return check_json(value, "the return value")
    except PayloadError as exc:
        raise Permanent(str(exc), error_class="builtins.TypeError") from None


def check_json(value: Any, where: str) -> Any:
    """``value`` as JSON (tuples become lists), or ``PayloadError`` naming what is not JSON."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PayloadError(f"{where} is {value!r}, which JSON cannot hold")
        return value
    if isinstance(value, list | tuple):
        return [check_json(v, f"{where}[{n}]") for n, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise PayloadError(f"{where} has the key {k!r}; JSON object keys are strings")
            out[k] = check_json(v, f"{where}[{k!r}]")
        return out
    raise PayloadError(
        f"{where} is a {type(value).__name__} ({_short(value)}), which JSON cannot hold: pass "
        "ids, text and numbers (e.g. an ISO date string, a primary key)"
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
