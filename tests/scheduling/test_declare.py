"""Declaring schedules: everything is checked when the schedule is declared; keys and payloads
are derived the same way in every process; the catch-up plan is a pure function."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobledger import CatchUp, ConfigError, Ledger, Schedule, TaskTarget


@pytest.fixture
def led(tmp_path) -> Ledger:
    # Declaring touches no database: the ledger is never opened in these tests.
    return Ledger(f"sqlite:///{tmp_path}/never-opened.db")


def test_a_schedule_on_a_task_uses_the_tasks_name_and_a_weekly_key(led):
    @led.schedule("0 6 * * MON", tz="Europe/Berlin")
    @led.task(queue="digests")
    def weekly_digest(ctx, tick: str) -> None: ...

    [schedule] = list(led.schedules)
    assert schedule.name == "weekly_digest" and schedule.cron == "0 6 * * MON"
    assert schedule.key_template == "{schedule}:{week}"
    tick = schedule.tick(datetime(2026, 8, 10, 4, 0, tzinfo=UTC))
    assert schedule.key_for(tick) == "weekly_digest:2026-W33"
    assert schedule.target.payload(tick, None) == {"tick": "2026-08-10T04:00Z"}
    assert schedule.target.label == "task weekly_digest → queue digests"
    assert led.get_task("weekly_digest") is not None
    assert led.worker_services, "declaring a schedule makes workers run the scheduler"


@pytest.mark.parametrize(
    "cron,template",
    [
        ("0 6 1 1 *", "{schedule}:{year}"),
        ("0 6 1 * *", "{schedule}:{month}"),
        ("0 6 * * MON", "{schedule}:{week}"),
        ("0 6 * * MON,THU", "{schedule}:{date}"),
        ("0 6 * * *", "{schedule}:{date}"),
        ("0 * * * *", "{schedule}:{tick}"),
        ("*/5 * * * *", "{schedule}:{tick}"),
    ],
)
def test_the_default_key_is_the_coarsest_label_that_tells_ticks_apart(led, cron, template):
    schedule = Schedule("s", cron, target=TaskTarget("some.task"))
    assert schedule.key_template == template


def test_fan_out_keys_are_entity_and_period(led):
    @led.schedule(
        "0 6 * * MON",
        tz="Europe/Berlin",
        for_each=lambda tick: [4187],
        payload=lambda tick, customer: {"customer_id": customer, "week": tick.week},
    )
    @led.task(queue="digests")
    def send_digest(ctx, customer_id: int, week: str) -> None: ...

    schedule = led.schedules.get("send_digest")
    tick = schedule.tick(datetime(2026, 8, 10, 4, 0, tzinfo=UTC))
    assert schedule.key_for(tick, 4187) == "4187:2026-W33"
    assert schedule.target.payload(tick, 4187) == {"customer_id": 4187, "week": "2026-W33"}


def test_tick_labels_use_the_local_date():
    schedule = Schedule("s", "30 0 * * MON", target=TaskTarget("t"), tz="Europe/Berlin")
    # Monday 00:30 in Berlin is still Sunday in UTC.
    tick = schedule.tick(datetime(2026, 8, 9, 22, 30, tzinfo=UTC))
    assert tick.date == "2026-08-10" and tick.week == "2026-W33"
    assert tick.iso == "2026-08-09T22:30Z"
    assert tick.labels()["local"] == "2026-08-10T00:30+02:00"


@pytest.mark.parametrize(
    "options,message",
    [
        ({"cron": "0 6 * * MOX"}, "Bad day-of-week"),
        ({"tz": "Europe/Berln"}, "unknown time zone 'Europe/Berln'"),
        ({"catch_up": "sometimes"}, "catch_up must be one of skip, latest, all"),
        ({"max_catch_up": 0}, "max_catch_up must be a whole number from 1 to 10000"),
        ({"grace": -1}, "grace must be >= 0"),
        ({"batch_size": 0}, "batch_size must be a whole number"),
        ({"name": "no spaces please"}, "schedule name 'no spaces please' is invalid"),
        ({"cohort": ""}, "cohort '' is invalid"),
        ({"key": "{customer}:{week}"}, "unknown field(s) customer"),
        ({"key": "digest:{week"}, "key template"),
        ({"key": "digest:{entity}"}, "no for_each"),
        ({"key": "digest:{week}", "cron": "0 6 * * *"}, "the same key"),
        ({"for_each": lambda tick: [], "key": "x:{week}"}, "needs {entity}"),
        ({"payload": {"tick": float("nan")}}, "not valid JSON"),
        ({"payload": {"other": 1}}, "does not accept the payload"),
    ],
)
def test_bad_declarations_are_refused_with_a_clear_message(led, options, message):
    options = dict(options)
    cron = options.pop("cron", "0 6 * * MON")

    with pytest.raises(ConfigError) as info:

        @led.schedule(cron, **options)
        @led.task(queue="digests")
        def digest(ctx, tick: str) -> None: ...

    assert message in str(info.value)
    assert len(led.schedules) == 0


@pytest.mark.parametrize("options", [{"cron": "0 6 * *"}, {"key": "x:{date"}, {"grace": -1}])
def test_a_refused_schedule_on_a_plain_function_registers_nothing(led, options):
    options = dict(options)
    cron = options.pop("cron", "0 6 * * *")
    with pytest.raises(ConfigError):

        @led.schedule(cron, **options)
        def nightly(ctx, tick: str) -> None: ...

    assert led.tasks() == [] and len(led.schedules) == 0 and led.worker_services == []


def test_the_default_payload_must_fit_the_handler(led):
    with pytest.raises(ConfigError, match=r"does not accept the payload its ticks would carry"):

        @led.schedule("0 6 * * MON", for_each=lambda tick: [1])
        @led.task
        def send(ctx, customer_id: int) -> None: ...

    @led.schedule("0 6 * * MON", for_each=lambda tick: [1], name="send-ok")
    @led.task(name="send2")
    def send2(ctx, entity: int, tick: str) -> None: ...

    assert "send-ok" in led.schedules


def test_two_schedules_that_would_share_keys_in_a_queue_are_refused(led):
    @led.task(queue="digests")
    def digest(ctx, tick: str = "", entity: int = 0) -> None: ...

    led.schedule("0 6 * * MON", name="a", for_each=lambda t: [1])(digest)
    with pytest.raises(ConfigError, match="would give the same keys"):
        led.schedule("0 7 * * MON", name="b", for_each=lambda t: [1])(digest)
    led.schedule("0 7 * * MON", name="c", for_each=lambda t: [1], key="c:{entity}:{week}")(digest)
    with pytest.raises(ConfigError, match="already declared"):
        led.schedule("0 8 * * MON", name="c", key="c2:{week}")(digest)


T = datetime(2026, 8, 10, 6, 0, tzinfo=UTC)


def daily(catch_up: str, **options) -> Schedule:
    return Schedule("s", "0 6 * * *", target=TaskTarget("t"), catch_up=catch_up, **options)


def days(*offsets: int) -> list[datetime]:
    return [T + timedelta(days=d) for d in offsets]


@pytest.mark.parametrize(
    "catch_up,expected",
    [("skip", []), ("latest", days(0)), ("all", days(-4, -3, -2, -1, 0))],
)
def test_missed_ticks_follow_the_policy(catch_up, expected):
    due = days(-4, -3, -2, -1, 0)
    now = T + timedelta(hours=1)  # every due tick is more than 5 minutes late: missed
    assert daily(catch_up).plan(due, [], now) == expected


def test_on_time_ticks_run_under_every_policy():
    due = days(-2, -1, 0)
    now = T + timedelta(minutes=4)  # the last tick is within the 5-minute grace
    assert daily("skip").plan(due, [], now) == days(0)
    assert daily("latest").plan(due, [], now) == days(0)
    assert daily("all").plan(due, [], now) == days(-2, -1, 0)
    assert daily("skip", grace=timedelta(days=2)).plan(due, [], now) == days(-1, 0)


def test_a_tick_exactly_grace_old_is_on_time_and_a_grace_of_0_runs_a_tick_at_its_time():
    # "At most grace seconds old" is on time: the bound is inclusive. With grace=0 that is the
    # only way a skip schedule runs at all: a tick seen at its very moment.
    due = days(-1, 0)
    assert daily("skip").plan(due, [], T + timedelta(minutes=5)) == days(0)
    assert daily("skip").plan(due, [], T + timedelta(minutes=5, microseconds=1)) == []
    assert daily("skip", grace=0).plan(due, [], T) == days(0)


def test_all_is_bounded_to_the_most_recent_ticks():
    due = days(*range(-9, 1))
    assert daily("all", max_catch_up=3).plan(due, [], T + timedelta(hours=1)) == days(-2, -1, 0)


def test_started_ticks_always_run():
    due = days(-4, -3, -2)
    assert daily("skip").plan(due, days(-3), T) == days(-3)
    assert daily("latest").plan(due, days(-4), T) == days(-4, -2)


def test_catch_up_is_an_enum():
    assert daily("all").catch_up is CatchUp.ALL
