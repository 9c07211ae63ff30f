"""The schedules role: what a leader declares, the cursor that only moves forward, pauses, and
the ticks (each started once per run, counted in the transaction that enqueues its batch,
finished with the cursor) — every write fenced by the leader's lease."""

from __future__ import annotations

from dataclasses import replace

import pytest

from jobledger._records import CatchUp, ScheduleDefinition, TickState
from jobledger.errors import LeadershipLost, NotFound

from .conftest import T0, at

HOUR = 3600.0
TTL = 30 * 24 * HOUR  # the lease outlasts every test but the takeover


def definition(name: str = "digest", cron: str = "0 * * * *") -> ScheduleDefinition:
    return ScheduleDefinition(
        name=name,
        cohort="default",
        cron=cron,
        time_zone="UTC",
        catch_up=CatchUp.LATEST,
        max_catch_up=10,
        grace_seconds=60.0,
        target="task send_digest → queue digests",
        key_template="{schedule}:{tick}",
        fan_out=False,
    )


@pytest.fixture
def backend(ledger):
    return ledger.backend


@pytest.fixture
def lease(backend):
    held = backend.leader.acquire("scheduler:default", "host-a", TTL, now=T0)
    assert held is not None
    return held


def test_a_declared_schedule_starts_at_now_and_keeps_its_cursor_when_declared_again(backend, lease):
    schedules = backend.schedules
    schedules.declare([definition(), definition("cleanup", "30 2 * * *")], lease, now=T0)
    rows = {r.name: r for r in schedules.all()}
    assert list(rows) == ["cleanup", "digest"]
    digest = rows["digest"]
    assert (digest.cursor, digest.declared_at, digest.created_at) == (T0, T0, T0)
    assert digest.catch_up is CatchUp.LATEST and not digest.fan_out and not digest.paused
    assert digest.grace_seconds == 60.0 and digest.skipped_ticks == 0
    schedules.advance("digest", at(HOUR), 0, lease, now=at(HOUR))
    schedules.declare([definition(cron="*/15 * * * *")], lease, now=at(2 * HOUR))
    [again] = [r for r in schedules.all() if r.name == "digest"]
    assert again.cron == "*/15 * * * *"  # the definition is the new one
    assert again.cursor == at(HOUR) and again.created_at == T0  # where it stood is kept
    assert again.declared_at == at(2 * HOUR)


def test_every_leader_write_is_refused_once_the_lease_moved(backend, lease):
    schedules = backend.schedules
    schedules.declare([definition()], lease, now=T0)
    schedules.tick_start("digest", at(HOUR), lease, now=at(HOUR))
    other = backend.leader.acquire("scheduler:default", "host-b", TTL, now=at(TTL))
    assert other is not None
    late = at(TTL + 1)
    with pytest.raises(LeadershipLost):
        schedules.declare([definition("late")], lease, now=late)
    with pytest.raises(LeadershipLost):
        schedules.advance("digest", at(2 * HOUR), 0, lease, now=late)
    with pytest.raises(LeadershipLost):
        schedules.tick_start("digest", at(2 * HOUR), lease, now=late)
    with pytest.raises(LeadershipLost):
        schedules.tick_finish("digest", at(HOUR), lease, now=late)
    assert [r.name for r in schedules.all()] == ["digest"]
    [row] = schedules.all()
    assert row.cursor == T0
    [tick] = schedules.ticks("digest")
    assert tick.state is TickState.RUNNING and tick.runs == 1


def test_the_cursor_never_moves_back(backend, lease):
    schedules = backend.schedules
    schedules.declare([definition()], lease, now=T0)
    schedules.advance("digest", at(3 * HOUR), 2, lease, now=at(3 * HOUR))
    schedules.advance("digest", at(HOUR), 5, lease, now=at(3 * HOUR))
    [row] = schedules.all()
    assert row.cursor == at(3 * HOUR) and row.skipped_ticks == 2


def test_pause_and_resume_record_who_and_why_and_a_resume_may_skip_forward(backend, lease):
    schedules = backend.schedules
    schedules.declare([definition()], lease, now=T0)
    paused = schedules.pause("digest", True, "ops:ana", "mail provider down", now=at(10))
    assert paused.paused and paused.pause_changed_by == "ops:ana"
    assert paused.pause_note == "mail provider down" and paused.pause_changed_at == at(10)
    resumed = schedules.pause(
        "digest", False, "ops:ben", None, now=at(5 * HOUR), cursor=at(5 * HOUR), skipped=4
    )
    assert not resumed.paused and resumed.pause_changed_by == "ops:ben"
    assert resumed.cursor == at(5 * HOUR) and resumed.skipped_ticks == 4
    # A cursor behind the schedule's skips nothing and moves nothing.
    again = schedules.pause("digest", True, "ops:ana", None, now=at(6 * HOUR), cursor=T0, skipped=9)
    assert again.cursor == at(5 * HOUR) and again.skipped_ticks == 4
    with pytest.raises(NotFound):
        schedules.pause("nothing", True, "ops:ana", None, now=at(1))


