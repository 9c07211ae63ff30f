"""The scheduler on both backends, with an explicit clock: ticks, fan-out, the leader lease and
its fencing, half-finished ticks, catch-up, daylight saving, pause and resume."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from jobledger import (
    ConfigError,
    JobFilter,
    LeadershipLost,
    Ledger,
)
from jobledger._records import TickState
from jobledger.scheduling.cron import CronSpec
from jobledger.scheduling.schedule import leader_name
from jobledger.testing import FaultInjected
from jobledger.testing import configure_faults as configure

# Sunday 2026-08-09 12:00 UTC; the next Monday 06:00 in Berlin is 2026-08-10 04:00 UTC (W33).
T0 = datetime(2026, 8, 9, 12, 0, tzinfo=UTC)
MONDAY = datetime(2026, 8, 10, 4, 0, tzinfo=UTC)
LEASE = 30.0


def hours(n: float) -> timedelta:
    return timedelta(hours=n)


@pytest.fixture(autouse=True)
def no_faults():
    yield
    configure(None)


def weekly_fan_out(ledger: Ledger, customers, *, batch_size: int = 100, **options):
    """The weekly digest: one job per customer, keyed ``<customer>:<week>``."""
    options.setdefault("catch_up", "all")

    @ledger.schedule(
        "0 6 * * MON",
        tz="Europe/Berlin",
        name="weekly-digest",
        for_each=customers if callable(customers) else (lambda tick: range(customers)),
        key="{entity}:{week}",
        payload=lambda tick, customer: {"customer_id": customer, "week": tick.week},
        batch_size=batch_size,
        **options,
    )
    @ledger.task(queue="digests")
    def send_digest(ctx, customer_id: int, week: str) -> None: ...

    return ledger.schedules.get("weekly-digest")


def scheduler(ledger: Ledger, name: str):
    return ledger.scheduler(name=name, lease_seconds=LEASE, poll_interval=1)


def keys(ledger: Ledger) -> list[str]:
    return sorted(j.key for j in ledger.jobs(JobFilter(queue="digests")))


def test_one_tick_one_job_with_a_weekly_key(ledger):
    @ledger.schedule("0 6 * * MON", tz="Europe/Berlin", name="weekly-digest")
    @ledger.task(queue="digests")
    def digest(ctx, tick: str) -> None: ...

    a = scheduler(ledger, "a")
    first = a.run_once(T0)
    assert first.leading == ["default"] and first.ticks == []
    [row] = ledger.backend.schedules.all()
    assert row.cursor == T0 and row.declared_at == T0, "a new schedule starts at declaration"
    assert a.run_once(MONDAY - timedelta(seconds=1)).ticks == []
    [tick] = a.run_once(MONDAY + timedelta(seconds=1)).ticks
    assert (tick.tick_time, tick.state, tick.jobs_created, tick.leader) == (
        MONDAY,
        TickState.DONE,
        1,
        "a",
    )
    [job] = ledger.jobs()
    assert job.key == "weekly-digest:2026-W33" and job.payload == {"tick": "2026-08-10T04:00Z"}
    assert job.correlation_id == "weekly-digest:2026-08-10T04:00Z"
    assert a.run_once(MONDAY + hours(1)).ticks == [], "a tick happens once"


def test_one_leader_at_a_time_and_takeover_only_after_expiry(ledger):
    weekly_fan_out(ledger, 3)
    a, b = scheduler(ledger, "a"), scheduler(ledger, "b")
    assert a.run_once(T0).leading == ["default"]
    assert b.run_once(T0).leading == []
    [lease] = ledger.schedules.leaders(T0)
    assert (lease.name, lease.holder, lease.term) == (leader_name("default"), "a", 1)
    until = lease.until
    assert until == T0 + timedelta(seconds=LEASE)
    # a renews once a third of the lease has passed; b never gets in while it does.
    for step in range(1, 20):
        now = T0 + timedelta(seconds=step * 11)
        assert a.run_once(now).leading == ["default"]
        assert b.run_once(now).leading == []
    last = ledger.schedules.leaders()[0]
    assert last.holder == "a" and last.term == 1
    # a stops renewing (dies). One second before its lease ends b cannot take it; at the end it can.
    assert b.run_once(last.until - timedelta(seconds=1)).leading == []
    assert b.run_once(last.until).leading == ["default"]
    taken = ledger.schedules.leaders()[0]
    assert (taken.holder, taken.term, taken.acquired_at) == ("b", 2, last.until)
    # a comes back: its renewal is refused and it stands by.
    assert a.run_once(last.until + timedelta(seconds=1)).leading == []
    assert a.leading == []


def test_the_scheduling_authorities_are_the_schedulers_leases_only(ledger):
    """The relay and the pruner lead through the same election; they are not cohorts."""
    weekly_fan_out(ledger, 1)
    scheduler(ledger, "a").run_once(T0)
    ledger.backend.leader.acquire("relay:default", "relay-host", 30, T0)
    ledger.backend.leader.acquire("maintenance:pruner", "worker-host", 30, T0)
    assert [x.name for x in ledger.schedules.leaders(T0)] == [leader_name("default")]


def test_a_released_lease_is_taken_at_once(ledger):
    weekly_fan_out(ledger, 1)
    a, b = scheduler(ledger, "a"), scheduler(ledger, "b")
    a.run_once(T0)
    a.release(T0)  # graceful stop: the next scheduler need not wait for the lease to expire
    assert b.run_once(T0 + timedelta(seconds=1)).leading == ["default"]


def test_a_deposed_leader_writes_nothing_and_its_tick_is_finished_once(ledger):
    """A stalls half-way through a tick; its lease expires; B takes over and finishes the tick;
    A's next batch is refused by the fence. One job per customer, counted once."""
    a, b = scheduler(ledger, "a"), scheduler(ledger, "b")
    passes, stalled = [], []

    def customers(tick):
        for n in range(35):
            if n == 10 and not stalled:
                # A has committed its first batch; it now stalls past its lease and B runs.
                stalled.append(True)
                passes.append(b.run_once(MONDAY + timedelta(seconds=LEASE + 1)))
            yield n

    weekly_fan_out(ledger, customers, batch_size=10)
    a.run_once(T0 + hours(1))
    a.run_once(MONDAY - timedelta(seconds=LEASE / 2))  # a's lease ends 15 s after the tick
    result = a.run_once(MONDAY)
    assert result.leading == [] and result.ticks == [], "a lost the lead mid-tick"
    [b_pass] = passes
    [tick] = b_pass.ticks
    assert (tick.state, tick.leader, tick.runs) == (TickState.DONE, "b", 2)
    assert (tick.jobs_created, tick.jobs_existing) == (35, 10)
    assert keys(ledger) == sorted(f"{n}:2026-W33" for n in range(35))


