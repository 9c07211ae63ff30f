"""Schedulers in real processes: two on one ledger, the leader killed with SIGKILL mid-tick;
workers that schedule (or not); ``jobledger scheduler`` giving its lease up on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from jobledger import JobFilter, JobState, Ledger
from jobledger._records import TickState
from jobledger.scheduling.cron import CronSpec

from ..apps.schedule_app import CRON, ZONE, declare, sim_clock
from ..support.processes import (
    ROOT,
    handles,
    killed_by_sigkill,
    terminate,
    wait_exit,
    wait_until,
    worker_process,
)
from ..support.waiting import LoadMeter

APP = "tests.apps.schedule_app:ledger"

pytestmark = pytest.mark.slow


def jobledger_process(
    db_url: str, *args: str, env: dict[str, str], faults: str | None = None
) -> subprocess.Popen[str]:
    full_env = dict(os.environ)
    full_env.pop("JOBLEDGER_FAULTS", None)
    full_env.update(env)
    full_env["JOBLEDGER_URL"] = db_url
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full_env.get("PYTHONPATH")]))
    if faults:
        full_env["JOBLEDGER_FAULTS"] = faults
    return subprocess.Popen(
        [sys.executable, "-m", "jobledger", *args],
        cwd=ROOT,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def leader(ledger: Ledger):
    leases = ledger.schedules.leaders()
    return leases[0] if leases else None


def held_by(ledger: Ledger, proc: subprocess.Popen[str]):
    lease = leader(ledger)
    return lease if lease is not None and f":{proc.pid}:" in lease.holder else None


def week(t: datetime) -> str:
    year, number, _ = t.astimezone(ZoneInfo(ZONE)).isocalendar()
    return f"{year}-W{number:02d}"


# One simulated week passes in 1.5 real seconds; the lease is 2 real seconds long.
WEEK_REAL = 1.5
SPEED = 7 * 86400 / WEEK_REAL
LEASE_REAL = 2.0
CUSTOMERS, BATCH = 300, 50


def test_two_schedulers_one_killed_mid_tick_make_one_job_per_customer_per_week(db_url):
    """The issue's "done when": the leader is SIGKILLed after committing 3 of the 6 batches of a
    tick; the other scheduler takes over once the lease has expired (not before), finishes that
    tick without duplicates, and goes on through the following weeks."""
    Ledger(db_url).migrate()
    t0 = datetime(2026, 8, 3, 12, 0, tzinfo=UTC)
    epoch = time.time()
    clock = sim_clock(t0, epoch, SPEED)
    env = {
        "SIM_SPEED": str(SPEED),
        "SIM_T0": t0.isoformat(),
        "SIM_EPOCH": repr(epoch),
        "SCHEDULE_CUSTOMERS": str(CUSTOMERS),
        "SCHEDULE_BATCH": str(BATCH),
        "SCHEDULE_LEASE_SECONDS": str(LEASE_REAL),
        "SCHEDULE_POLL_SECONDS": "0.05",
    }
    observer = Ledger(db_url)
    victim = jobledger_process(
        db_url, "scheduler", APP, env=env, faults="scheduler.after_batch=kill@3"
    )
    survivor = None
    ready: list[float] = []  # when the survivor had its signal handlers in place: at its loop

    def note_ready() -> None:
        if not ready and survivor is not None and handles(survivor.pid, signal.SIGTERM):
            ready.append(time.time())

    try:
        wait_until(lambda: held_by(observer, victim), 30, what="the first scheduler to lead")
        survivor = jobledger_process(db_url, "scheduler", APP, env=env)
        with LoadMeter() as load:
            # Watch the victim's lease until it dies (the fault kills it after its third batch).
            seen = []
            wait_until(
                lambda: (
                    note_ready()
                    or seen.append(held_by(observer, victim))
                    or victim.poll() is not None
                ),
                60,
                what="the first scheduler to be killed mid-tick",
            )
            code, _, err = wait_exit(victim)
            assert killed_by_sigkill(code), err
            dead = held_by(observer, victim)  # its lease as it died, unless already taken over
            last_seen = dead or [lease for lease in seen if lease is not None][-1]
            taken = wait_until(
                lambda: note_ready() or held_by(observer, survivor), 30, what="the takeover"
            )
        assert last_seen.until <= taken.acquired_at, "taken over before the lease expired"
        assert taken.term == last_seen.term + 1
        # How soon: from the expiry, or from the survivor's start when it was still starting
        # then (on a busy machine it can be), in real seconds of an idle machine.
        assert ready, "the survivor took over before it was running"
        since = max(last_seen.until, t0 + timedelta(seconds=(ready[0] - epoch) * SPEED))
        delay = (taken.acquired_at - since).total_seconds() / SPEED
        slack = (2.0 if dead is not None else 2.0 + LEASE_REAL / 3) * load.factor()
        assert delay < slack, (
            f"takeover {delay:.2f} real seconds after the lease expired (bound {slack:.2f} s: "
            f"the machine was {load.factor():.1f}× slower than idle)"
        )
        print(f"\ntakeover {delay * 1000:.0f} ms after the dead leader's lease expired")

        def done_by_survivor() -> int:
            return sum(
                1
                for t in observer.schedules.ticks(limit=1000)
                if t.state is TickState.DONE and f":{survivor.pid}:" in t.leader
            )

        wait_until(
            lambda: done_by_survivor() >= 4,
            60,
            what="four weeks under the new leader",
            progress=done_by_survivor,
        )
    finally:
        for proc in (victim, survivor):
            if proc is not None:
                terminate(proc)
    code, _, err = wait_exit(survivor)
    assert code == 0, err

    # One more pass finishes whatever the survivor's stop left due or half-done.
    final = Ledger(db_url)
    declare(final, CUSTOMERS, BATCH)
    end = clock()
    final.scheduler(name="final", lease_seconds=LEASE_REAL * SPEED, clock=clock).run_once(end)
    [row] = final.backend.schedules.all()
    expected, _ = CronSpec(CRON, ZONE).ticks_between(row.created_at, end)
    assert len(expected) >= 4
    ticks = final.schedules.ticks(limit=1000)
    assert sorted(t.tick_time for t in ticks) == expected, "a tick was lost or doubled"
    assert all(t.state is TickState.DONE for t in ticks)
    [killed] = [t for t in ticks if t.runs > 1]
    assert killed.tick_time == expected[0] and killed.runs == 2
    assert f":{survivor.pid}:" in killed.leader
    assert killed.jobs_existing == 3 * BATCH, "the victim committed 3 batches before dying"
    jobs = final.jobs(JobFilter(queue="digests"))
    assert sorted(j.key for j in jobs) == sorted(
        f"{c}:{week(t)}" for c in range(CUSTOMERS) for t in expected
    )
    assert sum(t.jobs_created for t in ticks) == CUSTOMERS * len(expected)
    final.close()
    observer.close()


def test_workers_run_the_scheduler_unless_told_not_to(db_url):
    """Real clock: a schedule declared eight days ago has missed a tick; a worker started with
    --no-scheduler leaves it alone, a default worker takes the lead, ticks, and runs the jobs."""
    led = Ledger(db_url)
    declare(led, 20, 10)
    past = datetime.now(UTC) - timedelta(days=8)
    seeder = led.scheduler(name="seeder", lease_seconds=3, poll_interval=0.1)
    seeder.run_once(past)  # the schedule as a leader declared it eight days ago
    seeder.release(past)
    env = {
        "SCHEDULE_CUSTOMERS": "20",
        "SCHEDULE_BATCH": "10",
        "SCHEDULE_LEASE_SECONDS": "3",
        "SCHEDULE_POLL_SECONDS": "0.1",
    }
    args = ("--poll-interval", "0.05", "--concurrency", "2")
    bystander = worker_process(APP, db_url, "--no-scheduler", *args, env=env)
    worker = None
    try:
        probe = led.enqueue("send_digest", {"customer_id": -1, "week": "probe"}, key="probe")
        wait_until(lambda: led.job(probe.id).state is JobState.DONE, 30, what="the probe job")
        assert leader(led).holder == "seeder" and led.schedules.ticks() == []
        worker = worker_process(APP, db_url, *args, env=env)
        expected, _ = CronSpec(CRON, ZONE).ticks_between(past, datetime.now(UTC))
        assert len(expected) in (1, 2)
        keys = sorted(f"{c}:{week(t)}" for c in range(20) for t in expected)

        def done_keys() -> list[str]:
            jobs = led.jobs(JobFilter(queue="digests"))
            return sorted(j.key for j in jobs if j.key != "probe" and j.state is JobState.DONE)

        def all_done() -> bool:
            jobs = [j for j in led.jobs(JobFilter(queue="digests")) if j.key != "probe"]
            return sorted(j.key for j in jobs) == keys and all(
                j.state is JobState.DONE for j in jobs
            )

        wait_until(
            all_done, 30, what="the missed tick's jobs to run", progress=lambda: len(done_keys())
        )
        assert held_by(led, worker) is not None
        # A tick is marked done by the scheduler's pass after its last job finished: a later
        # pass than the one the jobs' states above were read after.
        wait_until(
            lambda: [t.state for t in led.schedules.ticks()] == [TickState.DONE] * len(expected),
            30,
            what="the tick marked done",
        )
    finally:
        for proc in (bystander, worker):
            if proc is not None:
                terminate(proc)
    for proc in (bystander, worker):
        code, _, err = wait_exit(proc)
        assert code == 0, err
    assert not leader(led).valid, "a worker that stops gives its lease up"
    led.close()


def test_the_scheduler_command_releases_its_lease_on_sigterm(db_url):
    Ledger(db_url).migrate()
    led = Ledger(db_url)
    env = {"SCHEDULE_LEASE_SECONDS": "30", "SCHEDULE_POLL_SECONDS": "0.1"}
    proc = jobledger_process(db_url, "scheduler", APP, env=env)
    try:
        lease = wait_until(lambda: held_by(led, proc), 30, what="the scheduler to lead")
        assert lease.valid and lease.until - lease.acquired_at == timedelta(seconds=30)
    finally:
        terminate(proc)
    code, _, err = wait_exit(proc)
    assert code == 0, err
    assert "now leads cohort 'default'" in err
    assert not leader(led).valid, "released at once: a successor need not wait 30 s"
    wrong = jobledger_process(db_url, "scheduler", APP, "--cohort", "eu", env=env)
    code, out, err = wait_exit(wrong)
    assert code == 2 and err.strip().splitlines() == [
        "error: no schedule is declared in cohort(s) eu; declared cohorts: default"
    ]
    led.close()
