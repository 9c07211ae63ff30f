"""The maintenance layer on every backend: the one leader election, the pruner, the rescuer."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobledger import JobState, LeadershipLost, Ledger
from jobledger._records import MinuteStats
from jobledger._services.keys import create_api_key
from jobledger.maintenance.leader import LeaderElection
from jobledger.maintenance.pruner import KEEP_IDLE_GROUPS, KEEP_ROLLUPS, Pruner

from .conftest import T0, at, enqueue, lease_of

LEASE = 30.0


def election(ledger: Ledger, holder: str, clock: list) -> LeaderElection:
    return LeaderElection(
        lambda: ledger.backend.leader, "test:one", holder, LEASE, lambda: clock[0]
    )


def test_one_holder_at_a_time_and_a_standby_takes_over_only_after_expiry(ledger):
    clock = [T0]
    a, b = election(ledger, "a", clock), election(ledger, "b", clock)
    first = a.hold()
    assert first is not None and first.holder == "a" and a.leading
    assert b.hold() is None and not b.leading
    clock[0] = at(LEASE / 3 + 1)  # a third through: the holder renews, the term stays
    renewed = a.hold()
    assert renewed is not None and renewed.term == first.term and renewed.until > first.until
    clock[0] = at(LEASE / 3 + 1 + LEASE - 1)  # still valid: the standby waits
    assert b.hold() is None
    clock[0] = at(LEASE / 3 + 1 + LEASE + 1)  # expired: the standby takes it, term + 1
    taken = b.hold()
    assert taken is not None and taken.holder == "b" and taken.term == first.term + 1
    with pytest.raises(LeadershipLost):
        a.keep()
    assert not a.leading


def test_a_standby_reads_before_it_tries(ledger):
    """Standbys poll every pass; while the lease is valid they only read it."""
    clock = [T0]
    a, b = election(ledger, "a", clock), election(ledger, "b", clock)
    a.hold()
    calls = []
    store = ledger.backend.leader

    class Spy:
        def __getattr__(self, name):
            calls.append(name)
            return getattr(store, name)

    spied = LeaderElection(lambda: Spy(), "test:one", "c", LEASE, lambda: clock[0])
    for _ in range(3):
        assert spied.hold() is None
    assert calls == ["leases"] * 3
    assert b.hold() is None


def test_the_fence_refuses_a_write_after_the_lease_moved(ledger, tasks):
    clock = [T0]
    a, b = election(ledger, "a", clock), election(ledger, "b", clock)
    a.hold()
    backend = ledger.backend
    with backend.transaction() as conn:
        a.fence(conn)  # held: the fenced write goes through
        enqueue(ledger, 1, conn=conn)
    clock[0] = at(LEASE + 1)
    assert b.hold() is not None
    with pytest.raises(LeadershipLost), backend.transaction() as conn:
        a.fence(conn)
        enqueue(ledger, 2, conn=conn)
    assert [j.key for j in ledger.jobs()] == ["k1"]


def test_release_hands_over_at_once(ledger):
    clock = [T0]
    a, b = election(ledger, "a", clock), election(ledger, "b", clock)
    first = a.hold()
    a.release()
    taken = b.hold()
    assert first is not None and taken is not None and taken.term == first.term + 1


def test_the_pruner_prunes_old_rollups_expired_sessions_and_tombstones_under_one_lease(
    ledger, tasks
):
    backend = ledger.backend
    now = T0 + timedelta(days=3)
    old, recent = T0, now - timedelta(minutes=5)
    backend.stats.minutes_add(
        [MinuteStats(minute=m, queue="q", task="work", claimed=1) for m in (old, recent)]
    )
    _, key = create_api_key(backend, "dash", ["read"])
    backend.api.session_insert("gone", key.id, 60, T0)
    backend.api.session_insert("live", key.id, 7 * 86400, now)
    enqueue(ledger, 1)
    [claimed] = backend.jobs.claim(["q"], "w", 1, at(1))
    backend.jobs.complete([lease_of(claimed)], at(2))
    ledger.prune(older_than=timedelta(seconds=1), keep_keys=timedelta(hours=1), now=at(10))
    assert backend.history.tombstones("k1")

    first = Pruner(lambda: backend, "p1")
    second = Pruner(lambda: backend, "p2")
    pruned = first.run_once(now=now)
    assert pruned is not None
    assert (pruned.rollups, pruned.sessions, pruned.tombstones) == (1, 1, 1)
    assert second.run_once(now=now) is None  # the other holds the lease: nothing done twice
    assert [r.minute for r in backend.stats.minutes(T0 - timedelta(days=1))] == [recent]
    assert backend.api.session_get("live", now) is not None
    assert backend.history.tombstones("k1") == []
    assert now - KEEP_ROLLUPS > old


def test_the_pruner_deletes_the_rows_of_idle_groups_only(ledger, tasks):
    """A group's row (pause, rate bucket, turn) goes once the group has had no job, no pause and
    no claim for a day; a group with a job waiting or running, a pause in force or a recent
    claim keeps it."""
    backend = ledger.backend
    ledger.set_group_limits("q", rate=1.0, burst=2)
    groups = ["idle", "waiting", "busy", "running"]
    ids = {g: enqueue(ledger, n, group=g) for n, g in enumerate(groups)}
    # Every group is claimed (its row written) at T0; "idle" is done then, "waiting" released,
    # and "running"'s job is still leased a day later (its lease renewed all along).
    for job in backend.jobs.claim(["q"], "w", 10, now=at(1)):
        if job.id == ids["waiting"]:
            backend.jobs.release([lease_of(job)], at(2))
        elif job.id == ids["running"]:
            running = job
        else:
            backend.jobs.complete([lease_of(job)], at(2))
    later = T0 + KEEP_IDLE_GROUPS + timedelta(hours=1)
    ledger.pause_group("q", "paused", until=later + timedelta(days=1), reason="429", now=T0)
    enqueue(ledger, 9, group="busy", now=later - timedelta(minutes=1))
    [served] = backend.jobs.claim(["q"], "w", 1, now=later - timedelta(seconds=30))
    assert served.group == "busy"
    backend.jobs.complete([lease_of(served)], later - timedelta(seconds=20))
    assert backend.jobs.heartbeat([lease_of(running)], now=later - timedelta(seconds=10))

    assert _group_rows(ledger) == {"idle", "waiting", "busy", "running", "paused"}

    pruner = Pruner(lambda: backend, "p1")
    pruned = pruner.run_once(now=later)
    assert pruned is not None and pruned.groups == 1
    assert _group_rows(ledger) == {"waiting", "busy", "running", "paused"}
    assert ledger.job(ids["running"]).state is JobState.LEASED
    again = pruner.run_once(now=later)
    assert again is not None and again.groups == 0


def _group_rows(ledger: Ledger) -> set[str]:
    """The groups of queue "q" that have a row, read from the table itself."""
    backend = ledger.backend
    table = "jobledger_groups"
    if backend.dialect == "postgres":
        table = f'"{backend.schema}".{table}'  # type: ignore[attr-defined]
    with backend.transaction() as c:
        return {r[0] for r in c.execute(f"SELECT name FROM {table} WHERE queue = 'q'")}


def test_one_rescuer_for_every_transport(ledger, tasks):
    """The rescuer the server, push and workers run closes any holder's expired lease."""
    enqueue(ledger, 1)
    backend = ledger.backend
    backend.jobs.claim(["q"], "http:key", 1, at(1))
    rescued = ledger.rescuer().run_once(at(1 + 31))
    assert [(r.key, r.state) for r in rescued] == [("k1", JobState.PENDING)]


def test_a_failing_rescue_observer_neither_stops_the_rescue_nor_hides_what_it_rescued(
    ledger, tasks, caplog
):
    # An observer is a metrics or logging hook: its bug must not turn a rescue that happened
    # into an error, or leave the expiries it was told of unreported in the logs.
    def broken(results):
        raise RuntimeError("observer bug")

    enqueue(ledger, 1)
    ledger.backend.jobs.claim(["q"], "w", 1, at(1))
    with caplog.at_level("WARNING", logger="jobledger"):
        rescued = ledger.rescuer(on_rescue=broken).run_once(at(1 + 31))
    assert [(r.key, r.state) for r in rescued] == [("k1", JobState.PENDING)]
    assert "rescue observer failed" in caplog.text and "lease expired: job" in caplog.text
