"""A Python client for the HTTP API (``jobledger serve``), on httpx.

    from jobledger.client import Client

    with Client("http://127.0.0.1:8787", api_key) as client:
        sent = client.publish("weekly-digests", {"customer_id": 4187}, key="4187:2026-W33")
        for message in client.receive("weekly-digests", wait_seconds=20):
            ...
            client.ack(message.receipt)

Retries. ``publish`` and ``publish_batch`` send one Idempotency-Key per call (yours, or one made
up once for the call) and retry with that same key, so a retry can never publish twice:

- 429: after ``Retry-After`` seconds (else exponential backoff with full jitter);
- 409 ``key-in-flight`` (an earlier attempt of this very call is still being processed), 5xx
  and network errors: exponential backoff with full jitter — for a 503, never sooner than its
  ``Retry-After`` (the server's earliest worthwhile retry while its database is down);
- any other 4xx: raised at once as ``ApiError`` (or a subclass) carrying the problem body.

The other calls retry 429, 503 and connection failures (the request never left); a receipt
call whose answer was lost is not retried, because its second try would find it stale.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from .policy import parse_retry_after

__all__ = [
    "ApiError",
    "ApiUnavailable",
    "Client",
    "ClientError",
    "KeyReused",
    "Published",
    "RateLimited",
    "Received",
    "StaleReceipt",
]


class ClientError(Exception):
    """Base of what the client raises."""


class ApiUnavailable(ClientError):
    """The server could not be reached, or kept failing (5xx), through every retry."""


class ApiError(ClientError):
    """The server refused the request (4xx). ``problem`` is its problem+json body (or, for an
    answer that is not one, its status and text); ``status``, ``type``, ``title`` and
    ``detail`` are shortcuts."""

    def __init__(self, status: int, problem: Mapping[str, Any]):
        self.status = status
        self.problem = dict(problem)
        self.type = str(problem.get("type", "about:blank"))
        self.title = str(problem.get("title", ""))
        self.detail = str(problem.get("detail", ""))
        super().__init__(f"{status} {self.title}: {self.detail}")


class RateLimited(ApiError):
    """429 through every retry. ``retry_after`` is the server's last advice, in seconds."""

    @property
    def retry_after(self) -> float | None:
        value = self.problem.get("retry_after")
        return float(value) if isinstance(value, int | float) else None


class KeyReused(ApiError):
    """422: the Idempotency-Key already names a message made by a different request."""


class StaleReceipt(ApiError):
    """409: the receipt no longer holds the message's lease; nothing changed."""


def _error(status: int, problem: Mapping[str, Any]) -> ApiError:
    kind = str(problem.get("type", ""))
    if status == 429:
        return RateLimited(status, problem)
    if kind.endswith(":key-reused"):
        return KeyReused(status, problem)
    if kind.endswith(":stale-receipt"):
        return StaleReceipt(status, problem)
    return ApiError(status, problem)


@dataclass(frozen=True)
class Published:
    """A published message: ``replayed`` is True when the server had it already (200)."""

    message_id: str
    queue: str
    key: str
    state: str
    run_at: str
    replayed: bool


@dataclass(frozen=True)
class Received:
    """A received message. Ack, nack or extend it with ``receipt`` before ``lease_until``."""

    message_id: str
    queue: str
    key: str
    task: str
    payload: dict[str, Any]
    attempt: int
    attempts_left: int
    receipt: str
    lease_until: str
    correlation_id: str | None = None
    group: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


_RECEIVED_FIELDS = {f for f in Received.__dataclass_fields__ if f != "extra"}


