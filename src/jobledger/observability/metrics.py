"""Prometheus metrics: what this process did (counters, histograms) and what the ledger holds
(gauges read through a ``SnapshotCache``).

Names follow the Prometheus conventions: the ``jobledger_`` prefix, base units (seconds),
counters ending in ``_total``, unix times in ``_timestamp_seconds``. Labels are bounded: queue,
task, state, outcome, action, status class, schedule, cohort — never a job id or key.

- A worker with ``--metrics-port`` serves its own registry (``MetricsServer``).
- ``jobledger serve`` serves it at ``/metrics``.
- In one process, the worker and the server share one ``Metrics`` per ledger (``metrics_for``).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, exposition
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from .._runtime.hooks import WorkerObserver
from ..errors import ConfigError
from .rollup import claim_wait
from .snapshot import STATES, SnapshotCache

if TYPE_CHECKING:
    from .._records import ClaimedJob, RescueResult
    from .._runtime.runtime import Runtime
    from .host import ObservedLedger

__all__ = [
    "LedgerCollector",
    "Metrics",
    "MetricsServer",
    "install_metrics",
    "metrics_for",
    "status_class",
]

log = logging.getLogger("jobledger.observability")

WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
RUN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)
ATTEMPT_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50, 100)


def status_class(status: int | None, error: str | None = None) -> str:
    """A push delivery's result as a bounded label: ``2xx`` … ``5xx``, or ``timeout``,
    ``network`` (refused, reset, DNS) or ``refused`` (the URL was not allowed) when there was no
    HTTP status."""
    if status is None:
        return error if error in ("timeout", "network", "refused") else "network"
    if 100 <= status <= 599:
        return f"{status // 100}xx"
    return "other"


class Metrics:
    """The metrics of one process. Counters and histograms are updated by this process's workers
    (through ``observer``) and consumers; ``add_ledger`` adds the ledger's gauges.

    Each instance has its own registry, so tests and embedded uses never collide with
    ``prometheus_client``'s global one.
    """

    def __init__(self, registry: CollectorRegistry | None = None, process: bool = True):
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        if process:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
            GCCollector(registry=r)
        self.attempts = Counter(
            "jobledger_attempts",
            "Attempts finished by this process's workers and consumers, by outcome: done, retry "
            "(back to pending), dead.",
            ["queue", "task", "outcome"],
            registry=r,
        )
        self.wait = Histogram(
            "jobledger_job_wait_seconds",
            "Seconds from when a job was due (enqueued for now, or its retry time) to the claim "
            "that started an attempt, by the database's clock.",
            ["queue", "task"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.run = Histogram(
            "jobledger_job_run_seconds",
            "Seconds a handler ran, per attempt that reached an outcome.",
            ["queue", "task"],
            buckets=RUN_BUCKETS,
            registry=r,
        )
        self.attempts_per_job = Histogram(
            "jobledger_attempts_per_completed_job",
            "Attempts a job took until it was done (lease expiries included).",
            ["queue", "task"],
            buckets=ATTEMPT_BUCKETS,
            registry=r,
        )
        self.lease_expiries = Counter(
            "jobledger_lease_expiries",
            "Expired leases this process's rescuer closed (the holder died or stalled).",
            ["queue", "to_state"],
            registry=r,
        )
        self.stale_writes = Counter(
            "jobledger_stale_token_writes",
            "Writes refused because their lease token was stale (heartbeat, complete, fail, "
            "release, ack, nack, extend): a worker or consumer that lost its lease.",
            ["queue", "action"],
            registry=r,
        )
        self.push_deliveries = Counter(
            "jobledger_push_deliveries",
            "Push deliveries this process attempted, by status class (2xx, 4xx, 5xx, timeout, "
            "network, refused).",
            ["queue", "status_class"],
            registry=r,
        )
        self._ledger_collectors: list[LedgerCollector] = []

    # -- what workers, consumers and push deliveries report ----------------------------------

    def claimed(self, jobs: Sequence[ClaimedJob]) -> None:
        for job in jobs:
            self.wait.labels(job.queue, job.task).observe(claim_wait(job))

    def finished(
        self, queue: str, task: str, outcome: str, duration: float | None, attempt: int
    ) -> None:
        self.attempts.labels(queue, task, outcome).inc()
        if duration is not None:
            self.run.labels(queue, task).observe(max(0.0, duration))
        if outcome == "done":
            self.attempts_per_job.labels(queue, task).observe(attempt)

    def stale_write(self, queue: str, action: str) -> None:
        self.stale_writes.labels(queue, action).inc()

    def rescued(self, rescued: Sequence[RescueResult]) -> None:
        for r in rescued:
            self.lease_expiries.labels(r.queue, r.state.value).inc()

    def push_delivery(self, queue: str, status: int | None, error: str | None = None) -> None:
        """Count one push delivery attempt: its HTTP status, or the kind of failure."""
        self.push_deliveries.labels(queue, status_class(status, error)).inc()

    # -- wiring ----------------------------------------------------------------------------------

    def observer(self) -> WorkerObserver:
        """A worker observer feeding these metrics."""
        return _MetricsObserver(self)

    def add_ledger(self, cache: SnapshotCache) -> LedgerCollector:
        """Export the ledger's gauges from ``cache`` (once per cache)."""
        for existing in self._ledger_collectors:
            if existing.cache is cache:
                return existing
        collector = LedgerCollector(cache)
        self.registry.register(collector)
        self._ledger_collectors.append(collector)
        return collector

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The registry in the format the ``Accept`` header prefers (Prometheus text 0.0.4, or
        OpenMetrics when asked for), and its content type."""
        encoder, content_type = exposition.choose_encoder(accept or "")
        return encoder(self.registry), content_type


class _MetricsObserver(WorkerObserver):
    def __init__(self, metrics: Metrics):
        self.metrics = metrics

    def on_claim(self, worker: Runtime, jobs: Sequence[ClaimedJob]) -> None:
        self.metrics.claimed(jobs)

    def on_outcomes(
        self, worker: Runtime, outcomes: Sequence[tuple[ClaimedJob, str, float, str | None]]
    ) -> None:
        for job, outcome, duration, _ in outcomes:
            self.metrics.finished(job.queue, job.task, outcome, duration, job.attempt)

    def on_lease_lost(self, worker: Runtime, job: ClaimedJob, action: str) -> None:
        self.metrics.stale_write(job.queue, action)

    def on_rescue(self, worker: Runtime, rescued: Sequence[RescueResult]) -> None:
        self.metrics.rescued(rescued)

    def on_push_delivery(self, report: Any) -> None:
        """A push delivery attempt (``jobledger.push.DeliveryReport``): count its status class."""
        self.metrics.push_deliveries.labels(report.queue, report.status_class).inc()


class LedgerCollector:
    """The ledger's gauges, from a ``SnapshotCache``: scraping reads the cache, and the cache
    reads the database at most once per its lifetime."""

    def __init__(self, cache: SnapshotCache):
        self.cache = cache

    def describe(self) -> Iterator[Metric]:
        return iter(())  # the families depend on the data; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        snap = self.cache.get()
        jobs = GaugeMetricFamily(
            "jobledger_jobs",
            "Jobs in the ledger by queue and state (done and cancelled may lag; see docs).",
            labels=["queue", "state"],
        )
        due = GaugeMetricFamily(
            "jobledger_jobs_due", "Pending jobs whose run time has passed.", labels=["queue"]
        )
        oldest = GaugeMetricFamily(
            "jobledger_oldest_due_pending_age_seconds",
            "Seconds the oldest due pending job of the queue has waited (0 when none is due).",
            labels=["queue"],
        )
        dead = GaugeMetricFamily(
            "jobledger_dead_letters", "Dead jobs waiting for an operator.", labels=["queue"]
        )
        expired = GaugeMetricFamily(
            "jobledger_expired_leases",
            "Leased jobs whose lease has run out and that no rescuer has returned yet.",
            labels=["queue"],
        )
        for q in snap.queues:
            for state in STATES:
                jobs.add_metric([q.name, state], q.counts.get(state, 0))
            due.add_metric([q.name], q.due)
            oldest.add_metric([q.name], q.oldest_due_pending_seconds or 0.0)
            dead.add_metric([q.name], q.dead)
            expired.add_metric([q.name], q.expired_leases)
        yield from (jobs, due, oldest, dead, expired)

        leader = GaugeMetricFamily(
            "jobledger_scheduler_leader",
            "1 while a scheduler holds the cohort's leader lease, 0 when it has expired.",
            labels=["cohort"],
        )
        term = GaugeMetricFamily(
            "jobledger_scheduler_leader_term",
            "How many holders the cohort's leader lease has had; a rise is a change of leader.",
            labels=["cohort"],
        )
        holder = InfoMetricFamily(
            "jobledger_scheduler_leader_holder",
            "The scheduler that holds the cohort's leader lease.",
            labels=["cohort"],
        )
        for lease in snap.leaders:
            cohort = lease.name.removeprefix("scheduler:")
            leader.add_metric([cohort], 1 if lease.valid else 0)
            term.add_metric([cohort], lease.term)
            if lease.valid:
                holder.add_metric([cohort], {"holder": lease.holder})
        yield from (leader, term, holder)

        last_tick = GaugeMetricFamily(
            "jobledger_schedule_last_tick_timestamp_seconds",
            "Unix time of the schedule's most recent tick.",
            labels=["schedule"],
        )
        last_done = GaugeMetricFamily(
            "jobledger_schedule_last_tick_finished",
            "1 when the schedule's most recent tick finished, 0 while it runs or failed.",
            labels=["schedule"],
        )
        next_tick = GaugeMetricFamily(
            "jobledger_schedule_next_tick_timestamp_seconds",
            "Unix time of the schedule's next tick (in the past: the scheduler is behind).",
            labels=["schedule"],
        )
        paused = GaugeMetricFamily(
            "jobledger_schedule_paused", "1 while the schedule is paused.", labels=["schedule"]
        )
        for status in snap.schedules:
            name = status.row.name
            if status.last_tick is not None:
                last_tick.add_metric([name], status.last_tick.tick_time.timestamp())
                last_done.add_metric([name], 1 if status.last_tick.state.value == "done" else 0)
            if status.next_tick is not None:
                next_tick.add_metric([name], status.next_tick.timestamp())
            paused.add_metric([name], 1 if status.row.paused else 0)
        yield from (last_tick, last_done, next_tick, paused)

        up = GaugeMetricFamily(
            "jobledger_database_up", "1 when the last read of the ledger's state succeeded."
        )
        up.add_metric([], 0 if snap.error else 1)
        yield up
        age = GaugeMetricFamily(
            "jobledger_snapshot_age_seconds",
            "Seconds since the ledger's gauges were read (they are cached).",
        )
        if snap.taken_at is not None:
            age.add_metric([], max(0.0, time.time() - snap.taken_at.timestamp()))
        yield age


_BY_LEDGER: weakref.WeakKeyDictionary[ObservedLedger, Metrics] = weakref.WeakKeyDictionary()
_BY_LEDGER_LOCK = threading.Lock()


def metrics_for(ledger: ObservedLedger) -> Metrics:
    """The ``Metrics`` of ``ledger`` in this process, created (and its worker observer
    installed) on first use."""
    with _BY_LEDGER_LOCK:
        metrics = _BY_LEDGER.get(ledger)
        if metrics is None:
            metrics = _BY_LEDGER[ledger] = Metrics()
            ledger.observers.append(metrics.observer())
        return metrics


class MetricsServer:
    """Serves a registry at ``http://HOST:PORT/metrics`` on a thread (a worker's service)."""

    def __init__(self, metrics: Metrics, host: str = "127.0.0.1", port: int = 0):
        self.metrics = metrics
        self.host = host
        self.port = port
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Listen and serve. A port in use, or an address this host does not have, raises
        ``ConfigError`` (the CLI's one line and exit 2, as ``serve --port``)."""
        try:
            self._server, self._thread = exposition.start_http_server(
                self.port, self.host, self.metrics.registry
            )
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise ConfigError(
                f"cannot serve metrics on {self.host}:{self.port}: {reason}"
            ) from None
        self.port = self._server.server_port
        log.info(
            "metrics on http://%s:%d/metrics",
            self.host,
            self.port,
            extra={"metrics_port": self.port},
        )

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def install_metrics(
    ledger: ObservedLedger,
    port: int,
    host: str = "127.0.0.1",
    live_seconds: float = 5.0,
    ledger_gauges: bool = True,
) -> MetricsServer:
    """Have ``ledger``'s workers serve their metrics (and, by default, the ledger's gauges) on
    ``host:port`` while they run. Returns the server (started with the first worker)."""
    metrics = metrics_for(ledger)
    if ledger_gauges:
        metrics.add_ledger(SnapshotCache(ledger, live_seconds=live_seconds))
    server = MetricsServer(metrics, host, port)
    started = threading.Lock()
    running = [0]

    class _Service:
        def start(self) -> None:
            with started:
                running[0] += 1
                if running[0] == 1:
                    server.start()

        def stop(self) -> None:
            with started:
                running[0] -= 1
                if running[0] == 0:
                    server.stop()

    ledger.worker_services.append(lambda worker: _Service())
    return server