def test_a_leader_whose_clock_says_its_lease_is_fresh_is_fenced_all_the_same(ledger):
    """A renewed its lease a second before the tick by its own clock, so it does not renew
    again during the tick; B's clock is past the end of that lease, and B takes over while A
    stalls. A's next batch is refused in its transaction by the fence (the database, not A's
    clock, says who leads): the customer that only A's pass sees gets no job from it."""
    a, b = scheduler(ledger, "a"), scheduler(ledger, "b")
    passes, stalled = [], []

    def customers(tick):
        deposed = not stalled  # the first pass here is a's, which stalls; then b's runs
        for n in range(36 if deposed else 35):  # a customer joins between the two reads
            if n == 10 and deposed:
                stalled.append(True)
                passes.append(b.run_once(MONDAY + timedelta(seconds=LEASE + 1)))
            yield n

    weekly_fan_out(ledger, customers, batch_size=10)
    a.run_once(T0 + hours(1))
    a.run_once(MONDAY - timedelta(seconds=1))  # renewed: fresh for a third of the lease
    result = a.run_once(MONDAY)
    assert result.leading == [] and result.ticks == [], "a lost the lead mid-tick"
    [b_pass] = passes
    [tick] = b_pass.ticks
    assert (tick.state, tick.leader, tick.jobs_created) == (TickState.DONE, "b", 35)
    assert keys(ledger) == sorted(f"{n}:2026-W33" for n in range(35))


def test_a_tick_that_crashed_half_way_is_finished_by_the_next_leader(ledger):
    weekly_fan_out(ledger, 250, batch_size=50)
    a, b = scheduler(ledger, "a"), scheduler(ledger, "b")
    a.run_once(T0)
    configure("scheduler.after_batch=raise@3")  # a fails after its third batch is committed
    failed = a.run_once(MONDAY + timedelta(seconds=1))
    configure(None)
    assert failed.ticks == [] and len(failed.errors) == 1
    [left] = ledger.schedules.ticks("weekly-digest")
    assert left.state is TickState.RUNNING and left.jobs_created == 150
    assert "FaultInjected" in (left.error or "")
    assert len(keys(ledger)) == 150
    # a dies; b takes over after a's lease and finishes the tick without duplicates.
    later = MONDAY + timedelta(seconds=LEASE + 2)
    [done] = b.run_once(later).ticks
    assert (done.state, done.runs, done.leader, done.error) == (TickState.DONE, 2, "b", None)
    assert (done.jobs_created, done.jobs_existing) == (250, 150)
    assert keys(ledger) == sorted(f"{n}:2026-W33" for n in range(250))
    [row] = ledger.backend.schedules.all()
    assert row.cursor == MONDAY


