"""Which job a command acts on (issue 16, items 4 and 5): ``--id N`` and ``--key K`` say which;
a bare argument that is one job's id and another job's key is refused, naming both; flags that
contradict each other (``resolve --done --pending``) are refused, whichever comes last."""

from __future__ import annotations

import pytest

from jobledger import JobState
from jobledger._records import Failure, Lease

from .conftest import assert_one_line_error


@pytest.fixture
def twins(ledger):
    """Job 1 keyed ``first``, and job 2 keyed ``1``: ``1`` names both. Both dead."""
    f = ledger.enqueue("send", {}, key="f", queue="q").id
    keyed_one = ledger.enqueue("send", {}, key="1", queue="q").id
    first = ledger.enqueue("send", {}, key="first", queue="q").id
    for job in ledger.backend.jobs.claim(["q"], "w", 10, None):
        lease = Lease(job.id, job.lease_token, job.attempt)
        ledger.backend.jobs.fail([Failure(lease, False, None, "Boom", "boom")])
    return ledger, {"f": f, "first": first, "1": keyed_one}


def test_the_fixture_makes_an_id_that_is_another_jobs_key(twins):
    ledger, ids = twins
    assert ledger.job(1).key == "f" and ids["1"] != 1


@pytest.mark.parametrize(
    "args",
    [
        ("show", "1"),
        ("cancel", "1", "--reason", "r"),
        ("resolve", "1", "--done", "--note", "n"),
        ("redrive", "1", "--reason", "r"),
        ("outbox", "list", "--job", "1"),
    ],
    ids=lambda a: "-".join(a[:2]),
)
def test_an_ambiguous_bare_reference_names_both_jobs(cli, db_url, twins, args):
    ledger, ids = twins
    before = {j.id: j.state for j in ledger.jobs()}
    run = cli(*args, "--url", db_url)
    assert_one_line_error(run, "job 1 (q/f) by its id", f"job {ids['1']} (q/1) by its key", "--id")
    assert {j.id: j.state for j in ledger.jobs()} == before  # nothing acted on


def test_id_and_key_say_which(cli, db_url, twins):
    ledger, ids = twins
    by_id = cli("show", "--id", "1", "--url", db_url, "--json")
    assert by_id.code == 0, by_id.err
    assert by_id.json()["job"]["key"] == "f"
    by_key = cli("show", "--key", "1", "--url", db_url, "--json")
    assert by_key.json()["job"]["id"] == ids["1"]
    resolved = cli("resolve", "--key", "1", "--done", "--note", "sent", "--url", db_url)
    assert resolved.code == 0, resolved.err
    assert ledger.job(ids["1"]).state is JobState.DONE and ledger.job(1).state is JobState.DEAD
    moved = cli("redrive", "--id", "1", "--reason", "r", "--url", db_url, "--json")
    assert moved.code == 0, moved.err
    assert moved.json()["moved"] == [1] and ledger.job(1).state is JobState.PENDING
    cancelled = cli("cancel", "--id", "1", "--reason", "r", "--url", db_url)
    assert cancelled.code == 0 and ledger.job(1).state is JobState.CANCELLED


def test_a_bare_reference_that_names_one_job_still_works(cli, db_url, twins):
    ledger, ids = twins
    assert cli("show", "first", "--url", db_url, "--json").json()["job"]["id"] == ids["first"]
    # ids["first"] is digits that are nobody's key: the id.
    only_id = cli("show", str(ids["first"]), "--url", db_url, "--json")
    assert only_id.json()["job"]["key"] == "first"
    assert_one_line_error(cli("show", "424242", "--url", db_url), "no job with id 424242")
    # Digits that are a key (an order number) and no job's id: the key.
    order = ledger.enqueue("send", {}, key="900017", queue="q").id
    assert cli("show", "900017", "--url", db_url, "--json").json()["job"]["id"] == order
    cancelled = cli("cancel", "900017", "--reason", "r", "--url", db_url)
    assert cancelled.code == 0, cancelled.err
    assert ledger.job(order).state is JobState.CANCELLED


def test_a_bare_reference_that_is_one_job_s_id_and_its_own_key_names_that_job(cli, db_url, ledger):
    # Keys such as an order number are often the job's id too: naming one job twice is not
    # naming two.
    job_id = ledger.enqueue("send", {}, key="1", queue="q").id
    assert job_id == 1
    assert cli("show", "1", "--url", db_url, "--json").json()["job"]["id"] == 1


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("show",), "none given"),
        (("show", "first", "--id", "1"), "not both"),
        (("show", "--id", "1", "--key", "1"), "not both"),
        (("cancel", "--reason", "r"), "none given"),
    ],
)
def test_one_reference_exactly(cli, db_url, twins, args, fragment):
    assert_one_line_error(cli(*args, "--url", db_url), fragment)


@pytest.mark.parametrize(
    "args, names",
    [
        (("resolve", "first", "--done", "--pending", "--note", "n"), ("--done", "--pending")),
        (("resolve", "first", "--pending", "--done", "--note", "n"), ("--done", "--pending")),
        (("enqueue", "send", "--key", "k", "--delay", "1h", "--run-at", "now"), ("--delay",)),
        (("groups", "pause", "q", "g", "--for", "1m", "--until", "2099-01-01"), ("--for",)),
        (("redrive", "--all", "--queue", "q", "--reason", "r"), ("--all",)),
        (("redrive", "--all", "first", "--reason", "r"), ("--all",)),
    ],
)
def test_contradicting_flags_are_refused(cli, db_url, twins, args, names):
    """Whichever comes last: nothing changes."""
    ledger, _ = twins
    before = {j.id: j.state for j in ledger.jobs()}
    assert_one_line_error(cli(*args, "--url", db_url), *names)
    assert {j.id: j.state for j in ledger.jobs()} == before
