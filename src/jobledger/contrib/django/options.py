"""The backend's ``OPTIONS``, validated when the backend is built: where the ledger is, and how
each task's jobs are keyed, grouped and retried."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from ..._records import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_MAX_ATTEMPTS,
    validate_lease_seconds,
    validate_max_attempts,
    validate_queue_name,
    validate_timeout_seconds,
)
from ...errors import ConfigError, PayloadError
from ...policy import Backoff

__all__ = ["BackendOptions", "Rule", "TaskSettings"]

Rule = str | Callable[[list[Any], dict[str, Any]], str] | None
"""A key or group rule: a format string filled from the task's arguments
(``"{customer_id}:{week}"``, positional ones as ``{0}``), or a function of ``(args, kwargs)``."""

_BACKEND_OPTIONS = {"database", "url", "schema", "tasks"}
_TASK_OPTIONS = {"key", "group", "max_attempts", "lease_seconds", "timeout", "backoff"}


@dataclass(frozen=True)
class TaskSettings:
    """How the jobs of one task (or, as the backend's defaults, of every task) are made."""

    key: Rule = None
    group: Rule = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    timeout: float | None = None
    backoff: Backoff | None = None

    def key_for(self, path: str, args: list[Any], kwargs: dict[str, Any]) -> str:
        """The job's key by the task's rule; without a rule a fresh one (a new job each time)."""
        return _fill("key", self.key, path, args, kwargs) or str(uuid.uuid4())

    def group_for(self, path: str, args: list[Any], kwargs: dict[str, Any]) -> str | None:
        return _fill("group", self.group, path, args, kwargs)


@dataclass(frozen=True)
class BackendOptions:
    """The ``OPTIONS`` of a ``TaskBackend`` (see docs/integrations.md, "Django")."""

    database: str | None = "default"
    """The Django database the ledger shares (None when ``url`` names another database)."""
    url: str | None = None
    schema: str | None = None
    defaults: TaskSettings = field(default_factory=TaskSettings)
    tasks: Mapping[str, TaskSettings] = field(default_factory=dict)

    @classmethod
    def parse(cls, alias: str, options: Mapping[str, Any], queues: set[str]) -> BackendOptions:
        where = f"TASKS[{alias!r}]"
        if not isinstance(options, Mapping):
            raise ImproperlyConfigured(f"{where}['OPTIONS'] must be a dict")
        unknown = set(options) - _BACKEND_OPTIONS - _TASK_OPTIONS
        if unknown:
            raise ImproperlyConfigured(
                f"{where}['OPTIONS'] has unknown options {sorted(unknown)}; expected "
                f"{sorted(_BACKEND_OPTIONS | _TASK_OPTIONS)}"
            )
        for queue in queues:
            try:
                validate_queue_name(queue)
            except ConfigError as exc:
                raise ImproperlyConfigured(f"{where}['QUEUES']: {exc}") from None
        url = options.get("url")
        database = options.get("database")
        if url is not None and database is not None:
            raise ImproperlyConfigured(
                f"{where}['OPTIONS']: give 'database' (a Django database the ledger shares) or "
                "'url' (a ledger database of its own), not both"
            )
        if url is not None and not (isinstance(url, str) and url):
            raise ImproperlyConfigured(f"{where}['OPTIONS']['url'] must be a jobledger URL")
        if database is not None and not (isinstance(database, str) and database):
            raise ImproperlyConfigured(
                f"{where}['OPTIONS']['database'] must be an alias of DATABASES"
            )
        schema = options.get("schema")
        if schema is not None and url is not None:
            raise ImproperlyConfigured(
                f"{where}['OPTIONS']: 'schema' is for a shared database; put it in the 'url'"
            )
        defaults = _task_settings(f"{where}['OPTIONS']", options, TaskSettings())
        tasks = options.get("tasks") or {}
        if not isinstance(tasks, Mapping):
            raise ImproperlyConfigured(
                f"{where}['OPTIONS']['tasks'] must map task paths to their options"
            )
        per_task = {}
        for path, settings in tasks.items():
            place = f"{where}['OPTIONS']['tasks'][{path!r}]"
            if not isinstance(settings, Mapping):
                raise ImproperlyConfigured(f"{place} must be a dict of task options")
            unknown = set(settings) - _TASK_OPTIONS
            if unknown:
                raise ImproperlyConfigured(
                    f"{place} has unknown options {sorted(unknown)}; expected "
                    f"{sorted(_TASK_OPTIONS)}"
                )
            per_task[str(path)] = _task_settings(place, settings, defaults)
        return cls(
            database=None if url is not None else (database or "default"),
            url=url,
            schema=schema,
            defaults=defaults,
            tasks=per_task,
        )

    def for_task(self, path: str) -> TaskSettings:
        return self.tasks.get(path, self.defaults)


def _task_settings(place: str, options: Mapping[str, Any], base: TaskSettings) -> TaskSettings:
    try:
        key = _rule(options.get("key", base.key), "key")
        group = _rule(options.get("group", base.group), "group")
        max_attempts = validate_max_attempts(options.get("max_attempts", base.max_attempts))
        lease = validate_lease_seconds(options.get("lease_seconds", base.lease_seconds))
        timeout = validate_timeout_seconds(options.get("timeout", base.timeout))
        backoff = options.get("backoff", base.backoff)
        if backoff is not None and not isinstance(backoff, Backoff):
            raise ConfigError(f"backoff must be a jobledger.Backoff, got {backoff!r}")
    except ConfigError as exc:
        raise ImproperlyConfigured(f"{place}: {exc}") from None
    return TaskSettings(key, group, max_attempts, lease, timeout, backoff)


def _rule(value: Any, what: str) -> Rule:
    if value is None or callable(value) or (isinstance(value, str) and value):
        return value  # type: ignore[no-any-return]
    raise ConfigError(
        f"{what} must be a format string such as '{{customer_id}}:{{week}}' or a function of "
        f"(args, kwargs), got {value!r}"
    )


def _fill(what: str, rule: Rule, path: str, args: list[Any], kwargs: dict[str, Any]) -> str | None:
    if rule is None:
        return None
    if callable(rule):
        value = rule(list(args), dict(kwargs))
        return None if value is None else str(value)
    try:
        return rule.format(*args, **kwargs)
    except (KeyError, IndexError, ValueError, AttributeError) as exc:
        raise PayloadError(
            f"task {path}: {what} rule {rule!r} cannot be filled from its arguments: {exc!r}"
        ) from None
