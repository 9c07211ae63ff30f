"""Groups with real worker processes, on each backend: the per-group leased limit and rate hold
across processes; the issue's "done when" — one tenant floods the queue, one tenant's
downstream answers 429, and every other tenant's jobs start within one claim cycle."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime

import pytest

from jobledger import JobFilter, JobState, Ledger

from ..support.processes import terminate, wait_exit, wait_until, worker_process
from ..support.waiting import LoadMeter, load_factor

pytestmark = pytest.mark.slow

APP = "tests.apps.tenant_app:ledger"
QUEUE = "tenants"


@pytest.fixture
def tenants(db_url: str) -> Iterator[Ledger]:
    ledger = Ledger(db_url)
    ledger.migrate()
    ledger.task(lambda ctx, tenant, n: None, name="call", queue=QUEUE, group="{tenant}")
    yield ledger
    ledger.close()


def enqueue(ledger: Ledger, tenant: str, count: int, start: int = 0) -> None:
    ledger.enqueue_many(
        "call",
        [
            {"payload": {"tenant": tenant, "n": n}, "key": f"{tenant}:{n}"}
            for n in range(start, start + count)
        ],
    )


def workers(db_url: str, count: int, *args: str, env: dict[str, str]):
    return [
        worker_process(
            APP,
            db_url,
            "--queues",
            QUEUE,
            "--prefetch",
            "0",
            "--log-level",
            "error",
            *args,
            env=env,
        )
        for _ in range(count)
    ]


def stop(procs) -> None:
    for proc in procs:
        terminate(proc)
    for proc in procs:
        code, _, err = wait_exit(proc, 60)
        assert code == 0, err


def done(ledger: Ledger, tenant: str | None = None) -> int:
    return len(ledger.jobs(JobFilter(states=(JobState.DONE,), group=tenant)))


def events(path) -> dict[str, list[tuple[float, int]]]:
    """Per tenant, +1 at each handler start and -1 at each end, by time."""
    by_tenant: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for line in path.read_text().splitlines():
        kind, tenant, _, at, _ = line.split()
        by_tenant[tenant].append((float(at), 1 if kind == "start" else -1))
    return by_tenant


def most_at_once(changes: list[tuple[float, int]]) -> int:
    running = peak = 0
    for _, change in sorted(changes, key=lambda c: (c[0], c[1])):  # an end before a start
        running += change
        peak = max(peak, running)
    return peak


def claims(
    ledger: Ledger, group: str | None = None
) -> list[tuple[str, float, str | None, int, str | None, float | None]]:
    """Every attempt (of ``group``'s jobs): (worker, claimed at, group, job id, outcome, finished
    at), by claim time."""
    rows = []
    for job in ledger.jobs(JobFilter(group=group)):
        for a in ledger.backend.history.attempts(job.id):
            finished = a.finished_at.timestamp() if a.finished_at else None
            rows.append(
                (a.worker, a.started_at.timestamp(), job.group, job.id, a.outcome, finished)
            )
    return sorted(rows, key=lambda r: r[1])


def database_clock(ledger: Ledger) -> float:
    """Now, by the clock the claims write (the database's for PostgreSQL)."""
    if ledger.url.dialect == "sqlite":
        return time.time()
    with ledger.backend.transaction() as conn:
        value: datetime = conn.execute("SELECT clock_timestamp()").fetchone()[0]
    return value.timestamp()


def test_the_leased_limit_and_the_rate_hold_across_worker_processes(tenants, db_url, tmp_path):
    tenants.set_group_limits(QUEUE, max_leased=2)
    for tenant in ("a", "b", "c", "d"):
        enqueue(tenants, tenant, 25)
    log = tmp_path / "events"
    env = {"TENANT_EVENTS": str(log), "TENANT_HANDLER_SECONDS": "0.02"}
    procs = workers(db_url, 3, "--concurrency", "4", env=env)
    try:
        wait_until(
            lambda: done(tenants) == 100,
            60,
            interval=0.1,
            what="every job done",
            progress=lambda: done(tenants),
        )
    finally:
        stop(procs)
    peaks = {tenant: most_at_once(changes) for tenant, changes in events(log).items()}
    assert max(peaks.values()) <= 2, peaks
    assert max(peaks.values()) == 2, f"the limit was never reached: {peaks}"

    # A rate: 5 jobs per second per group, in bursts of 2. Every claim of the group's jobs
    # is within the bucket, by the clock the claims themselves were counted by.
    tenants.set_group_limits(QUEUE, rate=5, burst=2)
    enqueue(tenants, "paced", 12)
    enqueue(tenants, "other", 12)
    procs = workers(db_url, 3, "--concurrency", "4", env={})
    try:
        wait_until(
            lambda: done(tenants, "paced") == 12,
            30,
            interval=0.1,
            what="the paced jobs",
            progress=lambda: done(tenants, "paced"),
        )
    finally:
        stop(procs)
    starts = [c[1] for c in claims(tenants) if c[2] == "paced"]
    assert len(starts) == 12
    for i in range(len(starts)):
        for j in range(i + 1, len(starts)):
            allowed = 2 + 5 * (starts[j] - starts[i])
            assert j - i + 1 <= allowed + 1e-6, (i, j, starts[j] - starts[i])
    assert starts[-1] - starts[0] >= (12 - 2) / 5 - 1e-3


def test_one_tenant_floods_one_is_throttled_and_every_other_tenant_starts_within_one_claim_cycle(
    tenants, db_url, tmp_path
):
    """The issue's "done when", on both backends."""
    flood, throttled = "flood", "throttled"
    enqueue(tenants, flood, 5000)
    enqueue(tenants, throttled, 12)
    # A pause of a second of an idle machine's time: on a busy one, longer (see below).
    pause = round(min(load_factor(), 5.0), 1)
    env = {
        "TENANT_THROTTLED": throttled,
        "TENANT_PAUSE": str(pause),
        "TENANT_HANDLER_SECONDS": "0.005",
        "TENANT_EVENTS": str(tmp_path / "events"),
    }
    procs = workers(db_url, 2, "--concurrency", "4", env=env)
    rounds: list[tuple[float, list[str]]] = []
    with LoadMeter() as load:
        try:
            wait_until(
                lambda: done(tenants, flood) >= 200,
                60,
                what="the flood under way",
                progress=lambda: done(tenants, flood),
            )
            for r in range(3):
                cold = [f"t{r}-{i}" for i in range(6)]
                for tenant in cold:
                    enqueue(tenants, tenant, 2)
                rounds.append((database_clock(tenants), cold))
                wait_until(
                    lambda cold=cold: all(done(tenants, t) == 2 for t in cold),
                    60,
                    what=f"round {r}'s tenants done",
                    progress=lambda cold=cold: sum(done(tenants, t) for t in cold),
                )
            assert done(tenants, flood) < 5000, "the flood must still be flooding"

            def resumed() -> bool:
                mine = claims(tenants, throttled)
                ends = [c[1] + pause for c in mine if c[4] == "retry"]
                return bool(ends) and any(c[1] >= ends[0] for c in mine)

            wait_until(resumed, 30, interval=0.1, what="the throttled tenant called after a pause")
        finally:
            stop(procs)

    history = claims(tenants)
    for enqueued_at, cold in rounds:
        for tenant in cold:
            first = min(c[1] for c in history if c[2] == tenant)
            # Between the tenant's jobs becoming visible and its first claim, no worker
            # claimed the flood more than once: the tenant waited one claim cycle at most.
            flood_claims: dict[str, set[float]] = defaultdict(set)
            for worker, claimed_at, group, *_ in history:
                if group == flood and enqueued_at < claimed_at < first:
                    flood_claims[worker].add(claimed_at)
            assert all(len(c) <= 1 for c in flood_claims.values()), (tenant, flood_claims)

    # The throttled tenant: each 429 pauses its group for a second (``pause``), for every
    # worker. The pause ends a second after the handler failed, so after the claim: from the
    # failure's write (and the moment it takes to commit: 0.1 s of an idle machine's time, the
    # failure's timestamp being taken before its transaction gets the write lock) to a second
    # after that attempt's claim, no worker claims any of the group's jobs.
    commit = 0.1 * load.factor()
    throttled_claims = [c for c in history if c[2] == throttled]
    windows = [
        (c[5] + commit, c[1] + pause)
        for c in throttled_claims
        if c[4] == "retry" and c[5] is not None and c[5] + commit < c[1] + pause
    ]
    assert windows, "the throttled tenant was never called"
    assert any(c[1] >= windows[0][1] for c in throttled_claims), "never resumed after a pause"
    for opened, closed in windows:
        during = [c for c in throttled_claims if opened < c[1] < closed]
        assert not during, f"claimed while its group was paused ({opened}, {closed}): {during}"
