"""Groups: per-group leased limit and rate, enforced by the claim; fair claiming round the
groups; a group paused as a whole. The same cases on every backend, on the suite's clock."""

from __future__ import annotations

import math
from collections import Counter
from datetime import UTC, datetime

import pytest

from jobledger import ConfigError, JobState, Ledger, PayloadError, Retry
from jobledger._records import MAX_LEASED, MAX_RATE, MIN_RATE, Failure, GroupLimits

from .conftest import T0, at, lease_of


@pytest.fixture
def work(ledger: Ledger):
    @ledger.task(queue="q", max_attempts=5, lease_seconds=30, group="{tenant}")
    def work(ctx, tenant: str, n: int = 0) -> None:
        pass

    return work


def put(ledger: Ledger, tenant: str, count: int, *, now=T0, start: int = 0, **kw) -> list[int]:
    return [
        ledger.enqueue("work", {"tenant": tenant, "n": n}, key=f"{tenant}:{n}", now=now, **kw)[0]
        for n in range(start, start + count)
    ]


def claim(ledger: Ledger, limit: int, now=T0, worker: str = "w1"):
    return ledger.backend.jobs.claim(["q"], worker, limit, now)


def test_a_job_carries_its_group_from_enqueue_or_from_the_task_rule(api, work):
    by_rule = put(api, "acme", 1)[0]
    given, _ = api.enqueue(work, {"tenant": "acme", "n": 9}, key="x", group="other", now=T0)
    plain, _ = api.enqueue("untyped", {}, key="y", queue="q", now=T0)
    assert api.job(by_rule).group == "acme"
    assert api.job(given).group == "other"
    assert api.job(plain).group is None
    claimed = {j.id: j.group for j in claim(api, 10)}
    assert claimed == {by_rule: "acme", given: "other", plain: None}


@pytest.mark.parametrize("bad", ["", "x" * 201, "a\nb", 7])
def test_a_bad_group_is_refused_and_nothing_is_written(api, work, bad):
    with pytest.raises(PayloadError):
        api.enqueue(work, {"tenant": "t"}, key="k", group=bad, now=T0)
    assert api.jobs() == []


def test_a_group_of_exactly_200_characters_is_accepted(api, work):
    # The limit is inclusive: the longest group the docs allow must be stored as given.
    longest = "g" * 200
    job_id, _ = api.enqueue(work, {"tenant": "t"}, key="k", group=longest, now=T0)
    assert api.job(job_id).group == longest


def test_bad_limits_are_refused(api):
    for kwargs in ({"max_leased": 0}, {"rate": -1}, {"rate": 1, "burst": 0.5}, {"burst": 3}):
        with pytest.raises(ConfigError):
            api.set_group_limits("q", **kwargs)


def test_group_limits_at_their_bounds_are_kept_and_past_them_refused(api):
    """The slowest rate (one job in about 11.6 days), a burst of one job and one leased job are
    limits a queue may have; a rate below that, or a limit that is a bool, an infinity or
    NaN, is refused and leaves the limits as they were."""
    kept = api.set_group_limits("q", max_leased=1, rate=MIN_RATE, burst=1)
    assert kept == GroupLimits(1, MIN_RATE, 1) and api.group_limits("q") == kept
    for kwargs in (
        {"rate": MIN_RATE / 2},
        {"rate": math.inf},
        {"rate": math.nan},
        {"rate": True},
        {"max_leased": True},
        {"rate": 1, "burst": math.inf},
        {"max_leased": MAX_LEASED + 1},
        {"max_leased": 2**70},
        {"rate": MAX_RATE * 2},
        {"rate": 1, "burst": MAX_RATE * 2},
    ):
        with pytest.raises(ConfigError):
            api.set_group_limits("q", **kwargs)
    assert api.group_limits("q") == kept
    # The largest are limits too (what the HTTP API accepts, and a count the column holds).
    largest = api.set_group_limits("q", max_leased=MAX_LEASED, rate=MAX_RATE, burst=MAX_RATE)
    assert api.group_limits("q") == largest == GroupLimits(MAX_LEASED, MAX_RATE, MAX_RATE)