def test_ten_thousand_customers_make_ten_thousand_jobs_once(ledger):
    weekly_fan_out(ledger, 10_000, batch_size=1000)
    a, b = scheduler(ledger, "a"), scheduler(ledger, "b")
    a.run_once(T0)
    configure("scheduler.before_finish=raise")  # every job enqueued, the tick not marked done
    started = time.perf_counter()
    with pytest.raises(FaultInjected):  # a crash of the scheduler's process, in effect
        a.run_once(MONDAY + timedelta(seconds=1))
    first_run = time.perf_counter() - started
    configure(None)
    assert ledger.schedules.ticks("weekly-digest")[0].state is TickState.RUNNING
    [done] = b.run_once(MONDAY + timedelta(seconds=LEASE + 2)).ticks
    assert (done.jobs_created, done.jobs_existing, done.runs) == (10_000, 10_000, 2)
    jobs = ledger.jobs(JobFilter(queue="digests"))
    assert len(jobs) == 10_000 and len({j.key for j in jobs}) == 10_000
    assert first_run < 60, f"10,000 jobs took {first_run:.1f} s"


def test_two_schedulers_racing_through_simulated_weeks_make_one_job_per_key(ledger):
    """Two schedulers take turns at random — running, stalling past their lease, coming back —
    through eight weeks, with a daily schedule beside the weekly fan-out."""
    weekly_fan_out(ledger, 40, batch_size=7)

    @ledger.schedule("0 3 * * *", tz="America/New_York", name="nightly-cleanup")
    @ledger.task(queue="cleanup")
    def cleanup(ctx, tick: str) -> None: ...

    rng = random.Random(4187)
    pair = [scheduler(ledger, "a"), scheduler(ledger, "b")]
    now = T0
    end = T0 + timedelta(weeks=8)
    while now < end:
        for s in rng.sample(pair, k=rng.choice([1, 2])):
            s.run_once(now)
        # Mostly short steps; sometimes a stall longer than the lease, so the lead changes.
        now += timedelta(seconds=rng.choice([5, 9, 13, 29, 41, 3600, 6 * 3600, 86400]))
    # Finish whatever the last step left due.
    for s in pair:
        s.run_once(end + hours(1))
    weekly = CronSpec("0 6 * * MON", "Europe/Berlin").ticks_between(T0, end + hours(1))[0]
    nightly = CronSpec("0 3 * * *", "America/New_York").ticks_between(T0, end + hours(1))[0]
    assert len(weekly) == 8 and len(nightly) == 56
    expected = sorted(f"{n}:{w}" for n in range(40) for w in map(_week, weekly))
    assert keys(ledger) == expected
    cleanup_jobs = ledger.jobs(JobFilter(queue="cleanup"))
    assert len(cleanup_jobs) == 56 == len({j.key for j in cleanup_jobs})
    ticks = ledger.schedules.ticks(limit=1000)
    assert all(t.state is TickState.DONE for t in ticks)
    assert sorted(t.tick_time for t in ticks if t.schedule == "weekly-digest") == weekly
    assert sum(t.jobs_created for t in ticks if t.schedule == "weekly-digest") == 8 * 40
    terms = {t.term for t in ticks}
    assert len(terms) > 3, "the lead changed hands during the run"
    assert len({t.leader for t in ticks}) == 2


def _week(t: datetime) -> str:
    year, week, _ = t.astimezone(ZoneInfo("Europe/Berlin")).isocalendar()
    return f"{year}-W{week:02d}"


