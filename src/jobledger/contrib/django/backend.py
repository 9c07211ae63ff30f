"""``TaskBackend``: Django's Tasks framework on a jobledger ledger."""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from django.core import checks
from django.utils import timezone

from ..._records import JobState
from ...errors import NotFound, PayloadError, SchemaMismatch
from . import compat
from .databases import ledger_url
from .ledger import DjangoLedger, check_json, import_task, ledger_for
from .options import BackendOptions
from .results import local_time, task_result

__all__ = ["TaskBackend", "job_key"]

_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("jobledger_job_key", default=None)


@contextmanager
def job_key(key: str) -> Iterator[None]:
    """Give the task enqueued inside the block this business key::

        with job_key(f"{customer.id}:{week}"):
            send_digest.enqueue(customer_id=customer.id, week=week)

    A key that already names a job of the queue creates nothing: ``enqueue`` returns that job's
    result (and raises ``jobledger.KeyConflict`` when its task or arguments differ). It wins
    over the task's key rule (``OPTIONS["tasks"][path]["key"]``)."""
    token = _KEY.set(key)
    try:
        yield
    finally:
        _KEY.reset(token)


class TaskBackend(compat.BaseTaskBackend):  # type: ignore[misc]
    """Django's task backend on jobledger: durable jobs, leased, fenced and retried.

    In ``TASKS``, with ``"jobledger.contrib.django"`` in ``INSTALLED_APPS``::

        TASKS = {"default": {
            "BACKEND": "jobledger.contrib.django.TaskBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"tasks": {"shop.tasks.send_digest": {"key": "{customer_id}:{week}"}}},
        }}

    The jobs live in the Django database ``OPTIONS["database"]`` (default ``"default"``), so an
    enqueue inside ``transaction.atomic()`` exists only if that commits; ``OPTIONS["url"]``
    puts them in another ledger database instead (then an enqueue commits at once, whatever
    the caller's transaction does). A result's id is the job's id. See docs/integrations.md.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]):
        super().__init__(alias, params)
        self.settings = BackendOptions.parse(alias, self.options, self.queues)

    # -- the ledger --------------------------------------------------------------------------------

    @property
    def ledger(self) -> DjangoLedger:
        """The jobledger ``Ledger`` behind this backend (operators' reads and repairs, workers)."""
        url = self.settings.url or ledger_url(
            self.settings.database or "default", self.settings.schema
        )
        return ledger_for(self, url)

    # -- enqueue -------------------------------------------------------------------------------------

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        self.validate_task(task)
        path = task.module_path
        try:
            args = check_json(list(args), "args")
            kwargs = check_json(dict(kwargs), "kwargs")
        except PayloadError as exc:
            raise PayloadError(f"task {path}: {exc}") from None
        rules = self.settings.for_task(path)
        key = _KEY.get() or rules.key_for(path, args, kwargs)
        ledger = self.ledger
        job_task = ledger.django_task(task)
        run_at = task.run_after
        if run_at is not None and timezone.is_naive(run_at):
            run_at = timezone.make_aware(run_at, timezone.get_default_timezone())
        options: dict[str, Any] = {
            "key": key,
            "queue": task.queue_name,
            "priority": task.priority,
            "run_at": run_at,
            "group": rules.group_for(path, args, kwargs),
        }
        payload = {"args": args, "kwargs": kwargs}
        database = self.settings.database
        try:
            if database is None:
                enqueued = ledger.enqueue(job_task, payload, **options)
            else:
                from django.db import connections

                connection = connections[database]
                connection.validate_no_broken_transaction()
                connection.ensure_connection()
                enqueued = ledger.enqueue(job_task, payload, conn=connection.connection, **options)
        except SchemaMismatch as exc:
            raise SchemaMismatch(
                f"{exc} (in a Django project, `python manage.py migrate` creates them)"
            ) from None
        if not enqueued.created:
            # The job of this key, as it stands; one enqueued earlier in the caller's
            # transaction is not committed yet, so not readable here: it is READY.
            with suppress(compat.TaskResultDoesNotExist):
                return self.get_result(str(enqueued.id))
        result = compat.TaskResult(
            task=task,
            id=str(enqueued.id),
            status=compat.TaskResultStatus.READY,
            enqueued_at=timezone.now(),
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        if enqueued.created:
            self._announce(result)
        return result

    def _announce(self, result: Any) -> None:
        """``task_enqueued``, once the job exists for others: at the commit of the transaction
        it was enqueued in (at once outside one)."""

        def send() -> None:
            compat.task_enqueued.send(type(self), task_result=result)

        if self.settings.database is None:
            send()
        else:
            from django.db import transaction

            transaction.on_commit(send, using=self.settings.database)

    # -- results -------------------------------------------------------------------------------------

    def get_result(self, result_id: str) -> Any:
        """The job with this id as a ``TaskResult``; ``TaskResultDoesNotExist`` when there is no
        such job, or it is not a task of this backend's kind (a plain jobledger job)."""
        # ASCII digits only: int() reads "١" (an Arabic-Indic one) as 1.
        text = str(result_id)
        if not isinstance(result_id, str | int) or not (text.isascii() and text.isdigit()):
            raise compat.TaskResultDoesNotExist(result_id)
        ledger = self.ledger
        try:
            history = ledger.history(int(result_id))
        except NotFound:
            raise compat.TaskResultDoesNotExist(result_id) from None
        job = history.job
        task = import_task(job.task)
        if task is None or set(job.payload) != {"args", "kwargs"}:
            raise compat.TaskResultDoesNotExist(
                f"{result_id} (job {job.id} is not a Django task: {job.task})"
            )
        priority = max(-100, min(100, job.priority))
        deferred = job.state is JobState.PENDING and job.run_at > job.created_at
        run_after = local_time(job.run_at) if deferred else None
        # A queue no longer in QUEUES is refused by ``using``: then the task as declared.
        with suppress(compat.InvalidTask):
            task = task.using(
                priority=priority, queue_name=job.queue, run_after=run_after, backend=self.alias
            )
        return task_result(ledger, history, task, self.alias)

    # -- checks --------------------------------------------------------------------------------------

    def check(self, **kwargs: Any) -> Iterable[Any]:
        yield from super().check(**kwargs)
        from django.apps import apps

        if not apps.is_installed("jobledger.contrib.django"):
            yield checks.Error(
                f"TASKS[{self.alias!r}] uses jobledger, but its app is not installed",
                hint="add 'jobledger.contrib.django' to INSTALLED_APPS",
                id="jobledger.E001",
            )
        if self.settings.database is not None:
            try:
                ledger_url(self.settings.database, self.settings.schema)
            except Exception as exc:  # noqa: BLE001 - reported as the check's message
                yield checks.Error(str(exc), id="jobledger.E002")
