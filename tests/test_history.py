"""The history format and its checker: every violation it claims to find, it finds; a real run
recorded by workers, the harness and the provider checks clean, on both backends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from jobledger import Backoff, JobFilter, JobState, Ledger
from jobledger.cli import cli
from jobledger.testing.fakeprovider import FakeProvider
from jobledger.testing.history import (
    HistoryError,
    HistoryRecorder,
    check,
    check_paths,
    install,
    load,
)

from .support.history import enqueue, history_dir
from .support.processes import bursts_until

T = "tok"


def rec(event: str, t: float = 0.0, **fields) -> dict:
    return {"t": t, "event": event, "host": "h", "pid": 1, **fields}


def clean_history() -> list[dict]:
    """Job 1 ran twice: attempt 1's lease expired (its late write refused), attempt 2 finished."""
    return [
        rec("enqueue", 1, queue="q", key="k1", job=1, created=True),
        rec("claim", 2, worker="a", queue="q", key="k1", job=1, attempt=1, token="t1"),
        rec("effect", 3, queue="q", key="k1", effect="email", idem="k1:email", delivered=True),
        rec("rescue", 5, worker="b", queue="q", key="k1", job=1, attempt=1, state="pending"),
        rec("claim", 6, worker="b", queue="q", key="k1", job=1, attempt=2, token="t2"),
        rec("effect", 7, queue="q", key="k1", effect="email", idem="k1:email", delivered=False),
        rec("complete", 8, worker="b", queue="q", key="k1", job=1, attempt=2, token="t2"),
        rec(
            "lease_lost",
            9,
            worker="a",
            queue="q",
            key="k1",
            job=1,
            attempt=1,
            token="t1",
            action="fail",
        ),  # fmt: skip
        rec("snapshot", 10, expect_final=True),
        rec("ledger_job", 10, job=1, queue="q", key="k1", task="t", state="done", attempts=2),
        rec(
            "ledger_attempt", 10, job=1, attempt=1, token="t1", worker="a", outcome="lease_expired"
        ),
        rec("ledger_attempt", 10, job=1, attempt=2, token="t2", worker="b", outcome="done"),
        rec("ledger_event", 10, job=1, kind="lease_lost", actor="a", attempt=1, token="t1"),
        rec("ledger_effect", 10, queue="q", key="k1", effect="email", job=1, attempt=2),
    ]


def kinds(records: list[dict]) -> dict[str, int]:
    return {k: len(v) for k, v in check(records).by_kind().items()}


def replace(records: list[dict], event: str, match: dict, **changes) -> list[dict]:
    out = []
    for r in records:
        if r["event"] == event and all(r.get(k) == v for k, v in match.items()):
            r = {**r, **changes}
        out.append(r)
    return out


def test_a_clean_history_has_no_violations():
    report = check(clean_history(), "clean")
    assert report.ok, report.summary()
    assert report.figures["effects_delivered"] == 1 and report.figures["effects_absorbed"] == 1
    assert report.ledger["lease_expired"] == 1 and report.ledger["state_done"] == 1
    assert "violations: 0" in report.summary()


def test_lost_job_acknowledged_but_not_in_the_ledger():
    records = [r for r in clean_history() if r["event"] != "ledger_job"]
    assert kinds(records)["lost_job"] == 1


def test_unfinished_job_when_the_run_expected_every_job_final():
    records = replace(clean_history(), "ledger_job", {"job": 1}, state="pending")
    assert kinds(records) == {"unfinished_job": 1}
    records = replace(records, "snapshot", {}, expect_final=False)
    assert kinds(records) == {}


def test_duplicate_effect_two_deliveries_for_one_key_whatever_the_idempotency_key():
    records = replace(clean_history(), "effect", {"delivered": False}, delivered=True, idem="x")
    assert kinds(records) == {"duplicate_effect": 1}


def test_phantom_effect_recorded_but_never_delivered():
    records = [r for r in clean_history() if r["event"] != "effect"]
    records.append(rec("effect", 3, queue="q", key="other", effect="email", delivered=True))
    assert kinds(records) == {"phantom_effect": 1}