@pytest.mark.parametrize(
    "catch_up,max_catch_up,expected_days,skipped",
    [("skip", 100, [], 5), ("latest", 100, [4], 4), ("all", 100, [0, 1, 2, 3, 4], 0)]
    + [("all", 3, [2, 3, 4], 2)],
)
def test_catch_up_after_downtime(ledger, catch_up, max_catch_up, expected_days, skipped):
    @ledger.schedule(
        "0 6 * * *", name="daily", catch_up=catch_up, max_catch_up=max_catch_up, key="d:{date}"
    )
    @ledger.task(queue="daily")
    def daily(ctx, tick: str) -> None: ...

    a = scheduler(ledger, "a")
    a.run_once(T0)  # declared Sunday 12:00 UTC; then down until Friday 07:00
    first = datetime(2026, 8, 10, 6, 0, tzinfo=UTC)
    result = a.run_once(first + timedelta(days=4, hours=1))
    assert [t.tick_time for t in result.ticks] == [first + timedelta(days=d) for d in expected_days]
    assert result.skipped == skipped
    [row] = ledger.backend.schedules.all()
    assert row.cursor == first + timedelta(days=4) and row.skipped_ticks == skipped
    assert sorted(j.key for j in ledger.jobs()) == [
        f"d:2026-08-{10 + d:02d}" for d in expected_days
    ]
    # The next tick is on time again, whatever the policy.
    [next_tick] = a.run_once(first + timedelta(days=5, seconds=30)).ticks
    assert next_tick.tick_time == first + timedelta(days=5)


def test_latest_runs_only_the_latest_tick_after_a_downtime_longer_than_one_pass_enumerates(
    ledger,
):
    # One pass enumerates at most 100,000 due ticks; past that they are all long missed and
    # skipped as a stretch. The latest of that stretch is not the latest tick: it must not run.
    @ledger.schedule("* * * * *", name="minutely", catch_up="latest", grace=0, key="m:{tick}")
    @ledger.task(queue="minutely")
    def minutely(ctx, tick: str) -> None: ...

    a = scheduler(ledger, "a")
    a.run_once(T0)
    now = T0 + timedelta(minutes=100_500, seconds=30)
    a.run_once(now)
    a.run_once(now)
    latest = (T0 + timedelta(minutes=100_500)).strftime("%Y-%m-%dT%H:%MZ")
    assert [j.key for j in ledger.jobs()] == [f"m:{latest}"]


def test_a_tick_within_the_grace_runs_even_when_skipping(ledger):
    @ledger.schedule("0 6 * * *", name="daily", catch_up="skip", grace=300)
    @ledger.task(queue="daily")
    def daily(ctx, tick: str) -> None: ...

    a = scheduler(ledger, "a")
    a.run_once(T0)
    six = datetime(2026, 8, 10, 6, 0, tzinfo=UTC)
    assert len(a.run_once(six + timedelta(minutes=4)).ticks) == 1  # a takeover's delay
    assert a.run_once(six + timedelta(days=1, minutes=6)).skipped == 1


@pytest.mark.parametrize(
    "zone,cron,day_before,change_day,local_hour",
    [
        ("Europe/Berlin", "30 2 * * *", datetime(2026, 3, 28, 12, tzinfo=UTC), 29, 3),
        ("Europe/Berlin", "30 2 * * *", datetime(2026, 10, 24, 12, tzinfo=UTC), 25, 2),
        ("America/New_York", "30 2 * * *", datetime(2026, 3, 7, 12, tzinfo=UTC), 8, 3),
        ("America/New_York", "30 1 * * *", datetime(2026, 10, 31, 12, tzinfo=UTC), 1, 1),
    ],
)
def test_daylight_saving_days_tick_once(ledger, zone, cron, day_before, change_day, local_hour):
    @ledger.schedule(cron, tz=zone, name="nightly", key="n:{date}", catch_up="skip", grace=60)
    @ledger.task(queue="nightly")
    def nightly(ctx, tick: str) -> None: ...

    a = scheduler(ledger, "a")
    a.run_once(day_before)
    now, ticks = day_before, []
    while now < day_before + timedelta(days=3):  # a pass every 30 minutes for three days
        now += timedelta(minutes=30)
        ticks += a.run_once(now).ticks
    local = [t.tick_time.astimezone(CronSpec(cron, zone).zone) for t in ticks]
    assert [t.day for t in local] == sorted({t.day for t in local}), "one tick per local day"
    assert len(local) == 3
    [on_change_day] = [t for t in local if t.day == change_day]
    assert on_change_day.hour == local_hour
    assert len(ledger.jobs()) == 3


