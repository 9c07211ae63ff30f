"""The operator commands against a real ledger, on each backend: status, jobs, show, redrive,
resolve, cancel, enqueue, prune."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobledger import JobState
from jobledger._records import Failure, Lease

from .conftest import assert_one_line_error


def lease_of(job):
    return Lease(job.id, job.lease_token, job.attempt)


@pytest.fixture
def shop(ledger):
    """A ledger with digests in every state, written at known times in the recent past."""
    now = datetime.now(UTC)
    ago = lambda minutes: now - timedelta(minutes=minutes)  # noqa: E731
    ledger.task(lambda ctx, customer_id: None, name="send_digest", queue="digests", max_attempts=3)
    ledger.task(lambda ctx, n: None, name="export", queue="exports", max_attempts=3)
    b = ledger.backend
    ids = {}

    def new(n: int):
        ids[n] = ledger.enqueue(
            "send_digest", {"customer_id": n}, key=f"{n}:2026-W33", now=ago(30)
        ).id
        return ids[n]

    # 1 done after two attempts (a 429, then success), with its effect recorded.
    new(1)
    [j] = b.jobs.claim(["digests"], "host-a:11", 1, now=ago(29))
    b.jobs.fail([Failure(lease_of(j), True, ago(28), "HTTP 429", "HTTP 429: slow down")], ago(29))
    [j] = b.jobs.claim(["digests"], "host-b:22", 1, now=ago(28))
    b.effects.record("digests", j.key, "email", lease_of(j), {"message_id": "m-1"}, ago(28))
    b.jobs.complete([lease_of(j)], ago(28))
    # 2 and 3 dead: a template error and an auth error.
    for n, error in ((2, "HTTP 400: template 'weekly' missing"), (3, "HTTP 401: bad credentials")):
        new(n)
        [j] = b.jobs.claim(["digests"], "host-a:11", 1, now=ago(27))
        b.jobs.fail([Failure(lease_of(j), False, None, error.split(":")[0], error)], ago(27))
    # 4: its lease expired a minute ago and the rescuer put it back.
    new(4)
    [j] = b.jobs.claim(["digests"], "host-c:33", 1, now=ago(3))
    assert b.jobs.heartbeat([lease_of(j)], ago(3), lease_seconds=60)
    assert [r.job_id for r in b.jobs.rescue(now=ago(1))] == [ids[4]]
    # 5 and 6 are pending, due 30 minutes ago: late against a 5 minute objective.
    new(5)
    new(6)
    ids["export"] = ledger.enqueue("export", {"n": 1}, key="export:1", now=ago(1)).id
    return ledger, ids


def test_status_table_and_json(cli, db_url, shop):
    ledger, ids = shop
    table = cli("status", "--url", db_url)
    assert table.code == 0, table.err
    assert "digests" in table.out and "exports" in table.out and "late (>5m)" in table.out
    run = cli("status", "--url", db_url, "--json", "--late-after", "10m")
    assert run.code == 0, run.err
    data = {q["queue"]: q for q in run.json()["queues"]}
    digests = data["digests"]
    assert digests["counts"] == {"pending": 3, "leased": 0, "done": 1, "dead": 2, "cancelled": 0}
    assert digests["dead"] == 2
    assert 29 * 60 < digests["oldest_due_pending_seconds"] < 40 * 60
    # 5 and 6 are due since 30 minutes; 4 since its rescue a minute ago.
    assert digests["late_pending"] == 2
    assert digests["lease_expiries_last_hour"] == 1
    assert digests["attempts_per_done_job"] == 2.0
    exports = data["exports"]
    assert exports["late_pending"] == 0 and exports["lease_expiries_last_hour"] == 0
    only = cli("status", "--url", db_url, "--json", "-q", "exports").json()["queues"]
    assert [q["queue"] for q in only] == ["exports"]


def test_jobs_filters(cli, db_url, shop):
    ledger, ids = shop

    def keys(*args):
        run = cli("jobs", "--url", db_url, "--json", "--order", "id", *args)
        assert run.code == 0, run.err
        return [j["key"] for j in run.json()["jobs"]]

    assert keys("-s", "dead") == ["2:2026-W33", "3:2026-W33"]
    assert keys("-s", "dead", "--error", "template") == ["2:2026-W33"]
    assert keys("-q", "exports") == ["export:1"]
    assert keys("--task", "export") == ["export:1"]
    assert keys("--key-prefix", "1:") == ["1:2026-W33"]
    assert keys("-s", "done", "-s", "dead") == ["1:2026-W33", "2:2026-W33", "3:2026-W33"]
    assert keys("--since", "2m", "-q", "digests") == ["4:2026-W33"]  # changed a minute ago
    assert "export:1" not in keys("--until", "2m")
    limited = cli("jobs", "--url", db_url, "--json", "--limit", "2").json()
    assert len(limited["jobs"]) == 2 and limited["more"] is True
    table = cli("jobs", "--url", db_url, "-s", "dead")
    assert "template 'weekly' missing" in table.out and "2:2026-W33" in table.out


def test_show_prints_the_timeline(cli, db_url, shop):
    ledger, ids = shop
    run = cli("show", "1:2026-W33", "--url", db_url)
    assert run.code == 0, run.err
    for fragment in (
        "job 1",
        "attempt 1 claimed",
        "host-a:11",
        "attempt 1 retry",
        "HTTP 429: slow down",
        "attempt 2 done",
        "host-b:22",
        "effect email recorded",
    ):
        assert fragment in run.out, fragment
    data = cli("show", str(ids[1]), "--url", db_url, "--json").json()
    assert data["job"]["key"] == "1:2026-W33" and data["job"]["state"] == "done"
    assert [(a["attempt"], a["worker"], a["outcome"]) for a in data["attempts"]] == [
        (1, "host-a:11", "retry"),
        (2, "host-b:22", "done"),
    ]
    whats = [item["what"] for item in data["timeline"]]
    assert (
        whats.index("enqueued") < whats.index("attempt 1 claimed") < whats.index("attempt 2 done")
    )
    assert data["effects"][0]["detail"] == {"message_id": "m-1"}


def test_redrive_dry_run_canary_and_the_rest(cli, db_url, shop):
    ledger, ids = shop
    preview = cli(
        "redrive", "--url", db_url, "-q", "digests", "--reason", "fixed", "--dry-run", "--json"
    )
    assert preview.code == 0, preview.err
    assert preview.json()["would_move"] == [ids[2], ids[3]]
    assert ledger.job(ids[2]).state is JobState.DEAD
    canary = cli("redrive", "--url", db_url, "-q", "digests", "--limit", "1", "--reason", "canary")
    assert canary.code == 0, canary.err
    assert "moved 1 job(s)" in canary.out
    assert ledger.job(ids[2]).state is JobState.PENDING
    assert ledger.job(ids[3]).state is JobState.DEAD
    rest = cli("redrive", "3:2026-W33", "--url", db_url, "--reason", "the rest", "--json")
    assert rest.json()["moved"] == [ids[3]]
    [event] = ledger.backend.history.events(ids[3])
    assert (event.kind, event.actor, event.note) == ("redrive", "ana", "the rest")
    again = cli("redrive", "--url", db_url, "--all", "--reason", "nothing left", "--json")
    assert again.json()["moved"] == []


def test_redrive_by_error_text_with_a_rate(cli, db_url, shop):
    ledger, ids = shop
    run = cli(
        "redrive",
        "--url",
        db_url,
        "--error",
        "credentials",
        "--rate",
        "50",
        "--reason",
        "rotated",
        "--actor",
        "bob",
    )
    assert run.code == 0, run.err
    assert ledger.job(ids[3]).state is JobState.PENDING
    assert ledger.job(ids[2]).state is JobState.DEAD
    assert ledger.backend.history.events(ids[3])[0].actor == "bob"


def test_resolve_and_cancel(cli, db_url, shop):
    ledger, ids = shop
    run = cli(
        "resolve", "2:2026-W33", "--done", "--note", "provider shows it sent", "--url", db_url
    )
    assert run.code == 0, run.err
    assert ledger.job(ids[2]).state is JobState.DONE
    [event] = ledger.backend.history.events(ids[2])
    assert (event.kind, event.actor, event.note, event.detail) == (
        "resolve",
        "ana",
        "provider shows it sent",
        {"state": "done"},
    )
    again = cli("resolve", str(ids[3]), "--pending", "--note", "not sent; retry", "--url", db_url)
    assert again.code == 0 and ledger.job(ids[3]).state is JobState.PENDING
    cancel = cli("cancel", "5:2026-W33", "--reason", "customer left", "--url", db_url, "--json")
    assert cancel.json()["job"]["state"] == "cancelled"
    assert_one_line_error(
        cli("cancel", "5:2026-W33", "--reason", "twice", "--url", db_url), "cancelled"
    )
    assert_one_line_error(
        cli("resolve", "1:2026-W33", "--done", "--note", "n", "--url", db_url), "done"
    )
    assert_one_line_error(cli("resolve", "6:2026-W33", "--note", "n", "--url", db_url), "--done")


def test_enqueue_by_task_name(cli, db_url, ledger):
    args = ("enqueue", "send_digest", "--url", db_url, "-q", "digests", "--key", "9:2026-W33")
    first = cli(*args, "--payload", '{"customer_id": 9}', "--priority", "5", "--json")
    assert first.code == 0, first.err
    assert first.json()["created"] is True
    job = ledger.job(first.json()["id"])
    assert (job.task, job.queue, job.payload, job.priority) == (
        "send_digest",
        "digests",
        {"customer_id": 9},
        5,
    )
    again = cli(*args, "--payload", '{"customer_id": 9}')
    assert again.code == 0 and "nothing created" in again.out
    assert_one_line_error(cli(*args, "--payload", '{"customer_id": 10}'), "different")
    later = cli(
        "enqueue", "send_digest", "--url", db_url, "--key", "later", "--delay", "1h", "--json"
    )
    job = ledger.job(later.json()["id"])
    assert job.queue == "default"
    assert timedelta(minutes=59) < job.run_at - datetime.now(UTC) <= timedelta(hours=1)
    at = cli(
        "enqueue", "t", "--url", db_url, "--key", "at", "--run-at", "2030-01-02T03:04:05Z", "--json"
    )
    assert ledger.job(at.json()["id"]).run_at == datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_prune(cli, db_url, shop):
    ledger, ids = shop
    dry = cli("prune", "--url", db_url, "--older-than", "10m", "--dry-run", "--json")
    assert dry.code == 0, dry.err
    assert dry.json()["jobs"] == 1 and dry.json()["by_state"] == {"done": 1, "cancelled": 0}
    run = cli("prune", "--url", db_url, "--older-than", "10m")
    assert run.code == 0, run.err
    assert "pruned 1 job(s)" in run.out and "1 key(s) kept taken" in run.out
    assert ids[1] not in [j.id for j in ledger.jobs()]
    dead = cli("prune", "--url", db_url, "--older-than", "10m", "--include-dead", "--json")
    assert dead.json()["by_state"] == {"dead": 2}
    blocked = cli(
        "enqueue",
        "send_digest",
        "--url",
        db_url,
        "-q",
        "digests",
        "--key",
        "1:2026-W33",
        "--payload",
        '{"customer_id": 1}',
    )
    assert blocked.code == 0 and "pruned" in blocked.out
    gone = cli("show", "1:2026-W33", "--url", db_url)
    assert_one_line_error(gone, "no job with key", "pruned")


def test_a_database_without_the_schema_says_to_migrate(cli, tmp_path):
    import sqlite3

    sqlite3.connect(tmp_path / "empty.db").close()
    assert_one_line_error(
        cli("status", "--url", f"sqlite:///{tmp_path}/empty.db"), "jobledger migrate"
    )


def test_at_a_terminal_listings_are_drawn_as_tables_and_redrive_shows_its_progress(
    cli, db_url, shop, monkeypatch
):
    """What a person at a terminal sees: the same rows, drawn by rich, and a progress bar that
    ends with what moved (through a pipe, plain columns: test_edges)."""
    from jobledger.cli import actions, params

    ledger, ids = shop
    monkeypatch.setattr(params, "to_terminal", lambda: True)
    monkeypatch.setattr(actions, "to_terminal", lambda: True)
    listed = cli("jobs", "--url", db_url, "-q", "digests", "--state", "dead")
    assert listed.code == 0, listed.err
    assert "━" in listed.out and "│" in listed.out, listed.out
    rows = [line for line in listed.out.splitlines() if "2026-W33" in line]
    by_key = {key: row for key in ("2:2026-W33", "3:2026-W33") for row in rows if key in row}
    assert len(rows) == 2 and len(by_key) == 2, listed.out
    for n in (2, 3):
        # One row a job, its id right-aligned under the header's "id", its state plain.
        assert by_key[f"{n}:2026-W33"].startswith(f"│ {ids[n]:>2} │"), listed.out
        assert "│ dead  │" in by_key[f"{n}:2026-W33"], listed.out
    moved = cli("redrive", "--url", db_url, "-q", "digests", "--reason", "fixed")
    assert moved.code == 0, moved.err
    assert "moved 2 job(s) back to pending (actor ana, reason: fixed)" in moved.out
    assert [ledger.job(ids[n]).state for n in (2, 3)] == [JobState.PENDING] * 2
    pruned = cli("prune", "--url", db_url, "--older-than", "10m")
    assert pruned.code == 0, pruned.err
    assert "pruned 1 job(s) finished more than 10m ago (1 done)" in pruned.out, pruned.out
    assert ids[1] not in {j.id for j in ledger.jobs()}


def test_a_redrive_of_more_jobs_than_it_lists_says_how_many_more(cli, db_url, ledger, monkeypatch):
    from jobledger.cli import actions, params

    ledger.task(lambda ctx, n: None, name="export", queue="exports", max_attempts=3)
    now = datetime.now(UTC) - timedelta(minutes=5)
    for n in range(25):
        ledger.enqueue("export", {"n": n}, key=f"export:{n}", now=now)
    b = ledger.backend
    claimed = b.jobs.claim(["exports"], "host-a:11", 25, now=now)
    b.jobs.fail(
        [Failure(lease_of(j), False, None, "HTTP 400", "HTTP 400: no") for j in claimed], now
    )
    monkeypatch.setattr(params, "to_terminal", lambda: True)
    monkeypatch.setattr(actions, "to_terminal", lambda: True)
    run = cli("redrive", "--url", db_url, "-q", "exports", "--reason", "fixed")
    assert run.code == 0, run.err
    assert "moved 25 job(s) back to pending (actor ana, reason: fixed)" in run.out, run.out
    assert sum("export:" in line for line in run.out.splitlines()) == 20, run.out
    assert run.out.rstrip().endswith("… and 5 more (--json lists them all)"), run.out
    assert {j.state for j in ledger.jobs()} == {JobState.PENDING}