def test_a_tick_starts_once_per_run_and_is_not_restarted_once_done(backend, lease):
    schedules = backend.schedules
    schedules.declare([definition()], lease, now=T0)
    first = schedules.tick_start("digest", at(HOUR), lease, now=at(HOUR))
    assert first.state is TickState.RUNNING and first.runs == 1
    assert (first.leader, first.term, first.started_at) == ("host-a", lease.term, at(HOUR))
    schedules.tick_error("digest", at(HOUR), "enqueue failed: database away", now=at(HOUR + 1))
    [failed] = schedules.ticks("digest")
    assert failed.error == "enqueue failed: database away"
    again = schedules.tick_start("digest", at(HOUR), lease, now=at(HOUR + 2))
    assert again.state is TickState.RUNNING and again.runs == 2 and again.error is None
    done = schedules.tick_finish("digest", at(HOUR), lease, now=at(HOUR + 3))
    assert done.state is TickState.DONE and done.finished_at == at(HOUR + 3)
    [row] = schedules.all()
    assert row.cursor == at(HOUR)  # finishing a tick moves the cursor to it
    restarted = schedules.tick_start("digest", at(HOUR), lease, now=at(HOUR + 4))
    assert restarted.state is TickState.DONE and restarted.runs == 2
    # An error noted after the end changes nothing: the tick is done.
    schedules.tick_error("digest", at(HOUR), "late", now=at(HOUR + 5))
    assert schedules.ticks("digest")[0].error is None
    assert schedules.tick_finish("digest", at(HOUR), lease, now=at(HOUR + 6)) == done


def test_a_ticks_counts_are_added_in_the_transaction_of_its_batch(backend, lease):
    schedules = backend.schedules
    schedules.declare([definition()], lease, now=T0)
    schedules.tick_start("digest", at(HOUR), lease, now=at(HOUR))
    with backend.transaction() as conn:
        schedules.tick_progress("digest", at(HOUR), 10, 2, 1, conn)
    with pytest.raises(RuntimeError), backend.transaction() as conn:
        schedules.tick_progress("digest", at(HOUR), 100, 100, 100, conn)
        raise RuntimeError("the batch's enqueue failed")
    with backend.transaction() as conn:
        schedules.tick_progress("digest", at(HOUR), 5, 0, 0, conn)
    [tick] = schedules.ticks("digest")
    assert (tick.jobs_created, tick.jobs_existing, tick.conflicts) == (15, 2, 1)


def test_ticks_are_listed_newest_first_by_schedule_state_and_time(backend, lease):
    schedules = backend.schedules
    schedules.declare([definition(), definition("cleanup")], lease, now=T0)
    for hour in (1, 2, 3):
        schedules.tick_start("digest", at(hour * HOUR), lease, now=at(hour * HOUR))
    schedules.tick_start("cleanup", at(2 * HOUR), lease, now=at(2 * HOUR))
    schedules.tick_finish("digest", at(HOUR), lease, now=at(HOUR + 1))
    every = schedules.ticks()
    assert [(t.schedule, t.tick_time) for t in every] == [
        ("digest", at(3 * HOUR)),
        ("cleanup", at(2 * HOUR)),
        ("digest", at(2 * HOUR)),
        ("digest", at(HOUR)),
    ]
    assert [t.tick_time for t in schedules.ticks("digest", limit=2)] == [at(3 * HOUR), at(2 * HOUR)]
    assert [t.tick_time for t in schedules.ticks("digest", state=TickState.DONE)] == [at(HOUR)]
    assert [t.tick_time for t in schedules.ticks("digest", after=at(HOUR))] == [
        at(3 * HOUR),
        at(2 * HOUR),
    ]
    assert schedules.ticks("nothing") == []


def test_tick_prune_deletes_only_finished_ticks_behind_the_cursor_and_the_cut_off(backend, lease):
    schedules = backend.schedules
    schedules.declare([definition()], lease, now=T0)
    for hour in (1, 2, 3, 4):
        schedules.tick_start("digest", at(hour * HOUR), lease, now=at(hour * HOUR))
    for hour in (1, 2, 3):
        schedules.tick_finish("digest", at(hour * HOUR), lease, now=at(hour * HOUR))
    # The cursor is at hour 3: hour 3 is not behind it; hour 4 is still running.
    assert schedules.tick_prune(before=at(10 * HOUR), limit=1) == 1
    assert schedules.tick_prune(before=at(10 * HOUR)) == 1
    assert schedules.tick_prune(before=at(10 * HOUR)) == 0
    assert [t.tick_time for t in schedules.ticks()] == [at(4 * HOUR), at(3 * HOUR)]
    schedules.tick_start("digest", at(5 * HOUR), lease, now=at(5 * HOUR))
    schedules.tick_finish("digest", at(5 * HOUR), lease, now=at(5 * HOUR))
    # Behind the cursor now, but not before the cut-off: kept.
    assert schedules.tick_prune(before=at(3 * HOUR)) == 0
    assert schedules.tick_prune(before=at(3 * HOUR + 1)) == 1


def test_tick_prune_keeps_a_tick_that_never_finished_even_behind_the_cursor(backend, lease):
    """A tick whose run stopped half-way (its scheduler died; its error, if any, recorded) stays
    for an operator to see, after later ticks moved the cursor past it."""
    schedules = backend.schedules
    schedules.declare([definition()], lease, now=T0)
    for hour in (1, 2, 3):
        schedules.tick_start("digest", at(hour * HOUR), lease, now=at(hour * HOUR))
    for hour in (2, 3):
        schedules.tick_finish("digest", at(hour * HOUR), lease, now=at(hour * HOUR))
    assert schedules.tick_prune(before=at(10 * HOUR)) == 1  # hour 2
    [last, stopped] = schedules.ticks()
    assert (last.tick_time, stopped.tick_time, stopped.state) == (at(3 * HOUR), at(HOUR), "running")


def test_a_schedule_keeps_its_pause_when_declared_again(backend, lease):
    schedules = backend.schedules
    schedules.declare([definition()], lease, now=T0)
    schedules.pause("digest", True, "ops:ana", "hold", now=at(1))
    schedules.declare([replace(definition(), max_catch_up=3)], lease, now=at(2))
    [row] = schedules.all()
    assert row.paused and row.pause_note == "hold" and row.max_catch_up == 3