def test_pause_and_resume(ledger):
    @ledger.schedule("0 6 * * *", name="daily", catch_up="latest", key="d:{date}")
    @ledger.task(queue="daily")
    def daily(ctx, tick: str) -> None: ...

    a = scheduler(ledger, "a")
    a.run_once(T0)
    six = datetime(2026, 8, 10, 6, 0, tzinfo=UTC)
    row = ledger.schedules.pause("daily", actor="ops@example", note="provider outage", now=T0)
    assert row.paused and row.pause_changed_by == "ops@example" and row.pause_note
    assert a.run_once(six + timedelta(days=2, minutes=1)).ticks == []
    # Resumed: the catch-up policy (latest) runs the most recent missed tick once.
    ledger.schedules.resume("daily", actor="ops@example", now=six + timedelta(days=2, hours=2))
    result = a.run_once(six + timedelta(days=2, hours=2))
    assert [t.tick_time for t in result.ticks] == [six + timedelta(days=2)]
    assert result.skipped == 2
    # Paused again and resumed skipping what was missed: nothing runs, the skips are counted.
    ledger.schedules.pause("daily", actor="ops@example")
    resumed_at = six + timedelta(days=5, hours=1)
    row = ledger.schedules.resume("daily", actor="ops@example", skip_missed=True, now=resumed_at)
    assert not row.paused and row.cursor == resumed_at and row.skipped_ticks == 2 + 3
    assert a.run_once(resumed_at + timedelta(minutes=1)).ticks == []
    assert [j.key for j in ledger.jobs()] == ["d:2026-08-12"]


def test_pausing_an_unknown_schedule_says_so(ledger):
    from jobledger import NotFound

    with pytest.raises(NotFound, match="no schedule named 'nope'"):
        ledger.schedules.pause("nope", actor="ops")


@pytest.mark.parametrize(
    "options",
    [{"limit": 0}, {"limit": ""}, {"limit": 10_001}, {"state": ""}, {"state": 3}],
    ids=repr,
)
def test_ticks_asked_with_an_argument_that_means_nothing_are_refused(ledger, options):
    """int() of the limit was a ValueError or an OverflowError, and a state no tick has a
    ValueError from its enum: both a ConfigError now, on both backends."""
    from jobledger import ConfigError

    with pytest.raises(ConfigError):
        ledger.schedules.ticks(None, **options)
    assert ledger.schedules.ticks(None, limit=10_000, state=TickState.DONE) == []


def test_a_pause_with_u0000_is_refused_alike_and_changes_nothing(ledger):
    """An actor or a note with U+0000 (PostgreSQL cannot store it; SQLite did) is refused on
    both backends, and a schedule name with one names no schedule."""
    from jobledger import ConfigError, NotFound

    @ledger.schedule("0 6 * * *", name="daily", key="d:{date}")
    @ledger.task(queue="daily")
    def daily(ctx, tick: str) -> None: ...

    scheduler(ledger, "a").run_once(T0)
    for verb in (ledger.schedules.pause, ledger.schedules.resume):
        with pytest.raises(ConfigError, match="^actor may not contain U\\+0000"):
            verb("daily", actor="ops\x00")
        with pytest.raises(ConfigError, match="^note may not contain U\\+0000"):
            verb("daily", actor="ops", note="outage\x00")
        with pytest.raises(NotFound, match="no schedule named"):
            verb("daily\x00", actor="ops")
    assert not ledger.schedules.row("daily").paused


def test_a_failing_eligibility_function_is_reported_and_tried_again(ledger):
    broken = [True]

    def customers(tick):
        if broken[0]:
            raise RuntimeError("customer database unreachable")
        return [1, 2]

    weekly_fan_out(ledger, customers)
    a = scheduler(ledger, "a")
    a.run_once(T0)
    result = a.run_once(MONDAY + timedelta(seconds=1))
    assert "customer database unreachable" in result.errors[0]
    [tick] = ledger.schedules.ticks("weekly-digest")
    assert tick.state is TickState.RUNNING and "unreachable" in tick.error
    [status] = ledger.schedules.status()
    assert status.row.cursor == T0, "the cursor waits for the failing tick"
    assert a.run_once(MONDAY + timedelta(seconds=1.5)).errors == [], "backing off"
    broken[0] = False
    [done] = a.run_once(MONDAY + timedelta(minutes=1)).ticks
    assert done.jobs_created == 2 and done.runs == 2 and done.error is None


