"""Standard Webhooks, to the letter: secrets, signatures, verification, ids. Pure functions.

The specification (https://www.standardwebhooks.com, version 1.0.0) in the parts we use:

- a **secret** is ``whsec_`` + the base64 of 24 to 64 random bytes; the HMAC key is the decoded
  bytes, not the text;
- a delivery is an HTTP ``POST`` whose body is JSON, with three headers: ``webhook-id`` (the same
  on every retry: receivers use it as an idempotency key), ``webhook-timestamp`` (integer Unix
  seconds of *this* attempt) and ``webhook-signature``;
- the signature is ``v1,`` + base64 of HMAC-SHA256 over ``{webhook-id}.{webhook-timestamp}.{body}``
  (the exact bytes sent); the header is a space-separated list, so that during a secret rotation
  the delivery is signed with the new and the old secret and a receiver that knows either passes;
- a receiver rejects a timestamp more than five minutes away from its clock, compares signatures
  in constant time, and processes a ``webhook-id`` once.

The specification warns that the id and the timestamp must not contain ``.`` (the separator of the
signed content). A job key may, so ``webhook_id`` percent-encodes ``.``, ``%`` and every character
outside printable ASCII; the keys people write (``4187:2026-W33``) pass through unchanged, and
``key_from_webhook_id`` turns the id back into the key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets as _random
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from .errors import ConfigError

__all__ = [
    "DEFAULT_TOLERANCE",
    "SECRET_PREFIX",
    "WebhookVerificationError",
    "event_body",
    "generate_secret",
    "key_from_webhook_id",
    "secret_bytes",
    "sign",
    "signature_header",
    "verify_webhook",
    "webhook_id",
]

SECRET_PREFIX = "whsec_"
#: Seconds a receiver allows between a delivery's timestamp and its own clock, either way.
DEFAULT_TOLERANCE = 300
MIN_SECRET_BYTES = 24
MAX_SECRET_BYTES = 64
_NEW_SECRET_BYTES = 32


class WebhookVerificationError(Exception):
    """A delivery failed verification. ``reason`` is one of ``missing-header``,
    ``invalid-header``, ``timestamp-too-old``, ``timestamp-too-new``, ``no-matching-signature``."""

    def __init__(self, reason: str, detail: str):
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}")


def generate_secret() -> str:
    """A new signing secret: ``whsec_`` + base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(_random.token_bytes(_NEW_SECRET_BYTES)).decode("ascii")


def secret_bytes(secret: str) -> bytes:
    """The HMAC key of a ``whsec_`` secret, or ``ConfigError`` saying what is wrong with it."""
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        raise ConfigError("a webhook secret starts with 'whsec_' followed by base64")
    text = secret[len(SECRET_PREFIX) :]
    try:
        key = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError("the webhook secret after 'whsec_' is not valid base64") from None
    if not MIN_SECRET_BYTES <= len(key) <= MAX_SECRET_BYTES:
        raise ConfigError(
            f"a webhook secret holds {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} random bytes; "
            f"this one holds {len(key)}"
        )
    return key


def webhook_id(key: str) -> str:
    """The ``webhook-id`` of a job key: the key itself, with ``.``, ``%``, spaces and every
    character outside printable ASCII percent-encoded (UTF-8), so that it cannot contain the
    signature's separator and is a valid header value."""
    out = []
    for ch in key:
        if "!" <= ch <= "~" and ch not in ".%":
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    return "".join(out)


def key_from_webhook_id(value: str) -> str:
    """The job key a ``webhook-id`` made by ``webhook_id`` stands for."""
    return unquote(value, errors="strict")


def event_body(event_type: str, occurred_at: datetime, data: Mapping[str, Any]) -> bytes:
    """The JSON body of a delivery: ``{"type", "timestamp", "data"}``, minified, UTF-8.

    ``timestamp`` is when the event happened (for a job: when it was created), the same on every
    attempt; the attempt's own time is in the ``webhook-timestamp`` header."""
    stamp = occurred_at.astimezone(UTC).isoformat().replace("+00:00", "Z")
    document = {"type": event_type, "timestamp": stamp, "data": data}
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _signed_content(msg_id: str, timestamp: int, body: bytes) -> bytes:
    return f"{msg_id}.{timestamp}.".encode() + body


def sign(secret: str | bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """One signature, ``v1,<base64 HMAC-SHA256 of id.timestamp.body>``."""
    key = secret if isinstance(secret, bytes) else secret_bytes(secret)
    digest = hmac.new(key, _signed_content(msg_id, timestamp, body), hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def signature_header(secrets: Iterable[str], msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: one signature per secret (current first), space-separated."""
    return " ".join(sign(s, msg_id, timestamp, body) for s in secrets)


def _header(headers: Mapping[str, str] | Any, name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        value = headers.get(name.title())
    return None if value is None else str(value)


def verify_webhook(
    secrets: str | Iterable[str],
    headers: Mapping[str, str] | Any,
    body: bytes,
    *,
    now: float | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> str:
    """Check a delivery from any Standard Webhooks sender; return its ``webhook-id``.

    ``headers`` is any mapping with lower-case (or title-case) names; ``body`` the raw bytes, not
    parsed. The timestamp must be within ``tolerance`` seconds of ``now`` (default: this clock),
    and one ``v1`` signature must match one of ``secrets`` (one secret, or several during a
    rotation). Compared in constant time. Raises ``WebhookVerificationError``; never parses the
    body.
    """
    keys = [secret_bytes(s) for s in ([secrets] if isinstance(secrets, str) else secrets)]
    if not keys:
        raise ConfigError("verify_webhook needs at least one secret")
    msg_id = _header(headers, "webhook-id")
    stamp = _header(headers, "webhook-timestamp")
    signatures = _header(headers, "webhook-signature")
    for name, value in (
        ("webhook-id", msg_id),
        ("webhook-timestamp", stamp),
        ("webhook-signature", signatures),
    ):
        if not value:
            raise WebhookVerificationError("missing-header", f"no {name} header")
    assert msg_id is not None and stamp is not None and signatures is not None
    if not stamp.isascii() or not stamp.isdigit() or len(stamp) > 12:
        raise WebhookVerificationError(
            "invalid-header", "webhook-timestamp must be integer Unix seconds"
        )
    timestamp = int(stamp)
    clock = time.time() if now is None else now
    if timestamp < clock - tolerance:
        raise WebhookVerificationError(
            "timestamp-too-old", f"the timestamp is {clock - timestamp:.0f} s old"
        )
    if timestamp > clock + tolerance:
        raise WebhookVerificationError(
            "timestamp-too-new", f"the timestamp is {timestamp - clock:.0f} s in the future"
        )
    content = _signed_content(msg_id, timestamp, body)
    expected = [hmac.new(k, content, hashlib.sha256).digest() for k in keys]
    for entry in signatures.split(" "):
        version, sep, encoded = entry.partition(",")
        if version != "v1" or not sep:
            continue
        try:
            given = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            continue
        if any(hmac.compare_digest(given, e) for e in expected):
            return msg_id
    raise WebhookVerificationError("no-matching-signature", "no v1 signature matches a secret")
