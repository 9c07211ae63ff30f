"""The stats role: counts per queue and state with the attempts they took, the oldest due job
and how many are late, lease expiries of the last hour, live depths (jobs with and without a
group alike), finished counts, and the per-minute rollups. (More on depths and rollups:
tests/observability/test_backend.py.)"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from jobledger._records import Failure, GroupLimits, GroupStatus, MinuteStats
from jobledger.http.dashboard.diagnosis import diagnose

from .conftest import T0, at, lease_of


@pytest.fixture
def stats(ledger):
    ledger.task(lambda ctx, n=0: None, name="work", queue="q", max_attempts=2, lease_seconds=30)
    ledger.task(lambda ctx, n=0: None, name="grouped", queue="g", group="tenant-1")
    return ledger.backend.stats


def test_queue_counts_tell_states_attempts_age_and_lateness(ledger, stats):
    for n, due in enumerate((-900, -400, -10, 600)):
        ledger.enqueue("work", {"n": n}, key=f"k{n}", run_at=at(due), now=at(-1000))
    [oldest] = ledger.backend.jobs.claim(["q"], "w", 1, now=T0)  # k0, due 900 s ago
    ledger.backend.jobs.fail([Failure(lease_of(oldest), False, None, "E", "no")], now=at(1))
    [q] = stats.queues(now=at(10), late_after_seconds=300)
    assert q.queue == "q"
    assert q.counts == {"pending": 3, "dead": 1}
    assert q.attempts == {"pending": 0, "dead": 1}
    # k1 is the oldest due pending job: due at -400, read at +10; k1 is late (over 300 s), k2 not.
    assert q.oldest_due_pending_seconds == pytest.approx(410.0)
    assert q.late_pending == 1
    assert q.lease_expiries_last_hour == 0


def test_a_lateness_longer_than_any_wait_counts_none_late_alike(ledger, stats):
    """A ``late_after`` longer than any job can have waited (99999999 days, past the earliest
    time the ledger keeps) counts none late: PostgreSQL refused to subtract it from its clock
    ("timestamp out of range"), SQLite answered. A lateness that is no number is refused."""
    from jobledger import ConfigError
    from jobledger._records import EARLIEST_TIME

    ledger.enqueue("work", {"n": 0}, key="old", run_at=EARLIEST_TIME, now=T0)
    ledger.enqueue("work", {"n": 1}, key="now", now=T0)
    for late_after, late in ((99999999 * 86400.0, 0), (1e300, 0), (30, 2), (0, 2)):
        [q] = ledger.stats(now=at(60), late_after_seconds=late_after)
        assert q.late_pending == late, late_after
    for wrong in (-1, float("nan"), float("inf"), True, "300"):
        with pytest.raises(ConfigError, match="late_after_seconds must be"):
            ledger.stats(now=at(60), late_after_seconds=wrong)


def test_lease_expiries_of_the_last_hour_are_counted(ledger, stats):
    ledger.enqueue("work", {}, key="k", now=T0)
    [job] = ledger.backend.jobs.claim(["q"], "w", 1, now=T0)
    assert [r.job_id for r in ledger.backend.jobs.rescue(now=at(job.lease_seconds + 1))] == [job.id]
    [q] = stats.queues(now=at(60))
    assert q.lease_expiries_last_hour == 1
    assert q.counts == {"pending": 1} and q.attempts == {"pending": 1}
    [q] = stats.queues(now=at(60 + 3600))
    assert q.lease_expiries_last_hour == 0


def test_an_empty_ledger_has_no_stats(stats):
    assert stats.queues(now=T0) == []
    assert stats.depths(now=T0) == []
    assert stats.finished_counts() == {}


def test_depths_count_jobs_with_and_without_a_group_alike(ledger, stats):
    ledger.enqueue("work", {}, key="plain", run_at=at(-30), now=at(-60))
    ledger.enqueue("grouped", {}, key="g1", run_at=at(-60), now=at(-60))
    ledger.enqueue("grouped", {}, key="g2", run_at=at(120), now=at(-60))
    depths = {d.queue: d for d in stats.depths(now=T0)}
    assert (depths["q"].pending, depths["q"].due) == (1, 1)
    assert depths["q"].oldest_due_pending_seconds == pytest.approx(30.0)
    g = depths["g"]
    assert (g.pending, g.due, g.leased, g.dead) == (2, 1, 0, 0)
    assert g.oldest_due_pending_seconds == pytest.approx(60.0)


def test_finished_counts_are_done_and_cancelled_jobs_per_queue(ledger, stats):
    for n in range(3):
        ledger.enqueue("work", {"n": n}, key=f"k{n}", now=T0)
    jobs = ledger.backend.jobs.claim(["q"], "w", 2, now=T0)
    ledger.backend.jobs.complete([lease_of(j) for j in jobs], now=at(1))
    [left] = [j for j in ledger.jobs() if j.state.value == "pending"]
    ledger.backend.history.cancel(left.id, "ops", "not needed", now=at(2))
    assert stats.finished_counts() == {"q": {"done": 2, "cancelled": 1}}


def test_rollups_add_up_per_minute_queue_and_task_and_are_pruned_by_minute(stats):
    minute = T0 - timedelta(minutes=5)
    stats.minutes_add(
        [
            MinuteStats(minute, "q", "work", claimed=2, wait_sum=3.0, wait_max=2.0, done=2),
            MinuteStats(minute, "q", "other", dead=1),
        ]
    )
    stats.minutes_add([MinuteStats(minute, "q", "work", claimed=1, wait_sum=0.5, wait_max=0.5)])
    stats.minutes_add([MinuteStats(T0, "q", "work", retried=3, run_count=1, run_max=0.25)])
    stats.minutes_add([])
    rows = stats.minutes(since=minute)
    assert [(r.minute, r.task) for r in rows] == [(minute, "other"), (minute, "work"), (T0, "work")]
    work = rows[1]
    assert (work.claimed, work.wait_sum, work.wait_max, work.done) == (3, 3.5, 2.0, 2)
    assert (rows[2].retried, rows[2].run_max) == (3, 0.25)
    assert [r.minute for r in stats.minutes(since=minute + timedelta(seconds=1))] == [T0]
    assert stats.minutes_prune(before=minute) == 0
    assert stats.minutes_prune(before=T0) == 2
    assert [r.minute for r in stats.minutes(since=minute)] == [T0]


def test_a_lease_counts_as_expired_exactly_when_a_rescue_would_take_it(ledger, stats):
    """At its lease_until a lease has not run out (the rescue leaves it); a microsecond later
    it has. The gauge of expired leases and the job page's diagnosis say the same at both
    instants, so the gauge never shows a lease that no rescue at that moment would take."""
    ledger.enqueue("work", {}, key="k", now=T0)
    [job] = ledger.backend.jobs.claim(["q"], "w", 1, now=T0)
    edge, past = job.lease_until, job.lease_until + timedelta(microseconds=1)
    assert edge == at(30)
    [depth] = stats.depths(now=edge)
    assert (depth.leased, depth.expired_leases) == (1, 0)
    assert not any("ran out" in line for line in diagnose(ledger.job(job.id), [], edge))
    assert ledger.backend.jobs.rescue(now=edge) == []
    [depth] = stats.depths(now=past)
    assert (depth.leased, depth.expired_leases) == (1, 1)
    assert any("ran out" in line for line in diagnose(ledger.job(job.id), [], past))
    assert [r.job_id for r in ledger.backend.jobs.rescue(now=past)] == [job.id]


def test_a_job_page_s_diagnosis_tells_each_state_what_it_waits_for(ledger, stats):
    """The sentences the job page shows, read at explicit instants: scheduled, waiting for its
    retry, due again after a failure, held by its group's rate, running, done, cancelled."""
    job_id = ledger.enqueue("work", {}, key="k", run_at=at(600), now=T0).id

    def said(now: datetime, **group: Any) -> list[str]:
        return diagnose(ledger.job(job_id), ledger.history(job_id).attempts, now, **group)

    assert said(T0) == ["Scheduled for 2026-08-10 06:10:00Z (in 10 min 00 s); nothing is wrong."]
    [claimed] = ledger.backend.jobs.claim(["q"], "w1", 1, now=at(600))
    ledger.backend.jobs.fail([Failure(lease_of(claimed), True, at(700), "E", "no")], now=at(601))
    assert said(at(640)) == [
        "Waiting to be retried at 2026-08-10 06:11:40Z (in 1 min 00 s): attempt 1 of 2 failed "
        "with E: no."
    ]
    [due, last] = said(at(705))
    assert due.startswith("Due for 5.0 s and not claimed yet.")
    assert last == "Its last attempt (1) failed with E: no."
    # Held by its group's rate while the bucket holds less than a token, due once it holds one.
    bucket = GroupStatus("q", "tenant-1", 1, 1, 0, None, None, None, tokens=0.4)
    limits = GroupLimits(rate=0.5)
    [held, last] = said(at(705), group=bucket, limits=limits)
    assert held == (
        "Its group 'tenant-1' is held to 0.5 jobs per second (the queue's rate per group): "
        "it is claimed when the group's bucket refills."
    )
    assert last == "Its last attempt (1) failed with E: no."
    full = GroupStatus("q", "tenant-1", 1, 1, 0, None, None, None, tokens=1.0)
    assert said(at(705), group=full, limits=limits)[0].startswith("Due for 5.0 s")
    [claimed] = ledger.backend.jobs.claim(["q"], "w2", 1, now=at(710))
    ledger.backend.jobs.heartbeat([lease_of(claimed)], now=at(712))  # running since its claim
    running, hangs = said(at(715))
    assert running == (
        "Running on w2 (attempt 2 of 2) for 5.0 s; its lease is renewed while the handler "
        "runs and now ends at 2026-08-10 06:12:22Z."
    )
    assert hangs.startswith("If the handler hangs, its worker keeps renewing the lease")
    ledger.backend.jobs.complete([lease_of(claimed)], now=at(720))
    assert said(at(800)) == ["Done at 2026-08-10 06:12:00Z after 2 attempt(s)."]
    other = ledger.enqueue("work", {}, key="other", run_at=at(900), now=T0).id
    ledger.cancel(other, actor="ops", reason="not wanted", now=at(30))
    [cancelled] = diagnose(ledger.job(other), [], at(40))
    assert cancelled == "Cancelled at 2026-08-10 06:00:30Z; it will not run."