def test_status_shows_next_and_last_tick_and_the_leader(ledger):
    weekly_fan_out(ledger, 4)
    a = scheduler(ledger, "a")
    a.run_once(T0)
    [before] = ledger.schedules.status(T0)
    assert before.next_tick == MONDAY and before.last_tick is None
    assert before.leader.holder == "a" and before.declared_by_leader
    a.run_once(MONDAY + timedelta(seconds=5))
    [after] = ledger.schedules.status(MONDAY + timedelta(seconds=5))
    assert after.next_tick == MONDAY + timedelta(days=7)
    assert after.last_tick.jobs_created == 4 and after.last_tick.state is TickState.DONE
    data = after.to_dict()
    assert data["next_tick"] == "2026-08-17T04:00:00Z"
    assert data["last_tick"]["jobs_created"] == 4 and data["leader"]["holder"] == "a"
    assert data["key"] == "{entity}:{week}" and data["fan_out"] is True


def test_fence_refuses_a_stale_lease(ledger):
    weekly_fan_out(ledger, 1)
    a, b = scheduler(ledger, "a"), scheduler(ledger, "b")
    a.run_once(T0)
    [old] = ledger.schedules.leaders(T0)
    b.run_once(T0 + timedelta(seconds=LEASE))
    with pytest.raises(LeadershipLost):
        ledger.backend.schedules.tick_start("weekly-digest", MONDAY, old, T0)
    assert ledger.schedules.ticks() == []


def test_each_cohort_has_its_own_authority(ledger):
    @ledger.schedule("0 6 * * *", tz="Europe/Berlin", name="eu-digest", cohort="eu")
    @ledger.task(queue="eu")
    def eu(ctx, tick: str) -> None: ...

    @ledger.schedule("0 6 * * *", tz="America/New_York", name="us-digest", cohort="us")
    @ledger.task(queue="us")
    def us(ctx, tick: str) -> None: ...

    europe = ledger.scheduler(name="fra", cohorts=["eu"], lease_seconds=LEASE, poll_interval=1)
    america = ledger.scheduler(name="iad", cohorts=["us"], lease_seconds=LEASE, poll_interval=1)
    both = ledger.scheduler(name="any", lease_seconds=LEASE, poll_interval=1)
    assert europe.run_once(T0).leading == ["eu"]
    assert america.run_once(T0).leading == ["us"]
    assert both.run_once(T0).leading == []
    leases = {lease.name: lease.holder for lease in ledger.schedules.leaders(T0)}
    assert leases == {"scheduler:eu": "fra", "scheduler:us": "iad"}
    # The European leader ticks only its cohort's schedules.
    europe.run_once(T0 + timedelta(seconds=5))
    result = europe.run_once(datetime(2026, 8, 10, 4, 1, tzinfo=UTC))
    assert [t.schedule for t in result.ticks] == ["eu-digest"]
    # When the European leader dies, the scheduler of both cohorts takes over Europe only.
    later = datetime(2026, 8, 10, 4, 1, tzinfo=UTC) + timedelta(seconds=LEASE)
    america.run_once(later - timedelta(seconds=1))
    assert both.run_once(later).leading == ["eu"]


def test_a_scheduler_for_an_unknown_cohort_is_refused(ledger):
    weekly_fan_out(ledger, 1)
    with pytest.raises(ConfigError, match=r"no schedule is declared in cohort\(s\) eu"):
        ledger.scheduler(cohorts=["eu"])
    with pytest.raises(ConfigError, match="poll_interval"):
        ledger.scheduler(lease_seconds=3, poll_interval=2)


def test_prune_removes_finished_ticks_older_than_the_cut_off_and_nothing_reruns(ledger):
    @ledger.schedule("0 3 * * *", tz="UTC", name="nightly")
    @ledger.task(queue="cleanup")
    def cleanup(ctx, tick: str) -> None: ...

    s = scheduler(ledger, "a")
    s.run_once(T0)
    now = T0
    for day in range(1, 11):
        now = T0 + timedelta(days=day)
        s.run_once(now)  # 03:00 of each day, Aug 10 to Aug 19
    assert len(ledger.schedules.ticks(limit=100)) == 10
    # A prune of one queue leaves ticks alone: they belong to no queue.
    assert ledger.prune(timedelta(days=3), queue="cleanup", now=now).ticks == 0
    result = ledger.prune(timedelta(days=3), now=now)
    assert result.ticks == 7
    left = sorted(t.tick_time.day for t in ledger.schedules.ticks(limit=100))
    assert left == [17, 18, 19]
    # The scheduler does not run a pruned tick again, nor the ones it kept.
    assert s.run_once(now + hours(1)).ticks == []
    assert len(ledger.jobs(JobFilter(queue="cleanup"))) == 10
    assert ledger.prune(timedelta(days=3), now=now).ticks == 0


