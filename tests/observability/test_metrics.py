"""Prometheus metrics: what a worker counts, the ledger's gauges, /metrics on the server (its
access rule, both exposition formats, the naming conventions) and how rarely it reads the
database."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from jobledger import JobState, Ledger, Permanent, Retry
from jobledger.http import ServerSettings
from jobledger.http.observe import observe
from jobledger.observability.metrics import metrics_for, status_class
from jobledger.observability.snapshot import SnapshotCache

from ..support.http import api_server
from ..support.metrics import convention_problems, parse, parse_openmetrics, value
from ..support.outage import database_cut
from ..support.processes import wait_until


def _run_story(ledger) -> None:
    """Five jobs done at once, one done on its second attempt, one dead, one rescued."""

    @ledger.task(queue="mail", max_attempts=3, lease_seconds=30)
    def send(ctx, n: int) -> None:
        if n == 5 and ctx.attempt == 1:
            raise Retry(after=0)
        if n == 6:
            raise Permanent("no such customer")

    ledger.enqueue_many(send, [{"payload": {"n": n}, "key": f"k{n}"} for n in range(7)])
    # A worker that claimed k-ghost and vanished: its lease expires, a rescuer returns it.
    ledger.enqueue(send, {"n": 7}, key="ghost")
    ghost = ledger.backend.jobs.claim(["mail"], "ghost-worker", 1)
    assert [j.key for j in ghost] == ["k0"]
    later = datetime.now(UTC) + timedelta(minutes=5)  # every lease has expired by then
    ledger.run_worker(["mail"], burst=True, handle_signals=False, clock=lambda: later)


def test_a_worker_counts_outcomes_waits_runs_attempts_and_rescues(ledger):
    metrics = metrics_for(ledger)
    metrics.add_ledger(SnapshotCache(ledger, live_seconds=0, finished_seconds=0))
    _run_story(ledger)
    text = metrics.render()[0].decode()
    f = parse(text)
    labels = {"queue": "mail", "task": "send"}
    assert value(f, "jobledger_attempts_total", outcome="done", **labels) == 7
    assert value(f, "jobledger_attempts_total", outcome="retry", **labels) == 1
    assert value(f, "jobledger_attempts_total", outcome="dead", **labels) == 1
    # Nine claims by the worker (k0 again after its rescue, k5 twice), none by the ghost.
    assert value(f, "jobledger_job_wait_seconds_count", **labels) == 9
    assert value(f, "jobledger_job_run_seconds_count", **labels) == 9
    assert value(f, "jobledger_attempts_per_completed_job_count", **labels) == 7
    # k0 took 2 attempts (the ghost's and the worker's), k5 took 2, the other five 1 each.
    assert value(f, "jobledger_attempts_per_completed_job_sum", **labels) == 9
    assert value(f, "jobledger_attempts_per_completed_job_bucket", le="1.0", **labels) == 5
    assert value(f, "jobledger_lease_expiries_total", queue="mail", to_state="pending") == 1
    # The ledger's gauges.
    assert value(f, "jobledger_jobs", queue="mail", state="done") == 7
    assert value(f, "jobledger_jobs", queue="mail", state="dead") == 1
    assert value(f, "jobledger_jobs", queue="mail", state="pending") == 0
    assert value(f, "jobledger_dead_letters", queue="mail") == 1
    assert value(f, "jobledger_database_up") == 1
    assert convention_problems(f) == []


def test_a_worker_counts_its_completion_refused_for_a_stale_token(ledger):
    """SPEC §7: the stale-token writes of a worker, by queue and action (a handler that outlived
    its lease, whose job another worker claimed meanwhile)."""
    metrics = metrics_for(ledger)
    later = datetime.now(UTC) + timedelta(minutes=5)

    @ledger.task(queue="mail", lease_seconds=30)
    def send(ctx, n: int) -> None:
        # Meanwhile the lease ran out, a rescuer returned the job and another worker took it.
        assert [r.job_id for r in ledger.backend.jobs.rescue(now=later)] == [ctx.job_id]
        assert ledger.backend.jobs.claim(["mail"], "thief", 1, now=later)

    ledger.enqueue(send, {"n": 1}, key="k1")
    ledger.run_worker(["mail"], burst=True, handle_signals=False)
    f = parse(metrics.render()[0].decode())
    assert value(f, "jobledger_stale_token_writes_total", queue="mail", action="complete") == 1
    assert value(f, "jobledger_attempts_total", queue="mail", task="send", outcome="done") == 0
    assert ledger.job_by_key("k1", "mail").leased_by == "thief"


def test_the_gauges_count_due_jobs_their_oldest_wait_and_expired_leases(ledger):
    """SPEC §7: the age of the oldest due pending job of a queue, its due jobs apart from
    those waiting for a later run time, and its leases that ran out with no rescue yet."""

    @ledger.task(queue="mail", lease_seconds=30)
    def send(ctx, n: int) -> None:
        pass

    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
    ledger.enqueue(send, {"n": 0}, key="stuck", now=an_hour_ago)
    [stuck] = ledger.backend.jobs.claim(["mail"], "gone", 1, now=an_hour_ago)
    assert stuck.key == "stuck"  # its lease ran out 59.5 minutes ago
    ledger.enqueue(send, {"n": 1}, key="due", run_at=an_hour_ago + timedelta(minutes=10))
    ledger.enqueue(send, {"n": 2}, key="later", delay=3600)
    metrics = metrics_for(ledger)
    metrics.add_ledger(SnapshotCache(ledger, live_seconds=0, finished_seconds=0))
    f = parse(metrics.render()[0].decode())
    assert value(f, "jobledger_jobs", queue="mail", state="pending") == 2
    assert value(f, "jobledger_jobs_due", queue="mail") == 1
    assert value(f, "jobledger_expired_leases", queue="mail") == 1
    age = value(f, "jobledger_oldest_due_pending_age_seconds", queue="mail")
    assert 50 * 60 <= age < 60 * 60, age


def test_lease_expiries_are_counted_by_the_state_the_rescue_left_the_job_in(ledger):
    """A lease that ran out on a job's last attempt leaves it dead, one with attempts left
    returns it to pending: the counter tells the two apart (docs/observability.md)."""

    @ledger.task(queue="mail", max_attempts=1, lease_seconds=30)
    def last(ctx) -> None:
        pass

    @ledger.task(queue="mail", max_attempts=3, lease_seconds=30)
    def again(ctx) -> None:
        pass

    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
    ledger.enqueue(last, {}, key="last", now=an_hour_ago)
    ledger.enqueue(again, {}, key="again", now=an_hour_ago)
    assert len(ledger.backend.jobs.claim(["mail"], "gone", 2, now=an_hour_ago)) == 2
    metrics = metrics_for(ledger)
    metrics.rescued(ledger.rescue())
    f = parse(metrics.render()[0].decode())
    assert value(f, "jobledger_lease_expiries_total", queue="mail", to_state="dead") == 1
    assert value(f, "jobledger_lease_expiries_total", queue="mail", to_state="pending") == 1


def test_server_metrics_need_a_read_key_and_follow_the_conventions(ledger):
    with api_server(ledger, ServerSettings(snapshot_seconds=0, rescue_interval=0.2)) as api:
        api.queue("q")
        consumer = api.client(api.key("publish:q", "consume:q"))
        for n in range(3):
            consumer.post(
                "/v1/queue/publish",
                json={"queue": "q", "payload": {"n": n}},
                headers={"Idempotency-Key": f"m{n}"},
            ).raise_for_status()
        received = consumer.post("/v1/queue/receive", json={"queue": "q", "max_messages": 3})
        [a, b, c] = received.json()["messages"]
        assert consumer.post("/v1/queue/ack", json={"receipt": a["receipt"]}).status_code == 200
        again = consumer.post("/v1/queue/ack", json={"receipt": a["receipt"]})
        assert again.status_code == 409  # a repeat of its own ack: nothing lost, not counted
        consumer.post("/v1/queue/nack", json={"receipt": b["receipt"], "retry_after_seconds": 60})
        consumer.post("/v1/queue/nack", json={"receipt": c["receipt"], "permanent": True})
        # A receipt whose lease expired and was rescued: its ack is a stale-token write.
        consumer.post(
            "/v1/queue/publish",
            json={"queue": "q", "payload": {"n": 3}},
            headers={"Idempotency-Key": "m3"},
        ).raise_for_status()
        [d] = consumer.post("/v1/queue/receive", json={"queue": "q", "lease_seconds": 1}).json()[
            "messages"
        ]
        wait_until(
            lambda: ledger.job(int(d["message_id"])).state is JobState.PENDING,
            what="the expired lease to be rescued",
        )
        late = consumer.post("/v1/queue/ack", json={"receipt": d["receipt"]})
        assert late.status_code == 409  # counted as a stale-token write

        assert api.client(None).get("/metrics").status_code == 401
        assert consumer.get("/metrics").status_code == 403
        reader = api.client(api.key("read"))
        response = reader.get("/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
        f = parse(response.text)
        labels = {"queue": "q", "task": "q"}
        assert value(f, "jobledger_attempts_total", outcome="done", **labels) == 1
        assert value(f, "jobledger_attempts_total", outcome="retry", **labels) == 1
        assert value(f, "jobledger_attempts_total", outcome="dead", **labels) == 1
        assert value(f, "jobledger_job_wait_seconds_count", **labels) == 4
        assert value(f, "jobledger_stale_token_writes_total", queue="q", action="ack") == 1
        assert value(f, "jobledger_jobs", queue="q", state="pending") == 2
        assert value(f, "jobledger_jobs", queue="q", state="done") == 1
        assert value(f, "jobledger_dead_letters", queue="q") == 1
        assert value(f, "process_cpu_seconds_total") > 0
        assert convention_problems(f) == []

        strict = reader.get("/metrics", headers={"Accept": "application/openmetrics-text"})
        assert strict.headers["content-type"].startswith("application/openmetrics-text")
        families = parse_openmetrics(strict.text)
        assert "jobledger_attempts" in families and "jobledger_jobs" in families


def test_public_metrics_need_no_key(ledger):
    with api_server(ledger, ServerSettings(public_metrics=True)) as api:
        response = api.client(None).get("/metrics")
        assert response.status_code == 200
        assert "jobledger_database_up 1.0" in response.text


def test_scraping_often_reads_the_database_once_per_snapshot(ledger, monkeypatch):
    stats = ledger.backend.stats
    calls = {"depths": 0, "finished_counts": 0}
    for name in calls:
        original = getattr(stats, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(stats, name, counted)
    with api_server(ledger, ServerSettings(snapshot_seconds=3600)) as api:
        reader = api.client(api.key("read"))
        for _ in range(20):
            assert reader.get("/metrics").status_code == 200
            assert reader.get("/").status_code in (200, 303)
        assert calls == {"depths": 1, "finished_counts": 1}
        assert observe(api.server.state).snapshots.reads == 1


def test_finished_jobs_are_counted_as_often_as_it_is_cheap(ledger, monkeypatch):
    clock = [1000.0]
    cache = SnapshotCache(ledger, live_seconds=1, finished_seconds=300, monotonic=lambda: clock[0])
    original = ledger.backend.stats.finished_counts
    counts = []

    def slow_count():
        counts.append(clock[0])
        clock[0] += 2.0  # this count "took" 2 s: repeat it after 200 s at the earliest
        return original()

    monkeypatch.setattr(ledger.backend.stats, "finished_counts", slow_count)
    cache.get()
    for step in (10, 100, 150):
        clock[0] = 1002.0 + step
        cache.get()
    assert counts == [1000.0]
    clock[0] = 1002.0 + 201
    cache.get()
    assert counts == [1000.0, 1203.0]


def test_a_failing_database_reads_as_down_and_keeps_the_last_figures(ledger, monkeypatch):
    from jobledger.errors import BackendUnavailable

    metrics = metrics_for(ledger)
    cache = SnapshotCache(ledger, live_seconds=0)
    metrics.add_ledger(cache)
    ledger.enqueue(ledger.task(lambda ctx: None, name="t", queue="q"), {}, key="one")
    assert (
        value(parse(metrics.render()[0].decode()), "jobledger_jobs", queue="q", state="pending")
        == 1
    )

    def down(*args, **kwargs):
        raise BackendUnavailable("PostgreSQL at … is unavailable: connection refused")

    monkeypatch.setattr(ledger.backend.stats, "depths", down)
    f = parse(metrics.render()[0].decode())
    assert value(f, "jobledger_database_up") == 0
    assert value(f, "jobledger_jobs", queue="q", state="pending") == 1


@pytest.mark.parametrize(
    ("status", "error", "expected"),
    [
        (200, None, "2xx"),
        (410, None, "4xx"),
        (503, None, "5xx"),
        (None, "timeout", "timeout"),
        (None, None, "network"),
        (None, "refused", "refused"),
        (700, None, "other"),
    ],
)
def test_push_deliveries_are_counted_by_status_class(status, error, expected):
    assert status_class(status, error) == expected


def test_a_worker_serves_its_metrics_on_a_port(ledger):
    from jobledger.observability.metrics import install_metrics

    server = install_metrics(ledger, port=0)
    ledger.task(lambda ctx, n: None, name="t", queue="q")
    ledger.enqueue("t", {"n": 1}, key="a")
    seen = {}

    def scrape(ctx, n):  # runs inside the worker, while its metrics server is up
        def done_counted():
            seen["text"] = httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5).text
            return 'outcome="done",queue="q",task="t"' in seen["text"]

        wait_until(done_counted, timeout=10, what="the first job's outcome in the metrics")

    ledger.task(scrape, name="scrape", queue="q")
    ledger.enqueue("scrape", {"n": 2}, key="b")
    ledger.run_worker(["q"], burst=True, handle_signals=False)
    f = parse(seen["text"])
    assert value(f, "jobledger_attempts_total", queue="q", task="t", outcome="done") == 1
    assert value(f, "jobledger_jobs", queue="q", state="leased") >= 1  # the scrape itself
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=2)  # stopped with the worker


@pytest.fixture(params=["sqlite", "postgres"])
def cut(request: pytest.FixtureRequest, tmp_path):
    with database_cut(request.param, tmp_path) as database:
        yield database


@pytest.mark.slow
def test_a_scrape_while_the_database_is_down(cut):
    """With a key, a scrape cannot check the key while the database is down: 503 with
    Retry-After, never a 500, and never the metrics on trust. With --public-metrics it gets
    what the server knows, jobledger_database_up 0 among it."""
    ledgers = [Ledger(cut.url), Ledger(cut.url)]
    ledgers[0].migrate()
    settings = ServerSettings(snapshot_seconds=0, finished_seconds=0)
    with (
        api_server(ledgers[0], settings) as keyed,
        api_server(ledgers[1], replace(settings, public_metrics=True)) as public,
    ):
        reader = keyed.client(keyed.key("read"))
        anonymous = public.client(None)
        assert reader.get("/metrics").status_code == 200
        assert "jobledger_database_up 1.0" in anonymous.get("/metrics").text
        cut.cut()
        try:
            scrape = wait_until(
                lambda: (r := reader.get("/metrics")).status_code != 200 and r,
                what="a scrape to notice the outage",
            )
            assert scrape.status_code == 503, scrape.text
            assert scrape.headers["retry-after"] == "1"
            assert scrape.json()["type"] == "urn:jobledger:problem:unavailable"
            down = wait_until(
                lambda: "jobledger_database_up 0.0" in (r := anonymous.get("/metrics")).text and r,
                what="the public scrape to say the database is down",
            )
            assert down.status_code == 200
        finally:
            cut.restore()
        wait_until(lambda: reader.get("/metrics").status_code == 200, what="scrapes again")
        wait_until(
            lambda: "jobledger_database_up 1.0" in anonymous.get("/metrics").text,
            what="the public scrape to say the database is up",
        )
    for led in ledgers:
        led.close()


def _samples(families: dict, sample: str) -> dict[tuple, float]:
    """Every sample of one name: its labels (sorted pairs) and value."""
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in families.values()
        for s in family.samples
        if s.name == sample
    }


def test_the_gauges_give_each_cohorts_leader_and_each_schedules_ticks(ledger):
    """Cohort eu's leader lease ran out in August (its first term); cohort us's was taken again
    just now (its second term). Of eu's schedules one ticked and finished, one ticks and fails;
    us's schedule is paused and never ticked."""
    from jobledger.observability.metrics import Metrics

    sunday = datetime(2026, 8, 9, 12, 0, tzinfo=UTC)
    six_in_berlin = datetime(2026, 8, 10, 4, 0, tzinfo=UTC)

    def unreachable(tick):  # type: ignore[no-untyped-def]
        raise RuntimeError("customer database unreachable")

    @ledger.schedule("0 6 * * *", tz="Europe/Berlin", name="eu-digest", cohort="eu")
    @ledger.task(queue="eu")
    def eu_digest(ctx, tick: str) -> None: ...

    @ledger.schedule(
        "0 6 * * *",
        tz="Europe/Berlin",
        name="eu-report",
        cohort="eu",
        for_each=unreachable,
        key="{entity}:{date}",
        payload=lambda tick, n: {"n": n},
    )
    @ledger.task(queue="eu")
    def eu_report(ctx, n: int) -> None: ...

    @ledger.schedule("0 6 * * *", tz="America/New_York", name="us-digest", cohort="us")
    @ledger.task(queue="us")
    def us_digest(ctx, tick: str) -> None: ...

    def scheduler(name: str, cohort: str, lease_seconds: float = 30):  # type: ignore[no-untyped-def]
        return ledger.scheduler(
            name=name, cohorts=[cohort], lease_seconds=lease_seconds, poll_interval=1
        )

    fra = scheduler("fra", "eu", lease_seconds=2 * 24 * 3600)  # one term, through the tick
    fra.run_once(sunday)
    fra.run_once(six_in_berlin + timedelta(minutes=1))
    scheduler("iad", "us").run_once(sunday)
    ledger.schedules.pause("us-digest", actor="ops", now=sunday)
    scheduler("iad", "us").run_once()  # the database's clock: the August lease has run out
    metrics = Metrics(process=False)
    metrics.add_ledger(SnapshotCache(ledger, live_seconds=0))
    f = parse(metrics.render()[0].decode())
    assert _samples(f, "jobledger_scheduler_leader") == {
        (("cohort", "eu"),): 0,
        (("cohort", "us"),): 1,
    }
    assert _samples(f, "jobledger_scheduler_leader_term") == {
        (("cohort", "eu"),): 1,
        (("cohort", "us"),): 2,
    }
    assert _samples(f, "jobledger_scheduler_leader_holder_info") == {
        (("cohort", "us"), ("holder", "iad")): 1
    }
    tick = six_in_berlin.timestamp()
    assert _samples(f, "jobledger_schedule_last_tick_timestamp_seconds") == {
        (("schedule", "eu-digest"),): tick,
        (("schedule", "eu-report"),): tick,
    }
    assert _samples(f, "jobledger_schedule_last_tick_finished") == {
        (("schedule", "eu-digest"),): 1,
        (("schedule", "eu-report"),): 0,  # still running: its cursor waits for it
    }
    assert _samples(f, "jobledger_schedule_next_tick_timestamp_seconds") == {
        (("schedule", "eu-digest"),): tick + 24 * 3600,
        (("schedule", "eu-report"),): tick,
        (("schedule", "us-digest"),): datetime(2026, 8, 10, 10, 0, tzinfo=UTC).timestamp(),
    }
    assert _samples(f, "jobledger_schedule_paused") == {
        (("schedule", "eu-digest"),): 0,
        (("schedule", "eu-report"),): 0,
        (("schedule", "us-digest"),): 1,
    }


def test_the_snapshot_age_is_the_time_since_the_gauges_were_read(ledger):
    """Seconds since the snapshot's read; never below 0 (a clock stepped back), and no sample
    before the first read succeeded."""
    from jobledger.observability.metrics import Metrics

    class Fixed:
        def __init__(self, snapshot) -> None:  # type: ignore[no-untyped-def]
            self.snapshot = snapshot

        def get(self):  # type: ignore[no-untyped-def]
            return self.snapshot

    read = SnapshotCache(ledger, live_seconds=0).get()
    assert read.taken_at is not None

    def age(taken_at):  # type: ignore[no-untyped-def]
        metrics = Metrics(process=False)
        metrics.add_ledger(Fixed(replace(read, taken_at=taken_at)))  # type: ignore[arg-type]
        return _samples(parse(metrics.render()[0].decode()), "jobledger_snapshot_age_seconds")

    [fresh] = age(read.taken_at).values()
    assert 0 <= fresh < 5
    [old] = age(datetime.now(UTC) - timedelta(seconds=42)).values()
    assert 42 <= old < 47
    assert age(datetime.now(UTC) + timedelta(seconds=30)) == {(): 0.0}
    assert age(None) == {}
