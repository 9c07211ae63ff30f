"""The bench's drain ends when its poll finds no job left. jobledger's adapter answers that with
a probe of the first entry of each index of pending or leased jobs (``LEFT_SQL`` in
``bench/adapters/ours.py``) instead of counting them: it must say "none left" exactly when the
count says none, whatever the jobs' states, groups and run times — a probe that missed a kind of
job would end drains early and report speeds that were never reached."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from bench.adapters.ours import LEFT_SQL

from jobledger import Ledger
from jobledger._records import Lease

from .support.processes import wait_until

COUNT_SQL = "SELECT count(*) FROM jobledger_jobs WHERE state IN ('pending', 'leased')"


def _answers(ledger: Ledger) -> tuple[int, int]:
    backend: Any = ledger.backend
    db = backend.db
    with db.reading() as conn:
        if backend.dialect == "postgres":
            # The bench runs in a database of its own; a test, in a schema of its own.
            conn.execute(f"SET LOCAL search_path TO {db.schema}")
        return conn.execute(LEFT_SQL).fetchone()[0], conn.execute(COUNT_SQL).fetchone()[0]


def _agree(ledger: Ledger) -> bool:
    """Whether any job is left, as both answer it (and they agree)."""
    left, count = _answers(ledger)
    assert (left > 0) == (count > 0), (left, count)
    return count > 0


def test_the_poll_says_none_left_exactly_when_the_count_does(ledger: Ledger) -> None:
    def noop(ctx: Any, n: int, g: str | None = None) -> None:
        pass

    ledger.task(noop, name="noop", queue="bench", group=lambda p: p.get("g"))  # type: ignore[arg-type,return-value]
    jobs = ledger.backend.jobs
    assert not _agree(ledger)

    for payload in ({"n": 1}, {"n": 2, "g": "tenant"}):
        ledger.enqueue("noop", payload, key=str(payload["n"]))
        assert _agree(ledger)  # pending
        # A worker looks for grouped jobs again every GROUPS_RECHECK_SECONDS.
        claimed = wait_until(lambda: jobs.claim(["bench"], "probe", 10), what="a claim")
        assert len(claimed) == 1
        assert _agree(ledger)  # leased
        jobs.release([Lease(j.id, j.lease_token, j.attempt) for j in claimed])
        assert _agree(ledger)  # pending again
        ledger.run_worker(queues=["bench"], burst=True)
        assert not _agree(ledger)  # done

    # A job due later is still left.
    ledger.enqueue("noop", {"n": 3}, key="3", delay=timedelta(hours=1))
    assert _agree(ledger)