def test_a_tick_already_done_is_not_run_again_by_a_scheduler_that_read_a_stale_cursor(
    ledger, monkeypatch
):
    """B read the schedule's cursor before A finished the tick (a pass that began just before
    the lead moved): the tick is due by that cursor, but it is recorded done, so B moves the
    cursor on without asking for the entities or enqueueing again."""
    asked: list[str] = []

    def customers(tick):
        asked.append(tick.iso)
        return range(3)

    weekly_fan_out(ledger, customers)
    a, b = scheduler(ledger, "a"), scheduler(ledger, "b")
    a.run_once(T0)
    stale = ledger.backend.schedules.all()
    assert [row.cursor for row in stale] == [T0]
    [done] = a.run_once(MONDAY + timedelta(seconds=1)).ticks
    assert (done.state, done.jobs_created) == (TickState.DONE, 3)
    a.release(MONDAY + timedelta(seconds=1))

    with monkeypatch.context() as m:
        m.setattr(ledger.backend.schedules, "all", lambda: stale)
        result = b.run_once(MONDAY + timedelta(seconds=2))
    assert result.leading == ["default"]
    assert result.ticks == [] and result.errors == []
    assert asked == ["2026-08-10T04:00Z"], "the eligibility function was asked again"
    [tick] = ledger.schedules.ticks("weekly-digest")
    assert (tick.state, tick.leader, tick.runs, tick.jobs_created, tick.jobs_existing) == (
        TickState.DONE,
        "a",
        1,
        3,
        0,
    )
    [row] = ledger.backend.schedules.all()
    assert row.cursor == MONDAY and row.skipped_ticks == 0
    assert keys(ledger) == ["0:2026-W33", "1:2026-W33", "2:2026-W33"]


def test_a_key_function_and_a_payload_dict_make_the_jobs_of_a_tick(ledger):
    settings = {"format": "html"}

    @ledger.schedule(
        "0 6 * * MON",
        tz="Europe/Berlin",
        name="weekly-report",
        key=lambda tick: f"report-{tick.date}",
        payload=settings,
    )
    @ledger.task(queue="digests")
    def report(ctx, format: str) -> None: ...

    # A fan-out's key function is given the entity as well.
    @ledger.schedule(
        "0 6 * * MON",
        tz="Europe/Berlin",
        name="weekly-digest",
        for_each=lambda tick: range(2),
        key=lambda tick, customer: f"c{customer}/{tick.week}",
        payload=lambda tick, customer: {"customer_id": customer, "week": tick.week},
    )
    @ledger.task(queue="digests")
    def send_digest(ctx, customer_id: int, week: str) -> None: ...

    a = scheduler(ledger, "a")
    a.run_once(T0)
    ticks = a.run_once(MONDAY + timedelta(seconds=1)).ticks
    assert sorted(t.jobs_created for t in ticks) == [1, 2]
    jobs = {j.key: j.payload for j in ledger.jobs(JobFilter(queue="digests"))}
    assert jobs == {
        "report-2026-08-10": {"format": "html"},
        "c0/2026-W33": {"customer_id": 0, "week": "2026-W33"},
        "c1/2026-W33": {"customer_id": 1, "week": "2026-W33"},
    }
    settings["format"] = "pdf"
    tick = ledger.schedules.get("weekly-report").tick(MONDAY)
    assert ledger.schedules.get("weekly-report").target.payload(tick, None) == {"format": "pdf"}
    assert ledger.schedules.get("weekly-report").target.payload(tick, None) is not settings


@pytest.mark.parametrize(
    "options, error",
    [
        ({"key": lambda tick: 42}, "schedule 'weekly-report': the key function returned int"),
        (
            {"payload": lambda tick: ["html"]},
            "the payload function of this schedule returned list, not a dict",
        ),
    ],
    ids=["key", "payload"],
)
def test_a_key_or_payload_function_returning_the_wrong_type_fails_its_tick(ledger, options, error):
    @ledger.schedule("0 6 * * MON", tz="Europe/Berlin", name="weekly-report", **options)
    @ledger.task(queue="digests")
    def report(ctx, tick: str = "", format: str = "html") -> None: ...

    a = scheduler(ledger, "a")
    a.run_once(T0)
    result = a.run_once(MONDAY + timedelta(seconds=1))
    assert error in result.errors[0]
    [tick] = ledger.schedules.ticks("weekly-report")
    assert tick.state is TickState.RUNNING and error in tick.error
    assert ledger.jobs() == []
    [status] = ledger.schedules.status()
    assert status.row.cursor == T0, "the cursor waits for the failing tick"