class Client:
    """A client of one jobledger server with one API key. Thread-safe (httpx is)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        max_retries: int = 8,
        backoff_base: float = 0.2,
        backoff_cap: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=timeout,
            transport=transport,
        )
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self._sleep = sleep

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- plumbing ----------------------------------------------------------------------------------

    def _backoff(self, attempt: int) -> float:
        return random.uniform(0, min(self.backoff_cap, self.backoff_base * 2**attempt))

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool = False,
        timeout: float | None = None,
    ) -> httpx.Response:
        """Send, retrying as the module docstring says; return a 2xx response or raise."""
        attempt = 0
        while True:
            try:
                response = self._http.request(
                    method,
                    path,
                    json=json,
                    params=params,
                    headers=headers,
                    timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
                )
            except httpx.TransportError as exc:
                never_sent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
                if (idempotent or never_sent) and attempt < self.max_retries:
                    self._sleep(self._backoff(attempt))
                    attempt += 1
                    continue
                raise ApiUnavailable(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
            if response.is_success:
                return response
            status = response.status_code
            problem = _problem(response)
            retry = status in (429, 503) or (
                idempotent
                and (status >= 500 or str(problem.get("type", "")).endswith(":key-in-flight"))
            )
            if retry and attempt < self.max_retries:
                wait = parse_retry_after(response.headers.get("Retry-After"))
                if wait is None:
                    wait = self._backoff(attempt)
                elif status != 429:
                    # A 503's Retry-After is the earliest worth trying, not a promise: keep
                    # backing off, so that a long outage is waited out, not hammered.
                    wait = max(wait, self._backoff(attempt))
                self._sleep(wait)
                attempt += 1
                continue
            if status >= 500:
                raise ApiUnavailable(f"{method} {path}: HTTP {status}: {problem.get('detail', '')}")
            raise _error(status, problem)

    # -- publishing --------------------------------------------------------------------------------

    def publish(
        self,
        queue: str,
        payload: Mapping[str, Any],
        *,
        key: str | None = None,
        delay_seconds: float = 0,
        priority: int = 0,
        group: str | None = None,
    ) -> Published:
        """Publish one message. ``key`` is the Idempotency-Key (the job's business key); without
        one, a random key is made for this call and reused by its retries. ``group`` puts the
        message in a group (a tenant): see docs/groups.md."""
        idempotency_key = key if key is not None else f"client:{uuid.uuid4().hex}"
        body = {"queue": queue, "payload": dict(payload)} | _given(
            delay_seconds=delay_seconds or None, priority=priority or None, group=group
        )
        response = self._request(
            "POST",
            "/v1/queue/publish",
            json=body,
            headers={"Idempotency-Key": idempotency_key},
            idempotent=True,
        )
        data = response.json()
        return Published(
            message_id=data["message_id"],
            queue=data["queue"],
            key=data["key"],
            state=data["state"],
            run_at=data["run_at"],
            replayed=response.status_code == 200,
        )

    def publish_batch(
        self, queue: str, messages: Iterable[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        """Publish up to 500 messages (each ``{"payload", "key"?, "delay_seconds"?,
        "priority"?, "group"?}``); messages without a key get one made up for this call. Returns the
        per-message results (``status`` 201, 200, 409 or 422)."""
        items = []
        for message in messages:
            item = dict(message)
            item.setdefault("key", f"client:{uuid.uuid4().hex}")
            items.append(item)
        response = self._request(
            "POST",
            "/v1/queue/publish-batch",
            json={"queue": queue, "messages": items},
            idempotent=True,
        )
        return list(response.json()["results"])

    # -- consuming ---------------------------------------------------------------------------------

    def receive(
        self,
        queue: str,
        *,
        max_messages: int = 10,
        lease_seconds: float | None = None,
        wait_seconds: float = 0,
        consumer: str | None = None,
    ) -> list[Received]:
        """Receive up to ``max_messages``, waiting up to ``wait_seconds`` (≤ 20) when none is
        due. Each must be acked, nacked or extended before its lease ends."""
        body = {"queue": queue, "max_messages": max_messages, "wait_seconds": wait_seconds}
        response = self._request(
            "POST",
            "/v1/queue/receive",
            json=body | _given(lease_seconds=lease_seconds, consumer=consumer),
            timeout=max(self._http.timeout.read or 30.0, wait_seconds + 10.0),
        )
        out = []
        for m in response.json()["messages"]:
            known = {k: v for k, v in m.items() if k in _RECEIVED_FIELDS}
            extra = {k: v for k, v in m.items() if k not in _RECEIVED_FIELDS}
            out.append(Received(**known, extra=extra))
        return out

    def ack(self, receipt: str) -> dict[str, Any]:
        """The message is done. ``StaleReceipt`` if the lease was lost."""
        return dict(self._request("POST", "/v1/queue/ack", json={"receipt": receipt}).json())

    def nack(
        self,
        receipt: str,
        error: str = "nacked by the consumer",
        *,
        retry_after_seconds: float | None = None,
        permanent: bool = False,
        error_class: str | None = None,
        pause_group: bool = False,
    ) -> dict[str, Any]:
        """The delivery failed: retry later (after ``retry_after_seconds``, else the queue's
        backoff), or with ``permanent`` never. ``pause_group`` also holds back the message's
        whole group until the retry time (it needs ``retry_after_seconds``). Returns the
        message's new state."""
        body = {"receipt": receipt, "error": error} | _given(
            retry_after_seconds=retry_after_seconds,
            permanent=permanent or None,
            error_class=error_class,
            pause_group=pause_group or None,
        )
        return dict(self._request("POST", "/v1/queue/nack", json=body).json())

    def extend(self, receipt: str, lease_seconds: float) -> dict[str, Any]:
        """Keep the lease ``lease_seconds`` more from now."""
        body = {"receipt": receipt, "lease_seconds": lease_seconds}
        return dict(self._request("POST", "/v1/queue/extend", json=body).json())

    # -- queues and operators ----------------------------------------------------------------------

    def put_queue(self, name: str, **settings: Any) -> dict[str, Any]:
        """Declare a queue (admin): ``max_attempts``, ``lease_seconds``, ``backoff``,
        ``retention_seconds``, ``require_idempotency_key``, ``task``."""
        return dict(self._request("PUT", f"/v1/queues/{name}", json=settings).json())

    def get_queue(self, name: str) -> dict[str, Any]:
        return dict(self._request("GET", f"/v1/queues/{name}").json())

    def list_queues(self) -> list[dict[str, Any]]:
        return list(self._request("GET", "/v1/queues").json()["queues"])

    def get_message(self, message_id: str | int) -> dict[str, Any]:
        """A message with its attempt history (admin), and its ``result`` — what the handler
        returned — once it is done (null before)."""
        return dict(self._request("GET", f"/v1/messages/{message_id}").json())

    def find_messages(
        self, queue: str, *, key: str | None = None, state: str | None = None, limit: int = 50
    ) -> list[dict[str, Any]]:
        """Messages of a queue by key or state (admin), with their history."""
        params = {"limit": limit} | _given(key=key, state=state)
        response = self._request("GET", f"/v1/queues/{queue}/messages", params=params)
        return list(response.json()["messages"])

    def redrive(self, queue: str, reason: str, **filters: Any) -> dict[str, Any]:
        """Redrive dead letters of a queue (admin): filters as in the API (``dry_run``,
        ``message_ids``, ``error_contains``, ``limit``, ``rate``, ``actor`` …)."""
        body = {"reason": reason, **filters}
        return dict(self._request("POST", f"/v1/queues/{queue}/redrive", json=body).json())

    def resolve(
        self, message_id: str | int, note: str, state: str = "done", actor: str | None = None
    ) -> dict[str, Any]:
        """Mark one dead or pending message done (or pending again) by hand (admin)."""
        body = {"note": note, "state": state} | _given(actor=actor)
        path = f"/v1/messages/{message_id}/resolve"
        return dict(self._request("POST", path, json=body).json())


def _given(**fields: Any) -> dict[str, Any]:
    """The fields that have a value (not None): what a request sends of its optional ones."""
    return {name: value for name, value in fields.items() if value is not None}


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        return body
    return {"status": response.status_code, "detail": response.text[:500]}
