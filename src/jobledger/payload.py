"""Checks on what callers hand the ledger: payloads and keys. Pure functions."""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

from .errors import PayloadError

__all__ = [
    "MAX_KEY_LENGTH",
    "MAX_PAYLOAD_BYTES",
    "encode_payload",
    "payload_digest",
    "validate_key",
]

MAX_PAYLOAD_BYTES = 256 * 1024
MAX_KEY_LENGTH = 512

# One encoder for every payload: ``json.dumps`` with options builds a new one per call.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
_CONTROL = re.compile("[\x00-\x1f\x7f]")


def encode_payload(payload: Any) -> str:
    """The canonical JSON text of a payload (sorted keys, no spaces), or ``PayloadError``.

    A payload must be a JSON object (a ``dict`` with string keys) of at most 256 KiB once encoded,
    without NaN or infinity. Payloads carry ids, not snapshots: look the data up when the job runs.
    """
    if not isinstance(payload, dict):
        raise PayloadError(f"payload must be a JSON object (a dict), got {type(payload).__name__}")
    try:
        text = _ENCODER.encode(payload)
    except ValueError as exc:
        raise PayloadError(f"payload is not valid JSON: {exc}") from None
    except TypeError as exc:
        raise PayloadError(f"payload is not JSON-serialisable: {exc}") from None
    # A character is at most 4 bytes in UTF-8: short texts need no encoding to be measured.
    size = len(text) if len(text) * 4 <= MAX_PAYLOAD_BYTES else len(text.encode("utf-8"))
    if size > MAX_PAYLOAD_BYTES:
        raise PayloadError(
            f"payload is {size} bytes; the limit is {MAX_PAYLOAD_BYTES} bytes (256 KiB). "
            "Store large data elsewhere and pass its id."
        )
    return text


def validate_key(key: Any) -> str:
    """A key is 1-512 characters without control characters; return it or raise ``PayloadError``."""
    return validate_name(key, "key", MAX_KEY_LENGTH)


def validate_name(value: Any, what: str, longest: int, empty_hint: str = "") -> str:
    """A name (a key, a group) is a string of 1 to ``longest`` characters without control
    characters; return it or raise ``PayloadError``."""
    if not isinstance(value, str):
        raise PayloadError(f"{what} must be a string, got {type(value).__name__}")
    if not value:
        raise PayloadError(f"{what} must not be empty{empty_hint}")
    if len(value) > longest:
        raise PayloadError(f"{what} is {len(value)} characters; the limit is {longest}")
    if _CONTROL.search(value):
        raise PayloadError(f"{what} {value!r} contains a control character")
    return value


def finite_number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PayloadError(f"{what} must be a finite number, got {value!r}")
    return float(value)


def payload_digest(payload_json: str) -> str:
    """SHA-256 of a payload's canonical JSON text: what a tombstone keeps of a pruned payload, so
    that a later enqueue of the key can still tell a duplicate from a conflict."""
    canonical = encode_payload(json.loads(payload_json))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