@pytest.mark.parametrize("entity", [True, 1.5, {"customer_id": 1}])
def test_an_eligibility_function_yielding_what_is_no_entity_id_fails_its_tick(ledger, entity):
    weekly_fan_out(ledger, lambda tick: [1, entity])
    a = scheduler(ledger, "a")
    a.run_once(T0)
    result = a.run_once(MONDAY + timedelta(seconds=1))
    error = (
        f"the eligibility function of schedule 'weekly-digest' yielded {entity!r}; "
        "it must yield entity ids (str or int)"
    )
    assert error in result.errors[0]
    [tick] = ledger.schedules.ticks("weekly-digest")
    assert tick.state is TickState.RUNNING and error in tick.error
    assert keys(ledger) == []


def test_a_tick_s_key_held_with_another_payload_is_left_counted_and_logged(ledger, caplog):
    weekly_fan_out(ledger, 2)
    ledger.enqueue("send_digest", {"customer_id": 1, "week": "other"}, key="1:2026-W33")
    a = scheduler(ledger, "a")
    a.run_once(T0)
    with caplog.at_level("WARNING", logger="jobledger"):
        [done] = a.run_once(MONDAY + timedelta(seconds=1)).ticks
    assert (done.state, done.jobs_created, done.jobs_existing, done.conflicts) == (
        TickState.DONE,
        1,
        0,
        1,
    )
    payloads = {j.key: j.payload for j in ledger.jobs(JobFilter(queue="digests"))}
    assert payloads == {
        "0:2026-W33": {"customer_id": 0, "week": "2026-W33"},
        "1:2026-W33": {"customer_id": 1, "week": "other"},
    }
    assert (
        "schedule 'weekly-digest' tick 2026-08-10T04:00Z: 1 key(s) exist with a "
        "different payload; left as they were"
    ) in caplog.text


@pytest.mark.parametrize(
    "options, message",
    [
        ({"lease_seconds": 0}, "lease_seconds must be a number of seconds > 0, got 0"),
        ({"lease_seconds": "30"}, "lease_seconds must be a number of seconds > 0, got '30'"),
        ({"poll_interval": -1}, "poll_interval must be a number of seconds > 0, got -1"),
        ({"poll_interval": True}, "poll_interval must be a number of seconds > 0, got True"),
    ],
)
def test_a_scheduler_s_lease_and_poll_interval_are_checked(ledger, options, message):
    weekly_fan_out(ledger, 1)
    with pytest.raises(ConfigError) as caught:
        ledger.scheduler(**options)
    assert str(caught.value) == message


def test_a_pass_at_a_naive_time_is_refused_and_runs_nothing(ledger):
    weekly_fan_out(ledger, 1)
    a = scheduler(ledger, "a")
    a.run_once(T0)
    for odd in (datetime(2026, 8, 10, 4, 0, 1), "2026-08-10T04:00:01+00:00"):
        with pytest.raises(ConfigError, match="^now must be an aware datetime"):
            a.run_once(odd)
    assert keys(ledger) == []
    assert [t.jobs_created for t in a.run_once(MONDAY + timedelta(seconds=1)).ticks] == [1]


def test_a_scheduler_stopped_mid_fan_out_ends_after_its_batch_and_the_next_finishes_the_tick(
    ledger,
):
    """docs/scheduling.md: a graceful stop ends the pass after the batch it is on and releases
    the lease, so another scheduler takes over at once and finishes the tick, each job once."""
    a, b = scheduler(ledger, "a"), scheduler(ledger, "b")

    def customers(tick):
        for n in range(5):
            if n == 2:
                a.stop()  # as SIGTERM does while the first batch is written
            yield n

    weekly_fan_out(ledger, customers, batch_size=2)
    a.run_once(T0)
    stopped = a.run_once(MONDAY + timedelta(seconds=1))
    assert stopped.ticks == [] and stopped.errors == []
    assert keys(ledger) == ["0:2026-W33", "1:2026-W33"]
    assert a.run_once(MONDAY + timedelta(seconds=2)).leading == [], "a stopped runs no pass"
    a.release(MONDAY + timedelta(seconds=2))
    [tick] = b.run_once(MONDAY + timedelta(seconds=3)).ticks
    assert (tick.state, tick.leader, tick.runs) == (TickState.DONE, "b", 2)
    assert (tick.jobs_created, tick.jobs_existing) == (5, 2)
    assert keys(ledger) == sorted(f"{n}:2026-W33" for n in range(5))
