"""Tasks: a handler function with the settings its jobs are enqueued and run with."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ._records import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_QUEUE,
    MAX_LEASE_SECONDS,
    validate_lease_seconds,
    validate_max_attempts,
    validate_queue_name,
    validate_task_name,
    validate_timeout_seconds,
)
from .errors import ConfigError, PayloadError
from .policy import DEFAULT_BACKOFF, Backoff

if TYPE_CHECKING:
    from ._records import Enqueued


class Enqueuer(Protocol):
    """What a task needs of its ledger (``jobledger.Ledger`` is one)."""

    def enqueue(
        self, task: Task | str, payload: dict[str, Any] | None = None, *, key: str | None = None
    ) -> Enqueued: ...


__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_QUEUE",
    "MAX_LEASE_SECONDS",
    "Task",
    "validate_lease_seconds",
    "validate_max_attempts",
    "validate_queue_name",
    "validate_task_name",
]

KeyRule = str | Callable[[dict[str, Any]], str] | None


@dataclass(eq=False)
class Task:
    """A handler registered with ``@ledger.task``. Calling it calls the function itself.

    The handler is called as ``fn(ctx, **payload)``: the payload's fields become keyword
    arguments, and the first argument is the ``JobContext``.
    """

    fn: Callable[..., Any]
    name: str
    queue: str = DEFAULT_QUEUE
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    backoff: Backoff = DEFAULT_BACKOFF
    priority: int = 0
    key: KeyRule = None
    group: KeyRule = None
    timeout: float | None = None
    """Seconds an attempt may run before it is abandoned as ``timed_out`` (None: no bound)."""
    ledger: Enqueuer | None = field(default=None, repr=False)
    is_async: bool = field(init=False)
    _signature: inspect.Signature = field(init=False, repr=False)
    _fits: tuple[frozenset[str], frozenset[str] | None, str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise ConfigError(f"task {self.name!r}: handler {self.fn!r} is not callable")
        validate_task_name(self.name)
        validate_queue_name(self.queue)
        validate_max_attempts(self.max_attempts)
        self.lease_seconds = validate_lease_seconds(self.lease_seconds)
        self.timeout = validate_timeout_seconds(self.timeout)
        if not isinstance(self.backoff, Backoff):
            raise ConfigError(f"task {self.name!r}: backoff must be a jobledger.Backoff")
        for rule in ("key", "group"):
            value = getattr(self, rule)
            if value is not None and not (isinstance(value, str) or callable(value)):
                raise ConfigError(
                    f"task {self.name!r}: {rule} must be a format string or a function"
                )
        self.is_async = inspect.iscoroutinefunction(self.fn)
        self._signature = inspect.signature(self.fn)
        positional = [
            p
            for p in self._signature.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        ]
        if not positional:
            raise ConfigError(
                f"task {self.name!r}: the handler must take the job context as its first "
                "argument, e.g. def handler(ctx, **payload)"
            )
        self._fits = _payload_shape(self._signature)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def check_payload(self, payload: dict[str, Any]) -> None:
        """Raise ``PayloadError`` when the payload's fields do not fit the handler's arguments."""
        required, allowed, context = self._fits
        # (An empty set's issubset of a dict still builds a set of the dict's keys: skipped.)
        if (not required or required.issubset(payload)) and (
            allowed.issuperset(payload) if allowed is not None else context not in payload
        ):
            return  # the common case, without building a BoundArguments per job
        try:
            self._signature.bind(None, **payload)
        except TypeError as exc:
            raise PayloadError(f"payload does not fit task {self.name!r}: {exc}") from None

    def derive_key(self, payload: dict[str, Any]) -> str | None:
        """The key the task's ``key`` rule gives for this payload, if it has one."""
        return self._derive("key", self.key, payload)

    def derive_group(self, payload: dict[str, Any]) -> str | None:
        """The group the task's ``group`` rule gives for this payload, if it has one."""
        return self._derive("group", self.group, payload)

    def _derive(self, what: str, rule: KeyRule, payload: dict[str, Any]) -> str | None:
        if rule is None:
            return None
        if callable(rule):
            value = rule(payload)
            return None if value is None else str(value)
        try:
            return rule.format(**payload)
        except (KeyError, IndexError, ValueError) as exc:
            raise PayloadError(
                f"task {self.name!r}: {what} template {rule!r} cannot be filled from the payload: {exc}"
            ) from None

    def enqueue(self, payload: dict[str, Any] | None = None, **options: Any) -> Enqueued:
        """Shortcut for ``ledger.enqueue(task, payload, **options)``."""
        if self.ledger is None:
            raise ConfigError(f"task {self.name!r} is not registered with a ledger")
        return self.ledger.enqueue(self, payload, **options)


def _payload_shape(
    signature: inspect.Signature,
) -> tuple[frozenset[str], frozenset[str] | None, str]:
    """The keyword arguments a payload must have, those it may have (None: any but the context
    argument's name, the handler takes ``**kwargs``), and the context argument's name. A payload
    within these fits for sure; any other goes through ``Signature.bind`` for the exact error."""
    first, *params = signature.parameters.values()
    if params and params[0].kind is inspect.Parameter.VAR_POSITIONAL:
        params = params[1:]
    keyword = [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    required = frozenset(p.name for p in keyword if p.default is inspect.Parameter.empty)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return required, None, first.name
    if any(p.kind is inspect.Parameter.POSITIONAL_ONLY for p in params):
        # Positional-only names cannot be filled from a payload: always ask bind.
        return frozenset(["\0never"]), frozenset(), first.name
    return required, frozenset(p.name for p in keyword), first.name