def test_leased_jobs_per_group_never_exceed_the_limit(api, work):
    api.set_group_limits("q", max_leased=2)
    put(api, "hot", 10)
    put(api, "cold", 1)
    first = claim(api, 10)
    assert Counter(j.group for j in first) == {"hot": 2, "cold": 1}
    assert claim(api, 10, worker="w2") == [], "another worker gets no more of a full group"
    done = next(j for j in first if j.group == "hot")
    assert api.backend.jobs.complete([lease_of(done)], at(1)) == []
    again = claim(api, 10, at(1))
    assert [j.group for j in again] == ["hot"], "one slot freed, one job"


def test_a_group_at_its_leased_limit_does_not_take_the_turn_of_a_group_with_room(api, work):
    """A claim passes over a group whose slots are all leased: that group, first in the order
    of the turns, does not fill a claim of one, and the next group with room is served."""
    api.set_group_limits("q", max_leased=1)
    put(api, "a", 2)
    put(api, "b", 2)
    [first] = claim(api, 1)
    [second] = claim(api, 1, at(1))
    assert (first.group, second.group) == ("a", "b")
    assert api.backend.jobs.complete([lease_of(second)], at(2)) == []
    # "a" was served longest ago, but its one slot is taken: "b" gets the claim.
    [third] = claim(api, 1, at(3))
    assert third.group == "b"


def test_a_claim_from_its_position_leaves_grouped_jobs_to_the_grouped_claim(api, work):
    """On PostgreSQL a worker's next claim starts past the jobs it has taken (its position);
    the lower priorities it reads from there are jobs without a group only: a group's jobs
    are taken by the grouped claim, within the group's leased limit."""
    api.set_group_limits("q", max_leased=1)
    api.enqueue("untyped", {}, key="p1", queue="q", priority=5, now=T0)
    put(api, "g", 2)
    put(api, "h", 2, priority=5)  # at the position's priority, after it
    api.enqueue("untyped", {}, key="p2", queue="q", now=T0)
    assert [j.key for j in claim(api, 1)] == ["p1"]
    assert sorted(j.key for j in claim(api, 10, at(1))) == ["g:0", "h:0", "p2"]


def test_limits_set_or_lifted_between_claims_hold_from_the_next_claim(api, work):
    """On PostgreSQL a queue without limits is claimed in one statement and a queue with limits
    in two (the slots counted under the groups' locks): limits set after claims of the first
    kind bind the very next claim, and lifted, stop binding it."""
    put(api, "hot", 10)
    assert len(claim(api, 2)) == 2
    api.set_group_limits("q", max_leased=3)
    assert len(claim(api, 10, worker="w2")) == 1, "two leased, one slot left"
    assert claim(api, 10, worker="w3") == []
    api.set_group_limits("q")
    assert len(claim(api, 10, worker="w4")) == 7


def test_a_group_rate_is_a_token_bucket_per_group(api, work):
    api.set_group_limits("q", rate=2, burst=2)
    put(api, "a", 20)
    put(api, "b", 20)
    assert Counter(j.group for j in claim(api, 20)) == {"a": 2, "b": 2}  # full buckets
    assert claim(api, 20) == []
    assert Counter(j.group for j in claim(api, 20, at(0.5))) == {"a": 1, "b": 1}
    assert claim(api, 20, at(0.9)) == []  # 0.8 of a token each
    # A long idle spell refills to the burst, no further.
    assert Counter(j.group for j in claim(api, 20, at(60))) == {"a": 2, "b": 2}


def test_a_claim_whose_clock_is_behind_the_last_refill_sees_the_tokens_left(api, work):
    """Workers' clocks differ a little: a claim at a time before the group's last refill sees
    the tokens that refill left (no refill for the time between, and none taken away), the
    same as a claim at the refill's own time."""
    api.set_group_limits("q", rate=1, burst=2)
    put(api, "a", 5, now=at(-10))
    assert len(claim(api, 1)) == 1  # the bucket: 2 tokens, 1 left, refilled at T0
    assert [j.group for j in claim(api, 10, at(-0.5))] == ["a"]  # the one token left
    assert claim(api, 10, at(-0.5)) == []


def test_a_rate_below_one_a_second_without_a_burst_holds_one_job(api, work):
    """A rate of one job every two seconds, no burst given: the bucket holds one token, so a
    group's first job goes at once and the next one two seconds later."""
    api.set_group_limits("q", rate=0.5)
    put(api, "a", 3)
    assert [j.group for j in claim(api, 10)] == ["a"]
    assert claim(api, 10, at(1)) == []
    assert [j.group for j in claim(api, 10, at(2))] == ["a"]