def test_stale_completion_by_an_attempt_that_was_superseded():
    records = clean_history()
    records.append(
        rec("complete", 9, worker="a", queue="q", key="k1", job=1, attempt=1, token="t1")
    )
    found = kinds(records)
    assert found["stale_completion"] >= 1 and found["double_completion"] == 1


def test_a_redrive_allows_a_second_run_after_done():
    records = clean_history()
    records += [
        rec("ledger_event", 10, job=1, kind="redrive", actor="ana"),
        rec("claim", 11, worker="b", queue="q", key="k1", job=1, attempt=3, token="t3"),
        rec("complete", 12, worker="b", queue="q", key="k1", job=1, attempt=3, token="t3"),
        rec("ledger_attempt", 10, job=1, attempt=3, token="t3", worker="b", outcome="done"),
    ]
    assert kinds(records) == {}


def test_double_lease_two_tokens_for_one_attempt():
    records = clean_history()
    records.append(rec("claim", 6, worker="c", queue="q", key="k1", job=1, attempt=2, token="tX"))
    assert kinds(records)["double_lease"] == 1


def test_lost_write_acknowledged_outcome_missing_from_the_ledger():
    records = replace(clean_history(), "ledger_attempt", {"attempt": 2}, outcome="lease_expired")
    assert kinds(records) == {"lost_write": 1}
    records = [
        r for r in clean_history() if not (r["event"] == "ledger_attempt" and r["attempt"] == 2)
    ]
    assert kinds(records)["lost_write"] >= 1


def test_refused_write_applied_after_all():
    records = clean_history()
    records.append(
        rec(
            "lease_lost",
            9,
            worker="b",
            queue="q",
            key="k1",
            job=1,
            attempt=2,
            token="t2",
            action="heartbeat",
        )  # fmt: skip
    )
    # Refused, yet that attempt is done under the refused token: whether or not the attempt's
    # own completion is recorded too (a runtime records no refusal once it has handed the
    # outcome on), the refusal was wrong.
    assert kinds(records) == {"refused_write_applied": 1}
    records = [r for r in records if r["event"] != "complete"]
    assert kinds(records) == {"refused_write_applied": 1}


def test_key_with_several_jobs():
    records = clean_history()
    records.append(rec("enqueue", 11, queue="q", key="k1", job=7, created=True))
    assert kinds(records)["key_with_several_jobs"] == 1


def test_without_a_snapshot_open_jobs_are_noted_not_called_lost():
    records = [r for r in clean_history() if not r["event"].startswith(("ledger_", "snapshot"))]
    records.append(rec("enqueue", 11, queue="q", key="k2", job=2, created=True))
    report = check(records)
    assert report.ok and report.ledger is None
    assert "1 acknowledged jobs have no final outcome" in report.notes[0]


