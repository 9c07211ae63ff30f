"""Tasks: a handler function with the settings its jobs are enqueued and run with."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import ConfigError, PayloadError
from .policy import DEFAULT_BACKOFF, Backoff

if TYPE_CHECKING:
    from .ledger import Ledger
    from .types import Enqueued

__all__ = ["Task", "validate_queue_name"]

_QUEUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
_TASK = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,199}$")

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 10
DEFAULT_LEASE_SECONDS = 60.0
MAX_LEASE_SECONDS = 7 * 24 * 3600.0

KeyRule = str | Callable[[dict[str, Any]], str] | None


def validate_queue_name(queue: str) -> str:
    if not isinstance(queue, str) or not _QUEUE.match(queue):
        raise ConfigError(
            f"queue name {queue!r} is invalid: 1-128 characters, letters, digits and _ . : -, "
            "starting with a letter or digit"
        )
    return queue


def validate_max_attempts(value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 1000:
        raise ConfigError(f"max_attempts must be a whole number from 1 to 1000, got {value!r}")
    return value


def validate_lease_seconds(value: float) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= MAX_LEASE_SECONDS
    ):
        raise ConfigError(f"lease_seconds must be > 0 and at most 7 days, got {value!r}")
    return float(value)


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
    ledger: Ledger | None = field(default=None, repr=False)
    is_async: bool = field(init=False)
    _signature: inspect.Signature = field(init=False, repr=False)
    _fits: tuple[frozenset[str], frozenset[str] | None, str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise ConfigError(f"task {self.name!r}: handler {self.fn!r} is not callable")
        if not isinstance(self.name, str) or not _TASK.match(self.name):
            raise ConfigError(
                f"task name {self.name!r} is invalid: 1-200 characters, letters, digits and _ . : -"
            )
        validate_queue_name(self.queue)
        validate_max_attempts(self.max_attempts)
        self.lease_seconds = validate_lease_seconds(self.lease_seconds)
        if not isinstance(self.backoff, Backoff):
            raise ConfigError(f"task {self.name!r}: backoff must be a jobledger.Backoff")
        if self.key is not None and not (isinstance(self.key, str) or callable(self.key)):
            raise ConfigError(f"task {self.name!r}: key must be a format string or a function")
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
        if required.issubset(payload) and (
            allowed.issuperset(payload) if allowed is not None else context not in payload
        ):
            return  # the common case, without building a BoundArguments per job
        try:
            self._signature.bind(None, **payload)
        except TypeError as exc:
            raise PayloadError(f"payload does not fit task {self.name!r}: {exc}") from None

    def derive_key(self, payload: dict[str, Any]) -> str | None:
        """The key the task's ``key`` rule gives for this payload, if it has one."""
        if self.key is None:
            return None
        if callable(self.key):
            return str(self.key(payload))
        try:
            return self.key.format(**payload)
        except (KeyError, IndexError, ValueError) as exc:
            raise PayloadError(
                f"task {self.name!r}: key template {self.key!r} cannot be filled from the payload: {exc}"
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
