"""Checks on what callers hand the ledger: payloads, keys, names and numbers. Pure functions
that import only the error types, so every layer (backends included) may use them."""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from ..errors import ConfigError, NotFound, PayloadError

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_QUEUE",
    "EARLIEST_TIME",
    "LATEST_TIME",
    "MAX_CORRELATION_ID_LENGTH",
    "MAX_KEY_LENGTH",
    "MAX_LEASE_SECONDS",
    "MAX_PAYLOAD_BYTES",
    "PayloadTooLarge",
    "aware_time",
    "decode_json",
    "encode_payload",
    "encode_result",
    "explicit_now",
    "finite_number",
    "has_surrogate",
    "job_id_number",
    "keepable_time",
    "keepable_time_after",
    "lookup_text",
    "operator_text",
    "payload_digest",
    "positive_seconds",
    "time_after",
    "validate_correlation_id",
    "validate_key",
    "validate_lease_seconds",
    "validate_max_attempts",
    "validate_name",
    "validate_queue_name",
    "validate_task_name",
    "validate_timeout_seconds",
    "visible_nul",
    "waiting_seconds",
    "whole_number",
]

MAX_PAYLOAD_BYTES = 256 * 1024
MAX_KEY_LENGTH = 512
#: A correlation id ties a job to the request or trace that caused it (a UUID, a trace id):
#: it goes into logs and a push delivery's headers, and is refused past this length.
MAX_CORRELATION_ID_LENGTH = 255


class PayloadTooLarge(PayloadError):
    """A payload refused for its size alone (a ``PayloadError`` to callers): the receiver
    helper answers it 413, and every other refused payload 400."""


# One encoder for every payload: ``json.dumps`` with options builds a new one per call.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
# The same encoding through the C encoder made once: ``JSONEncoder.encode`` makes one per call,
# half of what encoding a small payload costs. Without a circular-reference check (a table of
# the objects it is inside, which one shared encoder could not keep for several threads): a
# payload that contains itself recurses until Python's recursion limit, and is refused then.
_C_ENCODE = (
    json.encoder.c_make_encoder(  # type: ignore[attr-defined]
        None,
        _ENCODER.default,
        json.encoder.encode_basestring,
        None,
        ":",
        ",",
        True,
        False,
        False,
    )
    if json.encoder.c_make_encoder is not None  # type: ignore[attr-defined]
    else None
)
# A control character, or half of a surrogate pair (which no text in UTF-8 holds, so neither
# backend can store or even compare it): one search for both, on a name's hot path.
_CONTROL = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# U+0000 in a JSON text: ``\u0000`` after an even number of backslashes (``\\u0000`` is
# a backslash followed by the letters u0000, which may be stored).
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def encode_payload(payload: Any) -> str:
    """The canonical JSON text of a payload (sorted keys, no spaces), or ``PayloadError``.

    A payload must be a JSON object (a ``dict`` with string keys) of at most 256 KiB once encoded,
    without NaN or infinity, and no string in it may hold U+0000 or an unpaired surrogate.
    Payloads carry ids, not snapshots: look the data up when the job runs.
    """
    if not isinstance(payload, dict):
        raise PayloadError(f"payload must be a JSON object (a dict), got {type(payload).__name__}")
    try:
        text = "".join(_C_ENCODE(payload, 0)) if _C_ENCODE else _ENCODER.encode(payload)
    except ValueError as exc:
        raise PayloadError(f"payload is not valid JSON: {exc}") from None
    except TypeError as exc:
        raise PayloadError(f"payload is not JSON-serialisable: {exc}") from None
    except RecursionError:
        raise PayloadError(
            "payload is not valid JSON: it nests too deeply, or contains itself"
        ) from None
    # An ASCII text is its own size (``isascii`` is a flag read); any other is encoded once,
    # which also finds a string with an unpaired surrogate, as no database can store one.
    if text.isascii():
        size = len(text)
    else:
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            raise PayloadError(
                "payload holds a string with an unpaired surrogate (not UTF-8), "
                "which the ledger cannot store"
            ) from None
    if size > MAX_PAYLOAD_BYTES:
        raise PayloadTooLarge(
            f"payload is {size} bytes; the limit is {MAX_PAYLOAD_BYTES} bytes (256 KiB). "
            "Store large data elsewhere and pass its id."
        )
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        # Refused on both backends alike: PostgreSQL's jsonb cannot hold it.
        raise PayloadError("payload holds a string with U+0000, which the ledger cannot store")
    return text


