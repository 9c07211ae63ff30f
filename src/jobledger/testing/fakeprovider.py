"""A fake email provider (on 127.0.0.1 unless told otherwise) that honours ``Idempotency-Key`` —
for the demo, the drill and the tests. Given a history recorder, it records every accepted
request as an ``effect`` (see ``jobledger.testing.history``).

``POST /send`` with a JSON body and an ``Idempotency-Key`` header "sends" a message: the first
request with a key is accepted (200 and a message id); a repeat with the same key answers the
same message id and is counted as a repeat the provider absorbed (``duplicates``), never as a
second message. A message whose body equals one already sent under another key (or none) *is*
sent again, and is counted in ``duplicate_sends``: the number a customer would notice, which a
correct client keeps at 0. ``GET /stats`` returns the counts. Behaviour for chosen recipients
can be scripted (rate limits with ``Retry-After``, then a permanent refusal; a timeout after
accepting) so that the story of retries can be shown end to end.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .history import HistoryRecorder

__all__ = ["FakeProvider", "ProviderScript"]


@dataclass
class ProviderScript:
    """What the provider does to some recipients (by the ``to`` field of the body)."""

    rate_limit: dict[str, int] = field(default_factory=dict)
    """recipient → how many requests to answer 429 (with ``Retry-After``) before accepting."""
    retry_after_seconds: int = 1
    timeout_after_accept: set[str] = field(default_factory=set)
    """recipients whose first accepted request is answered only after ``timeout_seconds``."""
    timeout_seconds: float = 5.0
    refuse: set[str] = field(default_factory=set)
    """recipients refused permanently (400), once their rate limits (if any) are used up."""
    latency_seconds: float = 0.0
    """how long accepting a message takes (so that clients hold work in flight)."""


class FakeProvider:
    """Start with ``with FakeProvider() as provider:``; ``provider.url`` is its base URL."""

    def __init__(
        self,
        script: ProviderScript | None = None,
        port: int = 0,
        host: str = "127.0.0.1",
        history: HistoryRecorder | None = None,
    ):
        self.script = script or ProviderScript()
        self.history = history
        """Where to record each accepted request as an ``effect`` (see ``jobledger.testing.history``)."""
        self._lock = threading.Lock()
        self.accepted: dict[str, dict[str, Any]] = {}
        """idempotency key → the accepted message."""
        self.duplicates = 0
        """Requests repeating an accepted key: absorbed, not sent again."""
        self.duplicate_sends = 0
        """Messages sent although the same body was already sent under another key (or none)."""
        self.by_recipient: Counter[str] = Counter()
        """Requests per recipient (the ``to`` field), whatever their answer."""
        self._sent_bodies: set[str] = set()
        self.sent_without_key = 0
        self.requests = 0
        self.incomplete = 0
        """Requests whose sender went away before the whole body arrived: never acted on."""
        self.rate_limited = 0
        self.refused = 0
        self.timeouts = 0
        self._rate_left = dict(self.script.rate_limit)
        self._timeouts_left = set(self.script.timeout_after_accept)
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _reply(
                self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/stats":
                    self._reply(200, provider.stats())
                else:
                    self._reply(404, {"error": "not found"})

            def do_POST(self) -> None:
                if self.path != "/send":
                    self._reply(404, {"error": "not found"})
                    return
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if len(raw) < length:
                    # The sender died mid-request (a SIGKILLed worker): nothing was sent. A real
                    # provider never acts on a request it did not receive whole.
                    with provider._lock:
                        provider.incomplete += 1
                    self.close_connection = True
                    return
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    self._reply(400, {"error": "malformed JSON"})
                    return
                if not isinstance(body, dict):
                    self._reply(400, {"error": "the body must be a JSON object"})
                    return
                status, reply, headers, delay = provider._handle(
                    self.headers.get("Idempotency-Key"), body
                )
                if delay:
                    time.sleep(delay)
                self._reply(status, reply, headers)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fake-provider", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def _handle(
        self, key: str | None, body: dict[str, Any]
    ) -> tuple[int, dict[str, Any], dict[str, str], float]:
        to = str(body.get("to", ""))
        with self._lock:
            self.requests += 1
            self.by_recipient[to] += 1
            if key is not None and key in self.accepted:
                self.duplicates += 1
                self._record(key, body, delivered=False)
                return 200, {"id": self.accepted[key]["id"], "replayed": True}, {}, 0.0
            if self._rate_left.get(to, 0) > 0:
                self._rate_left[to] -= 1
                self.rate_limited += 1
                return (
                    429,
                    {"error": "slow down"},
                    {"Retry-After": str(self.script.retry_after_seconds)},
                    0.0,
                )
            if to in self.script.refuse:
                self.refused += 1
                return 400, {"error": f"recipient {to} is not allowed"}, {}, 0.0
            message = {
                "id": uuid.uuid4().hex,
                "to": to,
                "body": body,
                "key": key,
                "at": time.time(),
            }
            fingerprint = json.dumps(body, sort_keys=True)
            if fingerprint in self._sent_bodies:
                self.duplicate_sends += 1
            self._sent_bodies.add(fingerprint)
            if key is None:
                self.sent_without_key += 1
            else:
                self.accepted[key] = message
            self._record(key, body, delivered=True)
            delay = self.script.latency_seconds
            if to in self._timeouts_left:
                self._timeouts_left.discard(to)
                self.timeouts += 1
                delay += self.script.timeout_seconds
            return 200, {"id": message["id"]}, {}, delay

    def _record(self, key: str | None, body: dict[str, Any], delivered: bool) -> None:
        """Record an effect in the history. A body naming ``job_queue``, ``job_key`` and
        ``effect`` lets the checker tie deliveries to jobs whatever idempotency key was sent."""
        if self.history is not None:
            self.history.record(
                "effect",
                queue=body.get("job_queue"),
                key=body.get("job_key"),
                effect=body.get("effect"),
                idem=key,
                delivered=delivered,
            )

    def limit(self, to: str, count: int) -> None:
        """Answer the next ``count`` requests for ``to`` with 429 and ``Retry-After``."""
        with self._lock:
            self._rate_left[to] = count

    def refuse(self, to: str, refused: bool = True) -> None:
        """Refuse ``to`` permanently (400) from now on, or (``refused=False``) accept it again."""
        with self._lock:
            if refused:
                self.script.refuse.add(to)
            else:
                self.script.refuse.discard(to)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "requests": self.requests,
                "incomplete": self.incomplete,
                "accepted": len(self.accepted) + self.sent_without_key,
                "duplicates": self.duplicates,
                "duplicate_sends": self.duplicate_sends,
                "rate_limited": self.rate_limited,
                "refused": self.refused,
                "timeouts": self.timeouts,
            }

    def start(self) -> FakeProvider:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:  # pragma: no cover - manual use: python -m jobledger.testing.fakeprovider
    provider = FakeProvider(port=8025).start()
    print(f"fake provider on {provider.url}; Ctrl-C to stop")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        provider.stop()


if __name__ == "__main__":  # pragma: no cover
    main()