def test_fair_claiming_takes_one_job_per_group_per_round(api, work):
    put(api, "flood", 500)
    cold = [f"c{i}" for i in range(10)]
    for tenant in cold:
        put(api, tenant, 10, now=at(1))
    batch = claim(api, 11, at(2))
    assert Counter(j.group for j in batch) == dict.fromkeys(["flood", *cold], 1)
    # One job per claim: every group gets its turn before any group gets a second one.
    turns = [claim(api, 1, at(3))[0].group for _ in range(11)]
    assert sorted(turns) == sorted(["flood", *cold])


def test_a_claim_over_uneven_groups_takes_every_due_job_round_by_round(api, work):
    """A claim reads each group for its share of the claim first; groups with fewer jobs
    than that leave room, which the others fill, still one job per group per round."""
    deep = put(api, "deep", 8)
    put(api, "one", 1)
    put(api, "two", 2)
    batch = claim(api, 9, at(1))  # a share of 3 each: 3 + 1 + 2, then the deep group's rest
    assert Counter(j.group for j in batch) == {"deep": 6, "one": 1, "two": 2}
    assert {j.id for j in batch if j.group == "deep"} == set(deep[:6])
    assert claim(api, 9, at(1)) and not claim(api, 9, at(1))


def test_a_cold_group_is_served_by_the_next_claim_however_busy_a_hot_group_is(api, work):
    put(api, "flood", 300)
    for _ in range(5):
        assert [j.group for j in claim(api, 10, at(1))] == ["flood"] * 10
    put(api, "quiet", 1, now=at(2))
    assert "quiet" in [j.group for j in claim(api, 10, at(2))]
    # Even a claim of one job goes to the group served least recently.
    assert [j.group for j in claim(api, 10, at(2.5))] == ["flood"] * 10
    put(api, "quiet", 1, now=at(3), start=1)
    assert [j.group for j in claim(api, 1, at(3))] == ["quiet"]


def test_jobs_without_a_group_and_groups_share_a_claim(api, work):
    for n in range(20):
        api.enqueue("plain", {"n": n}, key=f"p{n}", queue="q", now=T0)
    put(api, "g", 20)
    batch = claim(api, 10)
    assert Counter(j.group for j in batch) == {None: 5, "g": 5}
    singles = [claim(api, 1)[0].group for _ in range(4)]
    assert Counter(singles) == {None: 2, "g": 2}, "one job per claim alternates"
    # A side with nothing due leaves the whole batch to the other.
    put(api, "late", 5, now=T0)
    api.pause_group("q", "g", seconds=60, now=T0)
    api.pause_group("q", "late", seconds=60, now=T0)
    assert Counter(j.group for j in claim(api, 8)) == {None: 8}


@pytest.mark.parametrize("limits", [{}, {"max_leased": 10}])
def test_a_group_pause_holds_for_every_worker_until_it_ends(api, work, limits):
    """With or without group limits (on PostgreSQL, a claim in one statement or in two)."""
    api.set_group_limits("q", **limits)
    put(api, "throttled", 5)
    put(api, "fine", 5)
    [job] = [j for j in claim(api, 2) if j.group == "throttled"]
    # The attempt asked to pause its group (Retry(after=30, scope="group")).
    failure = Failure(lease_of(job), True, at(30), "Retry", "HTTP 429", None, at(30))
    [result] = api.backend.jobs.fail([failure], at(0))
    assert result.state is not None
    for worker in ("w1", "w2", "w3"):
        assert {j.group for j in claim(api, 10, at(29), worker)} <= {"fine"}
    status = {g.name: g for g in api.groups("q", at(29))}
    assert status["throttled"].paused_until == at(30)
    assert "HTTP 429" in (status["throttled"].paused_reason or "")
    assert status["throttled"].pending == 5 and status["throttled"].leased == 0
    resumed = claim(api, 10, at(30))
    assert Counter(j.group for j in resumed)["throttled"] == 5


