"""Django's Tasks framework, wherever it comes from: ``django.tasks`` (Django 6 and later), else
the ``django-tasks`` backport (``django_tasks``) on Django 5.2. Both have the same classes; only a
few names differ (``InvalidTask`` is the backport's ``InvalidTaskError``)."""

from __future__ import annotations

from importlib import import_module
from typing import Any

from django.core.exceptions import ImproperlyConfigured

__all__ = [
    "SOURCE",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]


def _framework() -> tuple[str, dict[str, Any]]:
    for source in ("django.tasks", "django_tasks"):
        try:
            tasks = import_module(source)
        except ImportError:
            continue
        base = import_module(f"{source}.base")
        exceptions = import_module(f"{source}.exceptions")
        signals = import_module(f"{source}.signals")
        backends = import_module(f"{source}.backends.base")
        invalid = getattr(exceptions, "InvalidTask", None) or exceptions.InvalidTaskError
        return source, {
            "BaseTaskBackend": backends.BaseTaskBackend,
            "InvalidTask": invalid,
            "Task": base.Task,
            "TaskContext": base.TaskContext,
            "TaskError": base.TaskError,
            "TaskResult": base.TaskResult,
            "TaskResultDoesNotExist": exceptions.TaskResultDoesNotExist,
            "TaskResultStatus": base.TaskResultStatus,
            "task_backends": tasks.task_backends,
            "task_enqueued": signals.task_enqueued,
            "task_finished": signals.task_finished,
            "task_started": signals.task_started,
        }
    raise ImproperlyConfigured(
        "jobledger.contrib.django needs Django's Tasks framework: Django 6 or later "
        "(django.tasks), or Django 5.2 with the django-tasks backport "
        "(pip install 'jobledger[django]')"
    )


SOURCE, _names = _framework()
"""Where the framework was found: ``"django.tasks"`` or ``"django_tasks"``."""

BaseTaskBackend: Any = _names["BaseTaskBackend"]
InvalidTask: Any = _names["InvalidTask"]
Task: Any = _names["Task"]
TaskContext: Any = _names["TaskContext"]
TaskError: Any = _names["TaskError"]
TaskResult: Any = _names["TaskResult"]
TaskResultDoesNotExist: Any = _names["TaskResultDoesNotExist"]
TaskResultStatus: Any = _names["TaskResultStatus"]
task_backends: Any = _names["task_backends"]
task_enqueued: Any = _names["task_enqueued"]
task_finished: Any = _names["task_finished"]
task_started: Any = _names["task_started"]
