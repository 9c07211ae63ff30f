"""``jobledger groups list|limits|pause|resume`` against a real ledger, on each backend."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from .conftest import assert_one_line_error


@pytest.fixture
def tenants(ledger):
    """Queue ``mail``: acme with 3 jobs (one leased), globex with 2, one job without a group."""
    for tenant, count in (("acme", 3), ("globex", 2)):
        for n in range(count):
            ledger.enqueue("send", {"n": n}, key=f"{tenant}:{n}", queue="mail", group=tenant)
    ledger.set_group_limits("mail", max_leased=1)
    [claimed] = ledger.backend.jobs.claim(["mail"], "w1", 1, None)
    assert claimed.group is not None
    ledger.enqueue("send", {}, key="plain", queue="mail")
    return ledger


def test_list_as_a_table_and_as_json(cli, db_url, tenants):
    table = cli("groups", "list", "mail", "--url", db_url)
    assert table.code == 0, table.err
    assert "at most 1 leased per group" in table.out
    assert "acme" in table.out and "globex" in table.out and "plain" not in table.out
    data = cli("groups", "list", "mail", "--url", db_url, "--json").json()
    assert data["limits"] == {
        "queue": "mail",
        "max_leased": 1,
        "rate": None,
        "burst": None,
        "bucket_size": None,
    }
    groups = {g["group"]: g for g in data["groups"]}
    assert set(groups) == {"acme", "globex"}
    assert sum(g["leased"] for g in groups.values()) == 1
    assert sum(g["pending"] for g in groups.values()) == 4
    assert all(g["paused_until"] is None for g in groups.values())
    empty = cli("groups", "list", "other", "--url", db_url)
    assert empty.code == 0 and "no group of queue 'other'" in empty.out


def test_limits_show_set_keep_the_others_lift_one_and_clear(cli, db_url, tenants):
    shown = cli("groups", "limits", "mail", "--url", db_url)
    assert shown.code == 0 and "at most 1 leased per group" in shown.out
    run = cli("groups", "limits", "mail", "--url", db_url, "--rate", "2", "--burst", "5")
    assert run.code == 0, run.err
    assert "2 jobs/s per group (bursts of 5)" in run.out and "(was: at most 1" in run.out
    limits = tenants.group_limits("mail")
    assert (limits.max_leased, limits.rate, limits.burst) == (1, 2, 5)
    # Lifting the rate takes its burst with it; the leased limit stays.
    lifted = cli("groups", "limits", "mail", "--url", db_url, "--rate", "none", "--json").json()
    assert lifted == {
        "queue": "mail",
        "max_leased": 1,
        "rate": None,
        "burst": None,
        "bucket_size": None,
    }
    cleared = cli("groups", "limits", "mail", "--url", db_url, "--clear")
    assert cleared.code == 0 and "no limits" in cleared.out
    assert tenants.group_limits("mail").unlimited


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("--max-leased", "0"), "max_leased must be a whole number"),
        (("--max-leased", "two"), "not a whole number"),
        (("--rate", "-1"), "rate must be a positive number"),
        (("--rate", "1e-300"), "rate must be at least 1e-06 jobs per second"),
        (("--burst", "3"), "burst needs a rate"),
        (("--rate", "1", "--clear"), "--clear lifts every limit"),
    ],
)
def test_bad_limits_are_one_line_errors_and_change_nothing(cli, db_url, tenants, args, fragment):
    assert_one_line_error(cli("groups", "limits", "mail", "--url", db_url, *args), fragment)
    assert tenants.group_limits("mail").max_leased == 1


def test_pause_for_a_while_then_resume(cli, db_url, tenants):
    run = cli("groups", "pause", "mail", "acme", "--url", db_url, "--for", "15m", "--reason", "429")
    assert run.code == 0, run.err
    assert "paused group acme of mail until" in run.out and "(in 15m)" in run.out
    [acme] = [g for g in tenants.groups("mail") if g.name == "acme"]
    assert acme.paused_reason == "429"
    assert acme.paused_until is not None
    assert timedelta(minutes=14) < acme.paused_until - datetime.now(UTC) <= timedelta(minutes=15)
    shorter = cli("groups", "pause", "mail", "acme", "--url", db_url, "--for", "1m", "--json")
    assert shorter.json()["changed"] is False
    said = cli("groups", "pause", "mail", "acme", "--url", db_url, "--for", "1m")
    assert said.code == 0, said.err
    assert said.out.startswith("group acme of mail is already paused until "), said.out
    assert said.out.rstrip().endswith("longer than asked: unchanged"), said.out
    [still] = [g for g in tenants.groups("mail") if g.name == "acme"]
    assert still.paused_until == acme.paused_until
    table = cli("groups", "list", "mail", "--url", db_url)
    assert "429" in table.out and "(in 14m" in table.out
    resumed = cli("groups", "resume", "mail", "acme", "--url", db_url)
    assert resumed.code == 0 and "resumed group acme of mail" in resumed.out
    assert all(g.paused_until is None for g in tenants.groups("mail"))
    again = cli("groups", "resume", "mail", "acme", "--url", db_url, "--json")
    assert again.json() == {"queue": "mail", "group": "acme", "resumed": False}
    plain = cli("groups", "resume", "mail", "acme", "--url", db_url)
    assert plain.code == 0 and plain.out == "group acme of mail was not paused: nothing to do\n"


def test_pause_until_a_time_records_who_paused_by_default(cli, db_url, tenants):
    until = (datetime.now(UTC) + timedelta(hours=2)).replace(microsecond=0)
    text = until.replace(tzinfo=None).isoformat()  # no offset: UTC
    run = cli("groups", "pause", "mail", "globex", "--url", db_url, "--until", text, "--json")
    assert run.code == 0, run.err
    assert run.json()["changed"] is True
    [globex] = [g for g in tenants.groups("mail") if g.name == "globex"]
    assert globex.paused_until == until
    assert globex.paused_reason == "paused by ana"  # JOBLEDGER_ACTOR


@pytest.mark.parametrize(
    "args, fragment",
    [
        ((), "give --for DURATION or --until TIME"),
        (("--for", "1m", "--until", "2099-01-01T00:00:00Z"), "one of them"),
        (("--until", "2020-01-01T00:00:00Z"), "is not in the future"),
        (("--until", "tomorrow"), "is not a time"),
        (("--for", "400d"), "at most 365 days"),
        (("--for", "1e300"), "longer than any duration"),
        (("--for", "0s"), "is not in the future"),
    ],
)
def test_bad_pauses_are_one_line_errors(cli, db_url, tenants, args, fragment):
    assert_one_line_error(cli("groups", "pause", "mail", "acme", "--url", db_url, *args), fragment)
    assert all(g.paused_until is None for g in tenants.groups("mail"))


def test_bad_names_are_one_line_errors(cli, db_url, tenants):
    assert_one_line_error(cli("groups", "list", "bad queue", "--url", db_url), "queue name")
    long = "x" * 201
    assert_one_line_error(
        cli("groups", "pause", "mail", long, "--url", db_url, "--for", "1m"), "group is 201"
    )


def test_show_names_the_job_group(cli, db_url, tenants):
    run = cli("show", "acme:1", "--url", db_url)
    assert run.code == 0, run.err
    assert any(line.split() == ["group", "acme"] for line in run.out.splitlines())
    assert cli("show", "acme:1", "--url", db_url, "--json").json()["job"]["group"] == "acme"
    plain = cli("show", "plain", "--url", db_url)
    assert any(line.split() == ["group", "-"] for line in plain.out.splitlines())


def test_jobs_and_redrive_select_by_group(cli, db_url, tenants):
    data = cli("jobs", "--group", "acme", "--url", db_url, "--json").json()
    assert sorted(j["key"] for j in data["jobs"]) == ["acme:0", "acme:1", "acme:2"]
    assert cli("jobs", "--group", "nobody", "--url", db_url).out.strip() == "no jobs match"
    # A group is a filter of its own: redrive accepts it without --queue or --all.
    from jobledger._records import Failure, Lease

    claimed = tenants.backend.jobs.claim(["mail"], "w2", 10, None)
    tenants.backend.jobs.fail(
        [Failure(Lease(j.id, j.lease_token, j.attempt), False, None, "E", "m") for j in claimed]
    )
    dead = {j.key for j in claimed}
    assert "plain" in dead and any(k.startswith("globex:") for k in dead)
    dry = cli(
        "redrive", "--group", "globex", "--dry-run", "--reason", "r", "--url", db_url, "--json"
    )
    assert dry.code == 0, dry.err
    assert [j["key"] for j in dry.json()["jobs"]] == [k for k in dead if k.startswith("globex:")]


def test_help_explains_the_commands(cli):
    run = cli("groups", "--help")
    assert run.code == 0
    for command in ("list", "limits", "pause", "resume"):
        assert command in run.out
    pause = cli("groups", "pause", "--help")
    assert "--for" in pause.out and "--until" in pause.out and 'scope="group"' in pause.out