def test_a_pause_only_extends_and_an_operator_can_lift_it(api, work):
    put(api, "g", 2)
    assert api.pause_group("q", "g", seconds=60, reason="HTTP 429", now=T0) == at(60)
    assert api.pause_group("q", "g", seconds=10, reason="shorter", now=T0) == at(60)
    # The pause in force keeps its own reason: the shorter one changed nothing.
    [status] = api.groups("q", at(1))
    assert (status.paused_until, status.paused_reason) == (at(60), "HTTP 429")
    assert claim(api, 5, at(30)) == []
    assert api.resume_group("q", "g", now=at(30)) is True
    assert api.resume_group("q", "g", now=at(30)) is False
    assert len(claim(api, 5, at(30))) == 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "pause_group needs until= or seconds=, one of them"),
        ({"seconds": 60, "until": at(60)}, "pause_group needs until= or seconds=, one of them"),
        ({"seconds": 0}, "seconds must be a finite number > 0, got 0"),
        ({"seconds": -5}, "seconds must be a finite number > 0, got -5"),
        ({"seconds": math.nan}, "seconds must be a finite number > 0, got nan"),
        ({"seconds": math.inf}, "seconds must be a finite number > 0, got inf"),
        ({"seconds": True}, "seconds must be a finite number > 0, got True"),
        ({"seconds": "60"}, "seconds must be a finite number > 0, got '60'"),
        ({"seconds": 1e300}, "seconds must come no later than 9999-12-30 (UTC), the latest"),
        ({"seconds": 1e12}, "seconds must come no later than 9999-12-30 (UTC), the latest"),
        (
            {"until": datetime.max.replace(tzinfo=UTC)},
            "until must come no later than 9999-12-30 (UTC), the latest time the ledger keeps",
        ),
        (
            {"until": T0.replace(tzinfo=None)},
            "until must be an aware datetime (with a time zone), got datetime",
        ),
        (
            {"until": "2026-08-10"},
            "until must be an aware datetime (with a time zone), got '2026-08-10'",
        ),
    ],
)
def test_a_pause_without_a_finite_end_is_refused_and_pauses_nothing(api, work, options, message):
    """A pause needs one end, in the future and in reach: a number of seconds (not a bool,
    not a NaN) or an aware datetime. Anything else is a ConfigError that says so, and the group
    is left as it was."""
    put(api, "g", 1)
    with pytest.raises(ConfigError) as err:
        api.pause_group("q", "g", now=T0, **options)
    assert str(err.value).startswith(message)
    [status] = api.groups("q", T0)
    assert status.paused_until is None
    assert len(claim(api, 5, T0)) == 1


def test_groups_show_pending_due_leased_and_pause(api, work):
    api.set_group_limits("q", max_leased=1, rate=10)
    put(api, "a", 3)
    put(api, "b", 2, now=at(100), delay=50)
    claim(api, 5)
    api.pause_group("q", "z", seconds=5, now=T0)
    status = {g.name: g for g in api.groups("q", T0)}
    assert set(status) == {"a", "b", "z"}
    a = status["a"]
    assert (a.pending, a.due, a.leased, a.paused_until) == (2, 2, 1, None)
    assert a.served_at is not None and a.tokens == pytest.approx(9)
    b = status["b"]
    assert (b.pending, b.due, b.leased) == (2, 0, 0)
    assert status["z"].paused_until == at(5) and status["z"].pending == 0
    assert api.group_limits("q").max_leased == 1
    api.set_group_limits("q")
    assert api.group_limits("q").unlimited


def test_a_retry_with_group_scope_pauses_the_group_from_a_real_worker(api):
    calls: list[str] = []

    @api.task(queue="q", group="{tenant}")
    def call(ctx, tenant: str, n: int) -> None:
        calls.append(tenant)
        if tenant == "throttled":
            raise Retry("HTTP 429", after=3600, scope="group")

    for tenant in ("throttled", "fine"):
        for n in range(3):
            api.enqueue(call, {"tenant": tenant, "n": n}, key=f"{tenant}{n}")
    api.set_group_limits("q", max_leased=1)
    api.run_worker(queues=["q"], concurrency=1, burst=True)
    assert calls.count("throttled") == 1, "the pause stopped the group's other jobs"
    assert calls.count("fine") == 3
    [paused] = [g for g in api.groups("q") if g.name == "throttled"]
    assert paused.paused_until is not None and paused.pending == 3


def test_a_group_pause_asked_by_a_job_without_a_group_is_a_plain_retry(api, tasks):
    """Retry(scope="group") from a job that has no group pauses nothing (there is no group to
    pause); the failure is recorded as any retry is."""
    job_id = api.enqueue("work", {"n": 1}, key="k1", now=T0).id
    [job] = api.backend.jobs.claim(["q"], "w", 1, now=T0)
    failure = Failure(lease_of(job), True, at(30), "Retry", "HTTP 429", None, at(60))
    [result] = api.backend.jobs.fail([failure], now=at(1))
    assert result.state is JobState.PENDING
    assert api.job(job_id).run_at == at(30)
    assert api.groups("q", at(1)) == []


