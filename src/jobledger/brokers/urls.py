"""Broker URLs: which broker, where, and the names of what jobledger creates there.

One URL serves the relay and the consumers alike, so that both derive the same names::

    amqp://guest:guest@127.0.0.1:5672/%2F     RabbitMQ: a durable queue per ledger queue
    nats://127.0.0.1:4222                     NATS JetStream: a stream, a subject per queue
    redis://127.0.0.1:6379/0                  Redis Streams: a stream per queue, one group

Options jobledger reads from the query string (the others go to the client library):

- ``prefix`` (all): the start of every name, default ``jobledger``;
- ``timeout`` (all): seconds to connect, and to wait for a broker's confirmation, default 10;
- ``queue_type`` (RabbitMQ): ``classic`` (default) or ``quorum``;
- ``stream`` (NATS): the stream's name, default the prefix in capitals (``JOBLEDGER``);
- ``ack_wait`` (NATS): seconds before an unacknowledged message is delivered again, default 60;
- ``duplicate_window`` (NATS): seconds JetStream remembers message ids, default 120;
- ``group`` (Redis): the consumer group, default the prefix;
- ``reclaim_after`` (Redis): seconds before a message a consumer took but never acknowledged
  is taken over by another consumer, default 60.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..backends.url import redact
from ..errors import ConfigError

__all__ = ["BrokerURL"]

_KINDS = {
    "amqp": "rabbitmq",
    "amqps": "rabbitmq",
    "nats": "jetstream",
    "tls": "jetstream",
    "redis": "redis",
    "rediss": "redis",
}
_COMMON = {"prefix", "timeout"}
_OPTIONS = {
    "rabbitmq": _COMMON | {"queue_type"},
    "jetstream": _COMMON | {"stream", "ack_wait", "duplicate_window"},
    "redis": _COMMON | {"group", "reclaim_after"},
}
_PREFIX = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class BrokerURL:
    """A parsed broker URL. ``client_url`` is what the client library gets (our options
    removed); ``redacted`` hides the password and is what messages show."""

    raw: str
    kind: str
    """``rabbitmq``, ``jetstream`` or ``redis``."""
    client_url: str
    options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, url: str) -> BrokerURL:
        if not isinstance(url, str) or not url.strip():
            raise ConfigError(
                "broker URL is empty; expected amqp://…, nats://… or redis://… (see docs/transports.md)"
            )
        url = url.strip()
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError as exc:
            raise ConfigError(f"broker URL {redact(url)!r} cannot be parsed: {exc}") from None
        kind = _KINDS.get(parts.scheme.lower())
        if kind is None:
            raise ConfigError(
                f"broker URL {redact(url)!r} has unsupported scheme {parts.scheme!r}; expected "
                "amqp:// or amqps:// (RabbitMQ), nats:// or tls:// (NATS JetStream), "
                "redis:// or rediss:// (Redis Streams)"
            )
        if not parts.hostname:
            raise ConfigError(f"broker URL {redact(url)!r} names no host")
        query = parse_qsl(parts.query, keep_blank_values=True)
        ours = {k: v for k, v in query if k in _OPTIONS[kind]}
        foreign = [(k, v) for k, v in query if k not in _OPTIONS[kind]]
        if kind == "jetstream" and foreign:
            names = ", ".join(sorted({k for k, _ in foreign}))
            raise ConfigError(
                f"broker URL {redact(url)!r}: unknown option(s) {names}; NATS URLs take "
                f"{', '.join(sorted(_OPTIONS[kind]))}"
            )
        client = urlunsplit(parts._replace(query=urlencode(foreign)))
        parsed = cls(url, kind, client, ours)
        parsed._validate()
        return parsed

    def _validate(self) -> None:
        if not _PREFIX.match(self.prefix):
            raise ConfigError(
                f"broker URL {self.redacted!r}: prefix {self.prefix!r} must be 1-64 letters, "
                "digits, _ or -"
            )
        for name in ("timeout", "ack_wait", "duplicate_window", "reclaim_after"):
            if name in self.options:
                self._seconds(name, 0.0)
        if self.options.get("queue_type", "classic") not in ("classic", "quorum"):
            raise ConfigError(
                f"broker URL {self.redacted!r}: queue_type must be classic or quorum, got "
                f"{self.options['queue_type']!r}"
            )
        if "stream" in self.options and not re.match(r"^[A-Za-z0-9_-]{1,64}$", self.stream):
            raise ConfigError(
                f"broker URL {self.redacted!r}: stream {self.stream!r} must be 1-64 letters, "
                "digits, _ or -"
            )
        if "group" in self.options and not self.group.strip():
            raise ConfigError(f"broker URL {self.redacted!r}: group must not be empty")

    def _seconds(self, name: str, default: float) -> float:
        text = self.options.get(name)
        if text is None:
            return default
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(
                f"broker URL {self.redacted!r}: {name} must be a number of seconds > 0, got {text!r}"
            )
        return value

    def __str__(self) -> str:
        return self.redacted

    def __repr__(self) -> str:
        # A repr reaches logs and tracebacks too: the password is hidden as in the text.
        return f"BrokerURL({self.redacted!r}, kind={self.kind!r})"

    @property
    def redacted(self) -> str:
        return redact(self.raw)

    # -- options ---------------------------------------------------------------------------------

    @property
    def prefix(self) -> str:
        return self.options.get("prefix", "jobledger")

    @property
    def timeout(self) -> float:
        return self._seconds("timeout", 10.0)

    @property
    def queue_type(self) -> str:
        return self.options.get("queue_type", "classic")

    @property
    def stream(self) -> str:
        return self.options.get("stream") or _SAFE_NAME.sub("_", self.prefix.upper())

    @property
    def ack_wait(self) -> float:
        return self._seconds("ack_wait", 60.0)

    @property
    def duplicate_window(self) -> float:
        return self._seconds("duplicate_window", 120.0)

    @property
    def group(self) -> str:
        return self.options.get("group", self.prefix)

    @property
    def reclaim_after(self) -> float:
        return self._seconds("reclaim_after", 60.0)

    @property
    def redelivery_after(self) -> float | None:
        """Seconds after which the broker hands a message a consumer still holds to another
        consumer (None: only when the holder's connection closes, as on RabbitMQ)."""
        if self.kind == "jetstream":
            return self.ack_wait
        if self.kind == "redis":
            return self.reclaim_after
        return None

    # -- names per ledger queue --------------------------------------------------------------------

    def destination(self, queue: str) -> str:
        """Where the jobs of ``queue`` go: the RabbitMQ queue, the NATS subject or the Redis
        stream key."""
        if self.kind == "redis":
            return f"{self.prefix}:{queue}"
        return f"{self.prefix}.{queue}"

    def consumer_name(self, queue: str) -> str:
        """The durable JetStream consumer that all consumer processes of ``queue`` share."""
        safe = _SAFE_NAME.sub("_", queue)
        if safe != queue:  # keep "a.b" and "a_b" apart
            safe += "-" + hashlib.sha256(queue.encode()).hexdigest()[:8]
        return f"{self.prefix}-{safe}"
