"""Cron expressions: validation at declaration, and daylight saving in two real zones."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from jobledger import ConfigError
from jobledger.scheduling.cron import CronSpec

# Change-over days of 2026: (zone, spring-forward day, fall-back day, a time in the repeated hour).
ZONES = [
    ("Europe/Berlin", date(2026, 3, 29), date(2026, 10, 25), "30 2 * * *"),
    ("America/New_York", date(2026, 3, 8), date(2026, 11, 1), "30 1 * * *"),
]


def ticks_on(spec: CronSpec, day: date) -> list[datetime]:
    """The ticks whose local date is ``day``, in local time."""
    zone = spec.zone
    start = datetime(day.year, day.month, day.day, tzinfo=zone) - timedelta(hours=3)
    ticks, _ = spec.ticks_between(start, start + timedelta(hours=30))
    return [t.astimezone(zone) for t in ticks if t.astimezone(zone).date() == day]


@pytest.mark.parametrize("zone,spring,fall,repeated", ZONES)
def test_a_0230_schedule_fires_once_on_the_spring_forward_day(zone, spring, fall, repeated):
    spec = CronSpec("30 2 * * *", zone)
    [tick] = ticks_on(spec, spring)
    # 02:30 does not exist that night; cron fires at the moment the clocks jump to 03:00.
    assert (tick.hour, tick.minute) == (3, 0)
    assert tick.utcoffset() == ZoneInfo(zone).utcoffset(datetime(2026, 7, 1))  # summer time


@pytest.mark.parametrize("zone,spring,fall,repeated", ZONES)
def test_a_time_in_the_repeated_hour_fires_once_on_the_fall_back_day(zone, spring, fall, repeated):
    spec = CronSpec(repeated, zone)
    [tick] = ticks_on(spec, fall)
    hour, minute = int(repeated.split()[1]), int(repeated.split()[0])
    assert (tick.hour, tick.minute) == (hour, minute)
    # The first of the two 02:30s (Berlin) / 01:30s (New York): still summer time.
    assert tick.utcoffset() == ZoneInfo(zone).utcoffset(datetime(2026, 7, 1))


@pytest.mark.parametrize("zone,spring,fall,repeated", ZONES)
def test_fixed_times_fire_exactly_once_every_local_day_of_the_year(zone, spring, fall, repeated):
    for expression in ("30 2 * * *", "30 1 * * *", "0 6 * * *"):
        spec = CronSpec(expression, zone)
        start = datetime(2026, 1, 1, tzinfo=ZoneInfo(zone))
        ticks, _ = spec.ticks_between(start, datetime(2027, 1, 1, tzinfo=ZoneInfo(zone)))
        days = [t.astimezone(ZoneInfo(zone)).date() for t in ticks]
        assert len(days) == 365 and len(set(days)) == 365, expression


@pytest.mark.parametrize("zone,spring,fall,repeated", ZONES)
def test_hourly_schedules_follow_the_wall_clock(zone, spring, fall, repeated):
    spec = CronSpec("0 * * * *", zone)
    assert len(ticks_on(spec, spring)) == 23  # the skipped hour has no tick
    assert len(ticks_on(spec, fall)) == 25  # the repeated hour ticks twice: two real hours
    fall_ticks = ticks_on(spec, fall)
    assert len({t.astimezone(UTC) for t in fall_ticks}) == 25


def test_ticks_between_stops_at_its_cap_and_says_more_follow():
    # The scheduler treats a cut list as "all long missed" and skips the stretch: a list one
    # tick longer than the cap, or a cut not reported, would run ticks it meant to skip.
    spec = CronSpec("0 * * * *", "UTC")
    start = datetime(2026, 8, 10, tzinfo=UTC)
    hours = [start + timedelta(hours=n) for n in range(1, 6)]
    assert spec.ticks_between(start, hours[-1], cap=3) == (hours[:3], True)
    assert spec.ticks_between(start, hours[2], cap=3) == (hours[:3], False)


def test_ticks_are_strictly_increasing_when_starting_inside_the_repeated_hour():
    spec = CronSpec("30 2 * * *", "Europe/Berlin")
    # 01:15 UTC on 2026-10-25 is 02:15 CET, the second pass through 02:xx; the 02:30 tick of
    # that day (00:30 UTC) is already past.
    after = datetime(2026, 10, 25, 1, 15, tzinfo=UTC)
    assert spec.next_after(after) == datetime(2026, 10, 26, 1, 30, tzinfo=UTC)


def test_next_after_is_strictly_after():
    spec = CronSpec("0 6 * * MON", "Europe/Berlin")
    tick = datetime(2026, 8, 10, 4, 0, tzinfo=UTC)
    assert spec.next_after(tick - timedelta(microseconds=1)) == tick
    assert spec.next_after(tick) == tick + timedelta(days=7)


@pytest.mark.parametrize(
    "expression,expected",
    [
        ("0 6 * * mon-fri", "0 6 * * mon-fri"),
        ("@daily", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("0 9 1 JAN,JUL *", "0 9 1 JAN,JUL *"),
        ("*/15  9-17 * * *", "*/15 9-17 * * *"),
    ],
)
def test_names_ranges_steps_and_macros(expression, expected):
    assert CronSpec(expression, "UTC").expression == expected


def test_a_naive_datetime_is_refused_rather_than_read_as_local_time():
    with pytest.raises(ValueError, match="naive datetime"):
        CronSpec("0 6 * * *", "Europe/Berlin").next_after(datetime(2026, 8, 10, 6, 0))


def test_weekdays_by_name_and_number_agree():
    by_name = CronSpec("0 6 * * MON,WED", "Europe/Berlin")
    by_number = CronSpec("0 6 * * 1,3", "Europe/Berlin")
    start = datetime(2026, 8, 1, tzinfo=UTC)
    assert by_name.ticks_between(start, start + timedelta(days=60)) == by_number.ticks_between(
        start, start + timedelta(days=60)
    )


@pytest.mark.parametrize(
    "expression,message",
    [
        ("0 6 * *", "has 4 fields; expected 5"),
        ("0 0 6 * * MON", "has 6 fields; expected 5"),
        ("61 * * * *", "Bad minute"),
        ("0 25 * * *", "Bad hour"),
        ("0 6 * * MOX", "Bad day-of-week"),
        ("0 6 * FOO *", "Bad month"),
        ("0 6 5-1 * *", "Bad day-of-month"),
        ("0 0 30 2 *", "invalid"),
        ("@reboot", "not supported"),
        ("", "5 fields"),
        ("*/0 * * * *", "Bad minute"),
    ],
)
def test_bad_expressions_are_refused_with_a_clear_message(expression, message):
    with pytest.raises(ConfigError) as info:
        CronSpec(expression, "UTC")
    assert message in str(info.value)
    if expression:
        assert repr(expression) in str(info.value)


@pytest.mark.parametrize("zone", ["Europe/Berln", "", "CEST", "../../etc/passwd", "+02:00", "/tmp"])
def test_bad_zones_are_refused_with_a_clear_message(zone):
    with pytest.raises(ConfigError, match="IANA"):
        CronSpec("0 6 * * MON", zone)