def test_retry_scope_needs_a_time():
    with pytest.raises(ValueError):
        Retry("x", scope="group")
    with pytest.raises(ValueError):
        Retry("x", after=3, scope="tenant")  # type: ignore[arg-type]


def test_a_claim_by_key_skips_a_paused_group_and_says_until_when(api, work):
    put(api, "g", 2)
    put(api, "free", 1)
    api.pause_group("q", "g", seconds=60, now=T0)
    wanted = [("q", "g:0"), ("q", "free:0"), ("q", "g:1")]
    paused, free, other = api.backend.jobs.claim_keys(wanted, "consumer", at(1))
    assert free.job is not None and free.paused_until is None
    for claim_ in (paused, other):
        assert claim_.job is None and claim_.paused_until == at(60)
        assert claim_.current is not None and claim_.current.state.value == "pending"
    [later] = api.backend.jobs.claim_keys([("q", "g:0")], "consumer", at(60))
    assert later.job is not None and later.job.group == "g"


def test_a_group_rule_that_gives_none_leaves_the_job_without_a_group(api):
    api.task(
        lambda ctx, tenant=None: None, name="maybe", queue="q", group=lambda p: p.get("tenant")
    )
    grouped, _ = api.enqueue("maybe", {"tenant": "acme"}, key="a", now=T0)
    plain, _ = api.enqueue("maybe", {}, key="b", now=T0)
    assert api.job(grouped).group == "acme"
    assert api.job(plain).group is None


def test_jobs_can_be_listed_by_group(api, work):
    from jobledger._records import JobFilter

    acme = put(api, "acme", 2)
    put(api, "globex", 1)
    api.enqueue("untyped", {}, key="plain", queue="q", now=T0)
    assert [j.id for j in api.jobs(JobFilter(group="acme"))] == acme
    assert api.jobs(JobFilter(group="nobody")) == []
    assert len(api.jobs(JobFilter(queue="q"))) == 4


def test_a_due_group_behind_many_idle_groups_rows_is_still_found(api, work):
    """A claim walks the groups' rows in the order of their turns and stops after a few times
    its batch; rows of groups without jobs (kept for a day) that come first do not hide a group
    with due jobs behind them."""
    for n in range(100):
        put(api, f"idle{n:03d}", 1)
    put(api, "late", 2)
    # Serve "late" last of all, then let every other group run dry.
    batch = claim(api, 101, at(1))
    assert len(batch) == 101
    api.backend.jobs.complete([lease_of(j) for j in batch if j.group != "late"], at(2))
    assert [j.group for j in claim(api, 1, at(3))] == ["late"]


def test_behind_many_idle_groups_rows_a_group_with_nothing_due_does_not_take_the_turn(api, work):
    """When the walk of the turns stops short (many rows of groups without jobs ahead) and the
    claim finds every group with pending jobs instead, a group whose jobs are not due yet,
    never served, does not take the place of a due group served later."""
    for n in range(100):
        put(api, f"idle{n:03d}", 1)
    api.backend.jobs.complete([lease_of(j) for j in claim(api, 100, at(1))], at(1))
    put(api, "z-due", 2, now=at(1))
    [served] = claim(api, 1, at(2))
    api.backend.jobs.complete([lease_of(served)], at(2))
    put(api, "a-future", 1, now=at(2), delay=3600)
    assert [j.group for j in claim(api, 1, at(3))] == ["z-due"]


def test_a_group_pruned_while_it_had_only_dead_jobs_is_claimed_again_after_a_redrive(api, work):
    [job_id] = put(api, "gone", 1)
    [job] = claim(api, 1, at(1))
    api.backend.jobs.fail([Failure(lease_of(job), False, None, "HTTP 400", "no")], at(2))
    # A week later the group's row is pruned (no pending or leased job, idle for a day).
    assert api.backend.groups.prune_idle(86_400, at(7 * 86_400)) >= 1
    api.redrive(actor="ops", reason="fixed", ids=[job_id], now=at(7 * 86_400))
    assert [j.id for j in claim(api, 1, at(7 * 86_400 + 1))] == [job_id]
