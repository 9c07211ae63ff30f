"""The delivery loop: claim the jobs of subscribed queues and POST them, signed.

One ``PushService`` runs one asyncio event loop on a thread of its own, with one **lane** per
subscription. A lane claims its queue's due jobs with ``job_claim`` — the statement every worker
uses: a new lease token, an attempt record, ``attempts + 1`` — and delivers each under that lease:

- the body is ``{"type": <task>, "timestamp": <job created>, "data": <payload>}``; the headers
  ``webhook-id`` (the job key, see ``jobledger.push.webhook_id``), ``webhook-timestamp`` and
  ``webhook-signature`` follow Standard Webhooks; ``jobledger-attempt`` and
  ``jobledger-correlation-id`` are added for the receiver's logs;
- the answer decides, and the lease token fences the write: 2xx → done; 429, 502, 503, 504 (and,
  as for every HTTP call in jobledger, 408, 409, 425 and other 5xx), timeouts and connection
  errors → pending again after ``Retry-After`` or the queue's backoff; 410 → the job is given
  back (not charged) and the subscription is disabled; other 4xx → dead, with the answer's body
  (truncated) as the error; 3xx → a failure, retried; redirects are never followed;
- every request is bounded by the subscription's timeout (default 15 s) from connect to the end
  of the answer, and the lease outlasts it (timeout + 30 s), so a lease never expires under a
  request in flight. If the process dies mid-request, the lease expires, the rescuer makes the
  job due again, and the receiver sees the same ``webhook-id`` twice (and dedupes it).

Lanes share nothing that can block: each has its own connection pool, its own limit on requests
in flight (``concurrency``) and its own rate limit (a token bucket in the database, shared by every
delivering process); database calls run on a thread pool. A slow endpoint fills only its own
lane's slots.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import httpcore

from .._faults import fault_point
from .._records import (
    MAX_CONCURRENCY,
    ClaimedJob,
    JobFilter,
    Subscription,
    SubscriptionState,
    positive_seconds,
    visible_nul,
)
from .._runtime.leases import LeaseHold
from .._runtime.outcomes import Finished, failure
from .._runtime.runtime import Runtime
from .._runtime.worker import default_worker_name
from .._webhooks import event_body, signature_header, webhook_id
from ..backends.base import Backend
from ..errors import BackendUnavailable, ConfigError, NotFound
from ..maintenance.rescuer import Rescuer
from ..observability.tracing import trace_headers
from ..policy import DEFAULT_BACKOFF, Backoff, classify_status
from ..policy import Decision as Verdict
from .guard import AddressPolicy, GuardedNetworkBackend, TargetRefused, plain_http
from .observe import DeliveryReport, PushCounters, SubscriptionChange, status_class

if TYPE_CHECKING:
    from .._ledger import Ledger

__all__ = ["Decision", "PushService", "PushSettings", "decide"]

log = logging.getLogger("jobledger.push")
T = TypeVar("T")

USER_AGENT = "jobledger-push/0.1 (Standard Webhooks)"
#: The longest an endpoint's ``Retry-After`` holds back its subscription's other deliveries,
#: in seconds. The hold lives in this process only (the job's own retry time is in the ledger,
#: however far): without a bound, an endpoint that asked for years kept the lane silent until
#: the process restarted, and then not at all. Past it, the next due job is tried, and a new
#: ``Retry-After`` holds the lane again.
LONGEST_HOLD = 3600.0


@dataclass(frozen=True)
class PushSettings:
    """How a delivery loop behaves. Validated when built.

    - ``allow_networks``: networks deliveries may reach although they are not public
      (``127.0.0.1``, ``10.0.0.0/8``); plain ``http://`` URLs only reach these;
    - ``ca_file``: a PEM file of extra certificate authorities to trust (beside the system's);
    - ``poll_interval``: the longest pause between looks at an idle queue (default 1 s on
      PostgreSQL, whose LISTEN/NOTIFY wakes the loop sooner, 0.25 s on SQLite);
    - ``refresh_interval``: how often subscriptions are re-read (new, paused, changed ones);
    - ``rescue_interval``: how often expired leases are rescued; None when something else
      does it (``jobledger serve`` runs its own rescuer);
    - ``body_kept``: characters of a failed answer's body kept in the job's error;
    - ``grace``: seconds a stop waits for requests in flight before abandoning them;
    - ``lease_margin``: a delivery's lease lasts its subscription's timeout plus this much, so
      that it never expires under a request in flight; after a crash, the job is delivered
      again once it has expired (and the rescuer ran).
    """

    allow_networks: tuple[str, ...] = ()
    ca_file: str | None = None
    poll_interval: float | None = None
    refresh_interval: float = 2.0
    rescue_interval: float | None = 5.0
    body_kept: int = 2000
    grace: float = 20.0
    lease_margin: float = 30.0
    policy: AddressPolicy = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "allow_networks", tuple(self.allow_networks))
        object.__setattr__(self, "policy", AddressPolicy.parse(self.allow_networks))
        for name in ("refresh_interval", "grace", "lease_margin"):
            positive_seconds(getattr(self, name), f"push {name}")
        for name in ("poll_interval", "rescue_interval"):  # None: the default
            if getattr(self, name) is not None:
                positive_seconds(getattr(self, name), f"push {name}")
        if not isinstance(self.body_kept, int) or not 0 <= self.body_kept <= 100_000:
            raise ConfigError(f"push body_kept must be 0..100000, got {self.body_kept!r}")
        if self.ca_file is not None:
            ssl_context(self.ca_file)  # fail now if the file is missing or not PEM


def ssl_context(ca_file: str | None) -> ssl.SSLContext:
    """Certificate verification on, with the system's authorities and certifi's, plus
    ``ca_file``."""
    context = ssl.create_default_context()
    with contextlib.suppress(ImportError, OSError):
        import certifi

        context.load_verify_locations(certifi.where())
    if ca_file is not None:
        try:
            context.load_verify_locations(cafile=ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot load CA file {ca_file!r}: {exc}") from None
    return context


# -- what an answer means ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with a job after one delivery: ``done``, ``retry`` (after ``delay`` seconds,
    or the backoff when None), ``dead``, or ``disable`` (410: give the job back, disable the
    subscription)."""

    action: str
    delay: float | None
    error_class: str | None
    message: str | None


def _without_class(message: str | None, error_class: str) -> str:
    """A job's error message beside its class: ``HTTP 400: ok`` is recorded as class
    ``HTTP 400``, message ``ok`` (as a worker records ``ValueError`` and its message)."""
    rest = (message or "").removeprefix(error_class).removeprefix(": ").strip()
    return rest or ("no response body" if message == error_class else "delivery failed")


def decide(
    status: int,
    headers: dict[str, str],
    body: bytes,
    *,
    body_kept: int = 2000,
    now: datetime | None = None,
) -> Decision:
    """The outcome of an HTTP answer: the one policy's (``policy.classify_status``, SPEC §3),
    and Standard Webhooks' 410, which disables the subscription."""
    verdict = classify_status(status, headers, now, body, body_kept=body_kept)
    if verdict is None:
        return Decision("done", None, None, None)
    if status == 410:
        return Decision(
            "disable", None, verdict.error_class, f"{verdict.message} (the endpoint is gone)"
        )
    message = verdict.message
    if 300 <= status < 400:
        message += "; point the subscription at the final URL"
    return Decision(
        "retry" if verdict.retry else "dead", verdict.delay, verdict.error_class, message
    )


def _error_of(exc: BaseException, timeout: float) -> tuple[str, str]:
    """(error class, message) for a delivery that got no answer."""
    if isinstance(exc, TimeoutError | httpcore.TimeoutException):
        return "Timeout", f"no complete answer within {timeout:g} s"
    if isinstance(exc, TargetRefused):
        return "TargetRefused", str(exc)
    text = str(exc) or type(exc).__name__
    if "CERTIFICATE_VERIFY_FAILED" in text or isinstance(exc, ssl.SSLError):
        return "TLSError", f"TLS failed: {text}"
    if isinstance(exc, httpcore.ConnectError):
        return "ConnectError", f"cannot connect: {text}"
    if isinstance(exc, httpcore.ProtocolError):
        return "ProtocolError", f"the connection broke before a complete answer: {text}"
    return "NetworkError", f"{type(exc).__name__}: {text}"


# -- the service -------------------------------------------------------------------------------


class _Wake(threading.Event):
    """Registered with the ledger: an enqueue in this process wakes the lanes at once."""

    def __init__(self, service: PushService):
        super().__init__()
        self._service = service

    def set(self) -> None:
        self._service._wake_all_threadsafe()


class PushService:
    """The delivery loop of one process: every active subscription of the ledger, delivered.

    ``start()`` runs it on a thread (how ``jobledger serve`` runs it); ``run()`` blocks until
    ``stop()`` (how ``jobledger push`` runs it). ``counters`` counts deliveries; observers (see
    ``jobledger.push.observe``) are told of each one. ``rng`` draws the jitter of a retry that
    the endpoint gave no ``Retry-After`` (a number in [0, 1) times the backoff's ceiling for
    that attempt; None: ``random.random``, as ``Backoff.delay`` draws it); tests pass their own.
    """

    def __init__(
        self,
        ledger: Ledger,
        settings: PushSettings | None = None,
        *,
        name: str | None = None,
        observers: Iterable[Any] = (),
        rng: Callable[[], float] | None = None,
    ):
        self.ledger = ledger
        self.rng = rng
        self.settings = settings or PushSettings()
        self.name = name or default_worker_name()
        # The one runtime: claims, the fenced outcome writes (in batches, shared by every
        # lane) and what they mean. Push tells its own observers (``DeliveryReport``).
        self.runtime = Runtime(lambda: ledger.backend, self.name, tracer=ledger.attempt_tracer())
        interval = self.settings.rescue_interval
        self._rescuer = Rescuer(lambda: ledger.backend, interval) if interval else None
        self.counters = PushCounters()
        self._observers = [self.counters, *observers]
        self._ssl = ssl_context(self.settings.ca_file)
        self._network = GuardedNetworkBackend(self.settings.policy)
        self._lanes: dict[str, _Lane] = {}
        self._executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="jobledger-push")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._stop_requested = threading.Event()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._wake = _Wake(self)
        self._listener: threading.Thread | None = None
        self._listen_queues: frozenset[str] = frozenset()

    def __repr__(self) -> str:
        return f"<PushService {self.name} lanes={sorted(self._lanes)}>"

    @property
    def backend(self) -> Backend:
        return self.ledger.backend

    @property
    def poll_interval(self) -> float:
        if self.settings.poll_interval is not None:
            return self.settings.poll_interval
        return 1.0 if self.backend.supports_listen else 0.25

    # -- running ---------------------------------------------------------------------------------

    def run(self) -> None:
        """Deliver until ``stop()`` is called (from another thread or a signal handler)."""
        asyncio.run(self._main())

    def start(self) -> None:
        """Run on a background thread; returns once the loop is up."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self.run, name="jobledger-push", daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def stop(self, timeout: float | None = None) -> None:
        """Stop claiming, let requests in flight finish (up to ``grace``), and end."""
        self._stop_requested.set()
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stopping.set)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout if timeout is not None else self.settings.grace + 10)
            self._thread = None

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        if self._stop_requested.is_set():
            self._stopping.set()
        self.ledger._register_wake(self._wake)
        # Push leases outlast their request (timeout + lease_margin): nothing to renew.
        self.runtime.start_runtime(renew=False)
        if self._rescuer is not None:
            self._rescuer.start()
        self._ready.set()
        log.info("push delivery %s started", self.name)
        try:
            while not self._stopping.is_set():
                try:
                    subscriptions = await self.db(self.backend.subscriptions.all)
                    self._reconcile(subscriptions)
                except BackendUnavailable as exc:
                    log.warning("push: cannot read subscriptions: %s", exc)
                except Exception:  # a bug: keep delivering, say so loudly
                    log.exception("push: refreshing subscriptions failed")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), self.settings.refresh_interval)
        finally:
            self.ledger._unregister_wake(self._wake)
            lanes = list(self._lanes.values())
            for lane in lanes:
                lane.retire()
            await asyncio.gather(*(lane.finish(self.settings.grace) for lane in lanes))
            self._lanes.clear()
            if self._rescuer is not None:
                await self.db(self._rescuer.stop)
            await self.db(self.runtime.drain, time.monotonic() + 10.0)
            self._executor.shutdown(wait=False)
            log.info("push delivery %s stopped", self.name)

    @property
    def stopping(self) -> bool:
        return self._stopping is None or self._stopping.is_set()

    async def db(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking backend call on the service's thread pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args))

    def _reconcile(self, subscriptions: Sequence[Subscription]) -> None:
        seen = set()
        for sub in subscriptions:
            seen.add(sub.id)
            lane = self._lanes.get(sub.id)
            if lane is None:
                lane = self._lanes[sub.id] = _Lane(self, sub)
                lane.task = asyncio.create_task(lane.run(), name=f"push-lane-{sub.id}")
            else:
                lane.update(sub)
        for sub_id in [s for s in self._lanes if s not in seen]:
            lane = self._lanes.pop(sub_id)
            lane.retire()
            asyncio.create_task(lane.finish(self.settings.grace))
        self._listen(
            frozenset(
                lane.sub.queue
                for lane in self._lanes.values()
                if lane.sub.state is SubscriptionState.ACTIVE
            )
        )

    def _wake_all(self) -> None:
        for lane in self._lanes.values():
            lane.wake.set()

    def _wake_all_threadsafe(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._wake_all)

    def _listen(self, queues: frozenset[str]) -> None:
        """On PostgreSQL, a LISTEN thread for the active queues wakes the lanes."""
        if queues == self._listen_queues or not self.backend.supports_listen:
            return
        self._listen_queues = queues
        if queues and (self._listener is None or not self._listener.is_alive()):
            self._listener = threading.Thread(
                target=self._listen_loop, name="jobledger-push-listen", daemon=True
            )
            self._listener.start()

    def _listen_loop(self) -> None:
        queues: frozenset[str] = frozenset()
        listener = None
        try:
            while not self._stop_requested.is_set():
                if self._listen_queues != queues:
                    if listener is not None:
                        listener.close()
                    queues = self._listen_queues
                    listener = self.backend.listener(sorted(queues)) if queues else None
                if listener is None:
                    self._stop_requested.wait(0.5)
                    continue
                if listener.wait(0.5):
                    self._wake_all_threadsafe()
        except Exception:  # never take the loop down with a listener
            log.exception("push: the listener failed; polling only")
        finally:
            if listener is not None:
                listener.close()

    # -- telling the outside ---------------------------------------------------------------------

    def _observers_with(self, method: str) -> list[Callable[[Any], None]]:
        found = []
        for observer in [*self._observers, *self.ledger.observers]:
            fn = getattr(observer, method, None)
            if fn is not None:
                found.append(fn)
        return found

    def notify(self, method: str, event: Any) -> None:
        for fn in self._observers_with(method):
            try:
                fn(event)
            except Exception:
                log.exception("push observer %r failed", fn)


class _Lane:
    """One subscription's deliveries: claims up to its free slots, sends, records outcomes."""

    def __init__(self, service: PushService, sub: Subscription):
        self.service = service
        self.sub = sub
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.inflight: set[asyncio.Task[None]] = set()
        self.retired = False
        self.throttled_until = 0.0
        self.paced_until = 0.0
        self._tat = 0.0
        self._idle = 0.05
        self._backoff: Backoff = DEFAULT_BACKOFF
        self._backoff_read = -1e9
        self.worker = f"push:{sub.id}:{service.name}"
        self.pool = httpcore.AsyncConnectionPool(
            ssl_context=service._ssl,
            max_connections=MAX_CONCURRENCY,
            network_backend=service._network,
            retries=0,
        )

    def update(self, sub: Subscription) -> None:
        if sub.rate_per_second != self.sub.rate_per_second or sub.burst != self.sub.burst:
            self._tat = self.paced_until = 0.0
        self.sub = sub
        self.wake.set()

    def retire(self) -> None:
        self.retired = True
        self.wake.set()

    async def finish(self, grace: float) -> None:
        """Wait for the lane's loop and requests in flight (up to ``grace``), then close."""
        self.retire()
        pending = [t for t in (self.task, *self.inflight) if t is not None]
        if pending:
            _, late = await asyncio.wait(pending, timeout=grace)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=10)
        await self.pool.aclose()

    @property
    def _stopped(self) -> bool:
        return self.retired or self.service.stopping

    async def _sleep(self, timeout: float | None) -> None:
        if timeout is not None and timeout <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wake.wait(), timeout)

    async def run(self) -> None:
        while not self._stopped:
            try:
                await self._step()
            except Exception:  # a bug: keep the lane alive, say so loudly
                log.exception("push %s: the delivery lane failed; going on", self.sub.id)
                await self._sleep(self.service.poll_interval)

    async def _step(self) -> None:
        """One turn: claim what there is room for and start delivering it, or wait."""
        service = self.service
        self.wake.clear()
        sub = self.sub
        now = time.monotonic()
        if sub.state is not SubscriptionState.ACTIVE:
            await self._sleep(None)
            return
        if self.throttled_until > now:
            await self._sleep(self.throttled_until - now)
            return
        free = sub.concurrency - len(self.inflight)
        if free <= 0:
            await self._sleep(None)
            return
        if sub.rate_per_second is not None:
            if self.paced_until > now:
                await self._sleep(self.paced_until - now)
                return
            free = 1
        try:
            holds = await self._claim(sub, free)
        except BackendUnavailable as exc:
            log.warning("push %s: claim failed: %s", sub.id, exc)
            await self._sleep(service.poll_interval)
            return
        if not holds:
            await self._sleep(self._idle)
            self._idle = min(self._idle * 2, service.poll_interval)
            return
        self._idle = 0.05
        created = await self._created_at([h.job for h in holds])
        for hold in holds:
            task = asyncio.create_task(self._deliver(sub, hold, created.get(hold.job.id)))
            self.inflight.add(task)
            task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.inflight.discard(task)
        self.wake.set()
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "push %s: delivery failed unexpectedly", self.sub.id, exc_info=task.exception()
            )

    async def _claim(self, sub: Subscription, limit: int) -> list[LeaseHold]:
        service = self.service
        backend = service.backend
        lease = sub.timeout_seconds + service.settings.lease_margin
        holds = await service.db(service.runtime.claim, [sub.queue], limit, lease, self.worker)
        if not holds or sub.rate_per_second is None:
            return holds
        rate, burst = sub.rate_per_second, sub.burst or max(1.0, sub.rate_per_second)
        wait = await service.db(
            backend.api.ratelimit_take, f"push:{sub.id}", rate, burst, len(holds)
        )
        interval = 1.0 / rate
        now = time.monotonic()
        if wait > 0:
            # Another process spent the bucket: give the jobs back, uncharged, and wait.
            await service.db(service.runtime.give_back, holds)
            self.paced_until = now + wait
            return []
        self._tat = max(self._tat, now) + interval * len(holds)
        self.paced_until = self._tat + interval - burst * interval
        return holds

    async def _created_at(self, jobs: Sequence[ClaimedJob]) -> dict[int, datetime]:
        try:
            rows = await self.service.db(
                self.service.backend.history.find, JobFilter(ids=tuple(j.id for j in jobs))
            )
        except BackendUnavailable:
            return {}
        return {row.id: row.created_at for row in rows}

    async def _queue_backoff(self, queue: str) -> Backoff:
        if time.monotonic() - self._backoff_read > 30:
            self._backoff_read = time.monotonic()
            try:
                info = await self.service.db(self.service.backend.api.queue_get, queue)
                self._backoff = info.settings.backoff
            except NotFound:
                self._backoff = DEFAULT_BACKOFF
            except BackendUnavailable:
                pass
        return self._backoff

    # -- one delivery ------------------------------------------------------------------------

    async def _deliver(self, sub: Subscription, hold: LeaseHold, created: datetime | None) -> None:
        job = hold.job
        hold.started, hold.started_at = True, time.monotonic()
        msg_id = webhook_id(job.key)
        body = event_body(job.task, created or job.run_at, job.payload)
        started = time.monotonic()
        status: int | None = None
        headers: dict[str, str] = {}
        answer = b""
        failure: tuple[str, str] | None = None
        tracer = self.service.runtime.tracer
        traced = None
        if tracer is not None:
            traced = tracer.start(hold, self.worker, urlsplit(sub.url).hostname or "")
        try:
            status, headers, answer = await self._post(sub, job, msg_id, body, trace_headers(hold))
        except asyncio.CancelledError:
            if tracer is not None:
                tracer.returned(hold, traced, None)
                given_back = Finished(hold, released=True)
                given_back.outcome = "released"
                tracer.ended(given_back)
            await self._give_back(hold)
            self._report(sub, job, msg_id, None, "released", started, "Cancelled", None, None)
            raise
        except Exception as exc:  # every way a request can fail without an answer
            failure = _error_of(exc, sub.timeout_seconds)
        if tracer is not None:
            tracer.returned(hold, traced, None)
            if hold.span is not None and status is not None:
                hold.span.set_attribute("http.response.status_code", status)
        duration = time.monotonic() - started
        if status is not None:
            decision = decide(status, headers, answer, body_kept=self.service.settings.body_kept)
        else:
            assert failure is not None
            decision = Decision("retry", None, failure[0], failure[1])
        if decision.delay is not None and decision.action == "retry":
            # The endpoint said when to come back: no delivery of this lane before then.
            held_for = min(decision.delay, LONGEST_HOLD)
            self.throttled_until = max(self.throttled_until, time.monotonic() + held_for)
        await self._finish(sub, hold, msg_id, status, decision, duration)

    async def _post(
        self,
        sub: Subscription,
        job: ClaimedJob,
        msg_id: str,
        body: bytes,
        trace: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        parts = urlsplit(sub.url)
        moment = datetime.now(UTC)
        stamp = int(moment.timestamp())
        headers = [
            (b"Host", parts.netloc.encode("ascii")),
            (b"User-Agent", USER_AGENT.encode()),
            (b"Content-Type", b"application/json"),
            (b"Content-Length", str(len(body)).encode()),
            (b"webhook-id", msg_id.encode("ascii")),
            (b"webhook-timestamp", str(stamp).encode()),
            (
                b"webhook-signature",
                signature_header(sub.signing_secrets(moment), msg_id, stamp, body).encode(),
            ),
            (b"jobledger-attempt", str(job.attempt).encode()),
        ]
        if job.group is not None:
            # Encoded as the key is in webhook-id (a header carries printable ASCII only).
            headers.append((b"jobledger-group", webhook_id(job.group).encode("ascii")))
        if job.correlation_id:
            cid = job.correlation_id
            if cid.isascii() and cid.isprintable():
                headers.append((b"jobledger-correlation-id", cid.encode("ascii")))
        if trace:
            # W3C trace context: the attempt's span (or the enqueue's context, forwarded).
            headers.extend((k.encode("ascii"), v.encode("ascii")) for k, v in trace.items())
        timeout = sub.timeout_seconds
        limits = {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
        keep = self.service.settings.body_kept * 4 + 4
        token = plain_http.set(parts.scheme == "http")
        try:
            async with asyncio.timeout(timeout):
                async with self.pool.stream(
                    "POST", sub.url, headers=headers, content=body, extensions={"timeout": limits}
                ) as response:
                    chunks: list[bytes] = []
                    size = 0
                    async for chunk in response.aiter_stream():
                        chunks.append(chunk)
                        size += len(chunk)
                        if size >= keep:
                            break
                    answer_headers = {
                        k.decode("latin-1").lower(): v.decode("latin-1")
                        for k, v in response.headers
                    }
                    return response.status, answer_headers, b"".join(chunks)[:keep]
        finally:
            plain_http.reset(token)

    async def _finish(
        self,
        sub: Subscription,
        hold: LeaseHold,
        msg_id: str,
        status: int | None,
        decision: Decision,
        duration: float,
    ) -> None:
        """Hand the outcome to the runtime, wait until it is written, then note it on the
        subscription's health and report it."""
        job = hold.job
        now = datetime.now(UTC)
        fault_point("push.before_outcome")
        if decision.action == "disable":
            # Stop claiming first, then give the job back: released before the subscription
            # is disabled, it could be claimed and sent again at once.
            self.sub = dataclasses.replace(self.sub, state=SubscriptionState.DISABLED)
            await self._disable(sub, decision.message or "410 Gone")
            item = Finished(hold, released=True, duration=duration)
        elif decision.action == "done":
            item = Finished(hold, None, duration)
        else:
            retry = decision.action == "retry"
            backoff = DEFAULT_BACKOFF
            if retry and decision.delay is None:
                backoff = await self._queue_backoff(job.queue)
            error_class = decision.error_class or "PushFailed"
            verdict = Verdict(
                retry, decision.delay, error_class, _without_class(decision.message, error_class)
            )
            failed = failure(job, hold.lease, verdict, backoff, now, self.service.rng)
            item = Finished(hold, failed, duration)
        outcome = await self._record(item)
        retry_in = None
        if outcome == "retry" and item.failure is not None and item.failure.run_at is not None:
            retry_in = max(0.0, (item.failure.run_at - now).total_seconds())
        ok = decision.action == "done"
        with contextlib.suppress(BackendUnavailable):
            await self.service.db(
                self.service.backend.subscriptions.record,
                sub.id,
                ok,
                status,
                None if ok else decision.message,
            )
        self._report(
            sub,
            job,
            msg_id,
            status,
            outcome,
            None,
            decision.error_class,
            decision.message,
            retry_in,
            duration=duration,
        )

    async def _record(self, item: Finished) -> str:
        """Submit one outcome to the runtime's completer (batched with every lane's) and wait
        until it is written: ``done``, ``retry``, ``dead``, ``released`` or ``lease_lost``."""
        loop = asyncio.get_running_loop()
        written: asyncio.Future[str] = loop.create_future()

        def recorded(_: Finished, outcome: str) -> None:
            with contextlib.suppress(RuntimeError):  # the loop ended: nobody waits any more
                loop.call_soon_threadsafe(_settle, written, outcome)

        item.on_recorded = recorded
        self.service.runtime.finish(item)
        return await written

    async def _give_back(self, hold: LeaseHold) -> None:
        with contextlib.suppress(BackendUnavailable):
            await self.service.db(self.service.runtime.give_back, [hold])

    async def _disable(self, sub: Subscription, message: str) -> None:
        reason = visible_nul(f"{message}: the endpoint asked for no more deliveries")
        try:
            self.sub = await self.service.db(
                self.service.backend.subscriptions.set_state,
                sub.id,
                SubscriptionState.DISABLED,
                "push",
                reason,
            )
        except (BackendUnavailable, NotFound) as exc:
            log.warning("push %s: could not disable the subscription: %s", sub.id, exc)
            return
        log.error(
            "subscription %s (queue %s, %s) disabled: %s",
            sub.id,
            sub.queue,
            sub.url,
            reason,
            extra={"subscription": sub.id, "queue": sub.queue, "url": sub.url},
        )
        self.service.notify(
            "on_subscription_change",
            SubscriptionChange(
                sub.id, sub.queue, sub.url, SubscriptionState.DISABLED.value, reason
            ),
        )

    def _report(
        self,
        sub: Subscription,
        job: ClaimedJob,
        msg_id: str,
        status: int | None,
        outcome: str,
        started: float | None,
        error_class: str | None,
        error: str | None,
        retry_in: float | None,
        duration: float | None = None,
    ) -> None:
        if duration is None:
            duration = time.monotonic() - (started or time.monotonic())
        report = DeliveryReport(
            subscription_id=sub.id,
            queue=job.queue,
            job_id=job.id,
            key=job.key,
            webhook_id=msg_id,
            attempt=job.attempt,
            status=status,
            status_class=status_class(status, error_class),
            outcome=outcome,
            duration=duration,
            error_class=error_class,
            error=error,
            retry_in=retry_in,
            correlation_id=job.correlation_id,
        )
        extra = {
            "job_id": job.id,
            "key": job.key,
            "queue": job.queue,
            "subscription": sub.id,
            "webhook_id": msg_id,
            "status": status,
            "status_class": report.status_class,
            "outcome": outcome,
            "attempt": job.attempt,
            "duration": round(duration, 6),
            "error_class": error_class,
            "correlation_id": job.correlation_id,
        }
        if outcome == "done":
            log.info(
                "push %s job %d %s/%s attempt %d: %s in %.3f s",
                sub.id,
                job.id,
                job.queue,
                job.key,
                job.attempt,
                status,
                duration,
                extra=extra,
            )
        else:
            log.warning(
                "push %s job %d %s/%s attempt %d: %s (%s)%s",
                sub.id,
                job.id,
                job.queue,
                job.key,
                job.attempt,
                outcome,
                error or error_class,
                "" if retry_in is None else f"; next in {retry_in:.1f} s",
                extra=extra,
            )
        self.service.notify("on_push_delivery", report)


def _settle(future: asyncio.Future[str], outcome: str) -> None:
    if not future.done():
        future.set_result(outcome)
