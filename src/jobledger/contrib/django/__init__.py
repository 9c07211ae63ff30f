"""jobledger as the backend of Django's Tasks framework (``django.tasks`` on Django 6, the
``django-tasks`` backport on Django 5.2).

    INSTALLED_APPS = [..., "jobledger.contrib.django"]
    TASKS = {"default": {"BACKEND": "jobledger.contrib.django.TaskBackend"}}

``@task`` functions and ``task.enqueue()`` work unchanged; ``python manage.py jobledger_worker``
runs them. ``job_key(...)`` gives the next enqueue a business key. See docs/integrations.md.
Django is imported when these names are first used, not by ``import jobledger``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import TaskBackend, job_key

__all__ = ["TaskBackend", "job_key"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import backend

        return getattr(backend, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