def write(path: Path, records: list[dict], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def test_load_reads_a_directory_skips_a_cut_last_line_and_refuses_garbage(tmp_path):
    history = clean_history()
    write(tmp_path / "a.jsonl", history[:5], tail='{"t": 1, "ev')
    write(tmp_path / "b.jsonl", history[5:])
    records, notes = load([tmp_path])
    assert len(records) == len(history) and [r["t"] for r in records] == sorted(
        r["t"] for r in records
    )
    assert notes and "incomplete last line" in notes[0]
    assert check_paths([tmp_path]).ok
    (tmp_path / "c.jsonl").write_text('not json\n{"t": 1, "event": "x"}\n')
    with pytest.raises(HistoryError, match="c.jsonl:1"):
        load([tmp_path])


def test_cli_check_prints_a_summary_and_exits_1_on_violations(tmp_path):
    good = write(tmp_path / "good.jsonl", clean_history())
    bad = write(tmp_path / "bad.jsonl", [r for r in clean_history() if r["event"] != "ledger_job"])
    runner = CliRunner()
    ok = runner.invoke(cli, ["history", "check", str(good)])
    assert ok.exit_code == 0 and "violations: 0" in ok.output
    both = runner.invoke(cli, ["history", "check", str(good), str(bad)])
    assert both.exit_code == 1
    assert "lost_job" in both.output and "2 histories" in both.output
    as_json = runner.invoke(cli, ["history", "check", "--json", str(bad)])
    assert json.loads(as_json.output)[0]["violation_counts"]["lost_job"] == 1


def test_cli_check_of_an_unreadable_history_is_one_line(tmp_path):
    from jobledger.cli import main

    (tmp_path / "x.jsonl").write_text("garbage\nmore garbage\n")
    with pytest.raises(SystemExit) as exit:
        main(["history", "check", str(tmp_path / "x.jsonl")])
    assert exit.value.code == 2


def test_a_real_run_recorded_by_workers_harness_and_provider_checks_clean(
    db_url, request, tmp_path
):
    """Workers (through the observer), the harness and the provider write one history; the
    checker holds it against the ledger's tables — and finds what is removed from it."""
    history = history_dir(request, tmp_path)
    ledger = Ledger(db_url)
    harness = HistoryRecorder(history, host="harness")
    workers = install(ledger, history)
    with (
        HistoryRecorder(history, host="provider") as effects,
        FakeProvider(history=effects) as provider,
    ):
        import httpx

        @ledger.task(queue="q", lease_seconds=5, backoff=Backoff(base=0.001, cap=0.001))
        def send(ctx, n: int) -> None:
            def post() -> None:
                httpx.post(
                    f"{provider.url}/send",
                    json={"to": n, "job_queue": ctx.queue, "job_key": ctx.key, "effect": "email"},
                    headers={"Idempotency-Key": ctx.idempotency_key("email")},
                ).raise_for_status()

            if ctx.attempt == 1 and n % 5 == 0:
                post()  # the effect happened, then the attempt failed before recording it
                raise RuntimeError("crashed after the call")
            ctx.once("email", post)

        for n in range(20):
            enqueue(ledger, harness, "send", {"n": n}, key=f"k{n}")
        enqueue(ledger, harness, "send", {"n": 0}, key="k0")  # a repeat: created=False
        bursts_until(
            ledger,
            lambda: len(ledger.jobs(JobFilter(states=(JobState.DONE,)))) == 20,
            "every job done",
            queues=["q"],
            concurrency=2,
        )
        harness.snapshot(ledger.backend)
    harness.close()
    workers.close()
    ledger.close()

    report = check_paths([history], "real")
    assert report.ok, report.summary()
    assert report.operations["claim"] == 24 and report.operations["complete"] == 20
    assert report.operations["fail"] == 4
    assert report.figures["effects_delivered"] == 20 and report.figures["effects_absorbed"] == 4
    assert report.ledger["state_done"] == 20 and report.ledger["effects"] == 20
    assert set(report.hosts) >= {"harness", "provider"}

    # The same history with the ledger's record of one job removed: that job is lost.
    records, _ = load([history])
    gone = [r for r in records if not (r["event"] == "ledger_job" and r["key"] == "k3")]
    assert {k: len(v) for k, v in check(gone).by_kind().items()} == {"lost_job": 1}


def test_cli_check_against_a_live_ledger(tmp_path):
    url = f"sqlite:///{tmp_path}/ledger.db"
    with Ledger(url) as ledger:
        ledger.migrate()
        ledger.task(lambda ctx: None, name="t", queue="q")
        kept = ledger.enqueue("t", {}, key="kept")
    history = write(
        tmp_path / "h.jsonl",
        [
            rec("enqueue", 1, queue="q", key="kept", job=kept.id, created=True),
            rec("enqueue", 2, queue="q", key="gone", job=kept.id + 1, created=True),
        ],
    )
    result = CliRunner().invoke(cli, ["history", "check", "--url", url, str(history)])
    assert result.exit_code == 1
    assert "lost_job 1" in result.output and "'gone'" in result.output
