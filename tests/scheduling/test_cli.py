"""``jobledger schedules``: list with next/last tick and leader, ticks, pause and resume."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from jobledger import Ledger
from jobledger.cli import main

from ..apps.schedule_app import declare

MONDAY = datetime(2026, 8, 10, 4, 0, tzinfo=UTC)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


@pytest.fixture
def ticked(db_url: str) -> Ledger:
    led = Ledger(db_url)
    declare(led, 3, 2)
    s = led.scheduler(name="host:1:abc", lease_seconds=3600)
    s.run_once(MONDAY - timedelta(days=1))
    s.run_once(MONDAY + timedelta(minutes=1))
    yield led
    led.close()


def test_schedules_json_lists_next_and_last_tick_and_the_leader(ticked, db_url, capsys):
    code, out, err = run(capsys, "schedules", "--url", db_url, "--json")
    assert code == 0, err
    data = json.loads(out)
    [schedule] = data["schedules"]
    assert schedule["name"] == "weekly-digest" and schedule["cron"] == "0 6 * * MON"
    assert schedule["time_zone"] == "Europe/Berlin" and schedule["key"] == "{entity}:{week}"
    assert schedule["next_tick"] == "2026-08-17T04:00:00Z"
    assert schedule["last_tick"]["tick_time"] == "2026-08-10T04:00:00Z"
    assert schedule["last_tick"]["jobs_created"] == 3
    assert schedule["paused"] is False
    [lease] = data["leaders"]
    assert lease["holder"] == "host:1:abc" and lease["name"] == "scheduler:default"


def test_schedules_table_and_ticks(ticked, db_url, capsys):
    code, out, _ = run(capsys, "schedules", "--url", db_url)
    assert code == 0
    assert "weekly-digest" in out and "cohort default" in out and "host:1:abc" in out
    code, out, _ = run(capsys, "schedules", "ticks", "weekly-digest", "--url", db_url, "--json")
    assert code == 0
    [tick] = json.loads(out)
    assert tick["jobs_created"] == 3 and tick["state"] == "done" and tick["runs"] == 1


def test_pause_and_resume_from_the_command_line(ticked, db_url, capsys):
    code, out, _ = run(
        capsys,
        "schedules",
        "pause",
        "weekly-digest",
        "--url",
        db_url,
        "--actor",
        "ops",
        "--note",
        "x",
    )
    assert code == 0 and "paused weekly-digest" in out
    row = ticked.schedules.row("weekly-digest")
    assert row.paused and row.pause_changed_by == "ops" and row.pause_note == "x"
    # The group's --url applies to the subcommand too.
    code, out, _ = run(
        capsys, "schedules", "--url", db_url, "resume", "weekly-digest", "--skip-missed"
    )
    assert code == 0 and "resumed weekly-digest; skipped" in out
    assert not ticked.schedules.row("weekly-digest").paused


def test_errors_are_one_line(ticked, db_url, capsys):
    code, out, err = run(capsys, "schedules", "pause", "nope", "--url", db_url)
    assert code == 2 and err == "error: no schedule named 'nope' in the ledger\n"
    code, out, err = run(capsys, "schedules", "ticks", "nope", "--url", db_url)
    assert code == 2 and err.count("\n") == 1


def test_an_empty_ledger_says_so(db_url, capsys):
    Ledger(db_url).migrate()
    code, out, _ = run(capsys, "schedules", "--url", db_url)
    assert code == 0 and "no schedules in this ledger" in out and "leader: none yet" in out


def test_schedules_lists_scheduler_cohorts_not_other_leader_leases(ticked, db_url, capsys):
    """A relay's leader lease (``relay:<name>``) lives in the same table; it is no cohort."""
    ticked.backend.leader.acquire("relay:default", "relay-host:1", 60)
    code, out, err = run(capsys, "schedules", "--url", db_url, "--json")
    assert code == 0, err
    assert [lease["name"] for lease in json.loads(out)["leaders"]] == ["scheduler:default"]
    code, out, _ = run(capsys, "schedules", "--url", db_url)
    assert "cohort default" in out and "relay" not in out


def test_the_table_tells_a_live_leader_and_a_failing_tick_with_times_relative_to_now(
    db_url, capsys
):
    """A leader whose lease holds is named with when it took over and until when it leads, each
    relative to now; a schedule whose last tick fails says why; ticks are listed as a table."""
    led = Ledger(db_url)
    broken = [True]

    def customers(tick):
        if broken[0]:
            raise RuntimeError("customer database unreachable")
        return [1]

    @led.schedule("* * * * *", name="every-minute", for_each=customers, key="{entity}:{tick}")
    @led.task(queue="digests")
    def poke(ctx, tick: str, entity: int) -> None: ...

    # Leading since two minutes ago, with a lease of half an hour: 28 minutes left.
    now = datetime.now(UTC)
    took_over = now - timedelta(minutes=2)
    s = led.scheduler(name="host:2:def", lease_seconds=1800)
    try:
        s.run_once(took_over)
        assert s.run_once(now).errors
        code, out, err = run(capsys, "schedules", "--url", db_url)
        assert code == 0, err
        assert "last tick failing: RuntimeError: customer database unreachable" in " ".join(
            out.split()
        ), out
        [line] = [line for line in out.splitlines() if line.startswith("cohort default")]
        since = took_over.strftime("%Y-%m-%d %H:%MZ")
        until = (took_over + timedelta(minutes=30)).strftime("%Y-%m-%d %H:%MZ")
        assert line == (
            f"cohort default: led by host:2:def (term 1) since {since} (2 min ago), "
            f"lease until {until} (in 28 min)"
        ), line
        broken[0] = False
        s.run_once(now + timedelta(minutes=1))
        code, out, err = run(capsys, "schedules", "ticks", "every-minute", "--url", db_url)
        assert code == 0, err
        title, header, *rows = out.splitlines()
        assert title == "ticks of every-minute", out
        assert header.split() == [
            *("tick", "state", "leader", "(term)", "runs", "created", "existed", "note")
        ], out
        # Newest first; the tick that failed once was run twice and made its job the second time.
        cells = [row.split() for row in rows]
        assert all(c[2:5] == ["done", "host:2:def", "(1)"] for c in cells), out
        assert cells[-1][5:] == ["2", "1", "0"], out
    finally:
        led.close()
