"""The Django app of jobledger's task backend (``"jobledger.contrib.django"`` in
``INSTALLED_APPS``): the ``jobledger_worker`` command, the system checks, and the ledger's
tables created by ``manage.py migrate`` in each database a jobledger task backend shares."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class JobledgerConfig(AppConfig):  # type: ignore[misc]
    name = "jobledger.contrib.django"
    label = "jobledger"
    verbose_name = "jobledger"

    def ready(self) -> None:
        # The Tasks framework registers its system checks (the backends' own among them) when
        # it is imported, which Django 6 does not do by itself.
        from . import compat  # noqa: F401

        post_migrate.connect(_migrate_ledgers, sender=self, dispatch_uid="jobledger.migrate")


def _migrate_ledgers(using: str = "default", **kwargs: Any) -> None:
    """``manage.py migrate`` of a database also creates (or upgrades) the tables of the ledgers
    that live in it."""
    from .backend import TaskBackend
    from .compat import task_backends

    for alias in task_backends.settings:
        backend = task_backends[alias]
        if isinstance(backend, TaskBackend) and backend.settings.database == using:
            backend.ledger.migrate()