def decode_json(text: str | bytes) -> Any:
    """A JSON text read from outside (a request's body, a command's option, a broker's
    message) as Python values, or ``ValueError`` saying why not: a malformed text
    (``json.JSONDecodeError``), ``NaN``, ``Infinity`` or ``-Infinity`` (Python's json module
    reads them, though JSON has no such values and no database stores them), or a text nested
    past Python's recursion limit (``RecursionError`` would escape a caller's ``except
    ValueError`` as an internal error)."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("it nests too deeply") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def encode_result(value: Any) -> str | None:
    """The JSON text of a handler's return value, to store with its job (None for None).

    Any JSON value may be returned (an object, a list, a string, a number, a bool), of at most
    256 KiB once encoded, as for payloads; not NaN or infinity, and no string with U+0000
    (PostgreSQL's ``jsonb`` cannot hold one). Anything else raises ``ValueError`` saying why:
    the job is done all the same, and its result is null (see docs/concepts.md, Results).
    """
    if value is None:
        return None
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"it is not JSON-serialisable: {exc}") from None
    except RecursionError:
        raise ValueError("it nests too deeply to be encoded as JSON") from None
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("it holds a string with an unpaired surrogate (not UTF-8)") from None
    if size > MAX_PAYLOAD_BYTES:
        raise ValueError(
            f"it is {size} bytes of JSON; the limit is {MAX_PAYLOAD_BYTES} bytes (256 KiB)"
        )
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise ValueError("it holds a string with U+0000, which the ledger cannot store")
    return text


def validate_key(key: Any) -> str:
    """A key is 1-512 characters without control characters; return it or raise ``PayloadError``."""
    return validate_name(key, "key", MAX_KEY_LENGTH)


def validate_correlation_id(value: Any) -> str:
    """A correlation id is 1-255 characters without control characters; return it or raise
    ``PayloadError``. (An enqueue without one gets a random one.)"""
    return validate_name(value, "correlation_id", MAX_CORRELATION_ID_LENGTH)


def validate_name(value: Any, what: str, longest: int, empty_hint: str = "") -> str:
    """A name (a key, a group) is a string of 1 to ``longest`` characters without control
    characters or halves of a surrogate pair; return it or raise ``PayloadError``."""
    if not isinstance(value, str):
        raise PayloadError(f"{what} must be a string, got {type(value).__name__}")
    if not value:
        raise PayloadError(f"{what} must not be empty{empty_hint}")
    if len(value) > longest:
        raise PayloadError(f"{what} is {len(value)} characters; the limit is {longest}")
    found = _CONTROL.search(value)
    if found:
        if "\ud800" <= found.group() <= "\udfff":
            raise PayloadError(
                f"{what} {value!r} contains half of a surrogate pair (not UTF-8: "
                "no backend can store it)"
            )
        raise PayloadError(f"{what} {value!r} contains a control character")
    return value


#: The latest time the ledger keeps: a job's due time, a group's pause. A day before the last
#: that Python's ``datetime`` holds, so that it can still be shown in any time zone, and a
#: whole number of seconds, as SQLite stores it, so that it reads back as itself.
LATEST_TIME = datetime(9999, 12, 30, tzinfo=UTC)
#: The earliest, likewise: a day after the first that a ``datetime`` holds.
EARLIEST_TIME = datetime(1, 1, 2, tzinfo=UTC)


def aware_time(when: Any, what: str) -> datetime:
    """``when`` if it is an aware ``datetime`` the ledger can keep (``keepable_time``), else
    ``ConfigError``. A naive one would be read in the PostgreSQL session's time zone and
    refused by SQLite, and PostgreSQL's server parsed a text where SQLite failed on it."""
    if not isinstance(when, datetime) or when.tzinfo is None:
        raise ConfigError(f"{what} must be an aware datetime (with a time zone), got {when!r}")
    return keepable_time(when, what)


def explicit_now(now: Any) -> datetime | None:
    """A call's ``now`` (the clock a test or a replay gives it): None (the clock itself) or an
    aware ``datetime`` the ledger can keep, else ``ConfigError``, checked where the call
    enters the ledger, on every backend alike."""
    return None if now is None else aware_time(now, "now")


def keepable_time(when: datetime, what: str) -> datetime:
    """``when`` if the ledger can keep it (from ``EARLIEST_TIME`` to ``LATEST_TIME``), else
    ``ConfigError``. Before the earliest, a time in a zone east of UTC may fall before year 1
    once in UTC: PostgreSQL stores it, and every read of its row fails."""
    if when > LATEST_TIME:
        raise ConfigError(_beyond(what, "later", when.isoformat()))
    if when < EARLIEST_TIME:
        raise ConfigError(_beyond(what, "earlier", when.isoformat()))
    return when


def keepable_time_after(start: datetime, seconds: float, what: str) -> datetime:
    """``seconds`` (>= 0) after ``start``, if the ledger can keep that time, else
    ``ConfigError`` naming ``what`` gave it."""
    if seconds > (LATEST_TIME - start).total_seconds():
        raise ConfigError(_beyond(what, "later", f"{seconds!r} s from {start.isoformat()}"))
    return start + timedelta(seconds=seconds)


def _beyond(what: str, side: str, given: str) -> str:
    bound, edge = (LATEST_TIME, "latest") if side == "later" else (EARLIEST_TIME, "earliest")
    return (
        f"{what} must come no {side} than {bound.date().isoformat()} (UTC), the {edge} time "
        f"the ledger keeps; got {given}"
    )


def time_after(start: datetime, seconds: float) -> datetime:
    """``seconds`` (finite; negative: before) after ``start``, but no later than
    ``LATEST_TIME`` and no earlier than ``EARLIEST_TIME``: for a wait decided while a job runs
    (a handler's ``Retry(after=...)``, an endpoint's ``Retry-After``), recorded whatever its
    size as "not before then", and for a cut-off ("finished longer ago than") of any age."""
    if seconds >= (LATEST_TIME - start).total_seconds():
        return LATEST_TIME
    if seconds <= (EARLIEST_TIME - start).total_seconds():
        return EARLIEST_TIME
    return start + timedelta(seconds=seconds)


def visible_nul(text: str) -> str:
    """``text`` with each U+0000 written as the four characters ``\\x00``, and each half of a
    surrogate pair as its escape (``\\ud800``): for text the ledger keeps but did not choose
    (an exception's message and traceback, an endpoint's answer), which PostgreSQL cannot store
    with a NUL in it, neither backend can encode with a lone surrogate in it, and which must be
    the same on both backends."""
    text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def has_surrogate(text: str) -> bool:
    """Whether ``text`` holds half of a surrogate pair: no UTF-8 text does, so no backend can
    store it or compare anything with it, and each driver raises its own error for it."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def operator_text(value: Any, what: str, optional: bool = False) -> Any:
    """``value`` if it is a text without U+0000 (or None, when ``optional``); else
    ``ConfigError`` naming ``what``. For what an operator writes into the ledger or selects it
    by (an actor, a reason, a note, a filter's text): PostgreSQL cannot store or compare a text
    with a NUL in it, and SQLite would have stored it or matched nothing, so both backends
    refuse it here, before anything is read or written (as the HTTP API does); and a number
    given instead was stored as a number by SQLite and refused by PostgreSQL's driver."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{what} must be a text, got {value!r}")
    if "\x00" in value:
        raise ConfigError(f"{what} may not contain U+0000 (no backend can keep it)")
    if has_surrogate(value):
        raise ConfigError(f"{what} may not contain half of a surrogate pair (not UTF-8)")
    return value


def lookup_text(value: Any, what: str, missing: str) -> str:
    """``value`` as the name or id to find a record by (a key, a queue's or a schedule's name,
    a subscription's or an API key's id): a text, else ``ConfigError`` naming ``what`` (as
    ``operator_text``: a number given instead was a driver's or the server's error); a text
    with U+0000 names no record (no name or id can hold it, and PostgreSQL could not even
    compare it), so ``NotFound`` with the message ``missing``, on every backend alike."""
    if not isinstance(value, str):
        raise ConfigError(f"{what} must be a text, got {value!r}")
    if "\x00" in value or has_surrogate(value):
        raise NotFound(missing)
    return value


def job_id_number(value: Any) -> int:
    """A job id as given to a lookup (an int, or a text of digits) as an int; anything else
    (a float, a bool, other text) is a ``ConfigError``, where ``int()`` turned ``1.5`` and
    ``True`` into job 1."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    raise ConfigError(f"a job id is a whole number, got {value!r}")


def positive_seconds(value: Any, what: str) -> float:
    """``value`` as a float if it is a number of seconds > 0 (not a bool, NaN or infinity), else
    ``ConfigError`` (a ``ValueError``): an interval, a lease, a grace period. Zero would spin, a
    negative one fail later, and an infinite one never come."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ConfigError(f"{what} must be > 0 seconds, got {value!r}")
    return float(value)


def waiting_seconds(value: Any, what: str) -> float:
    """``value`` as a float if it is a number of seconds >= 0 to wait for something, infinity
    included (as long as it takes), else ``ConfigError`` (a ``ValueError``): NaN or a negative
    number waited for nothing, and a text failed only when the wait began."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ConfigError(f"{what} must be a number of seconds >= 0, got {value!r}")
    return float(value)


def finite_number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PayloadError(f"{what} must be a finite number, got {value!r}")
    return float(value)


def payload_digest(payload_json: str) -> str:
    """SHA-256 of a payload's canonical JSON text: what a tombstone keeps of a pruned payload, so
    that a later enqueue of the key can still tell a duplicate from a conflict."""
    canonical = encode_payload(json.loads(payload_json))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


_QUEUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
_TASK = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,199}$")

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 10
DEFAULT_LEASE_SECONDS = 60.0
MAX_LEASE_SECONDS = 7 * 24 * 3600.0


def validate_queue_name(queue: str) -> str:
    if not isinstance(queue, str) or not _QUEUE.match(queue):
        raise ConfigError(
            f"queue name {queue!r} is invalid: 1-128 characters, letters, digits and _ . : -, "
            "starting with a letter or digit"
        )
    return queue


def whole_number(value: Any, low: int, high: int, what: str) -> int:
    """``value`` if it is a whole number from ``low`` to ``high``, else ``ConfigError`` (a
    ``ValueError``). A bool is no count: ``True`` would be read as 1 without a word."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{what} must be a whole number from {low} to {high}, got {value!r}")
    return value


def validate_max_attempts(value: int) -> int:
    return whole_number(value, 1, 1000, "max_attempts")


def validate_lease_seconds(value: float) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= MAX_LEASE_SECONDS
    ):
        raise ConfigError(f"lease_seconds must be > 0 and at most 7 days, got {value!r}")
    return float(value)


def validate_timeout_seconds(value: float | None) -> float | None:
    """A run's bound: None (no bound) or more than 0 and at most 7 days."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= MAX_LEASE_SECONDS
    ):
        raise ConfigError(f"timeout must be > 0 seconds and at most 7 days, got {value!r}")
    return float(value)


def validate_task_name(name: str) -> str:
    if not isinstance(name, str) or not _TASK.match(name):
        raise ConfigError(
            f"task name {name!r} is invalid: 1-200 characters, letters, digits and _ . : -"
        )
    return name
