"""Claims racing on the same groups, on each backend: threads that claim at the same moment,
each on its own connection, never lease more of a group's jobs than its limit, never spend
more of its tokens than its bucket holds, and never take the same job twice."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import pytest

from jobledger import Ledger

THREADS = 4
ROUNDS = 25
GROUPS = 6
LIMIT = 3


@pytest.fixture
def racers(db_url: str) -> Iterator[list[Ledger]]:
    """One ledger per thread (its own connections), all on one database."""
    first = Ledger(db_url)
    first.migrate()
    ledgers = [first, *(Ledger(db_url) for _ in range(THREADS - 1))]
    for ledger in ledgers:
        ledger.task(lambda ctx, tenant, n: None, name="call", queue="q", group="{tenant}")
    yield ledgers
    for ledger in ledgers:
        ledger.close()


def race(ledgers: list[Ledger], batch: int) -> list[list]:
    """Every thread claims ``batch`` jobs ROUNDS times, each round started at the same moment;
    the jobs each thread got, per round (nothing is completed: leases only accumulate)."""
    start = threading.Barrier(len(ledgers))
    got: list[list] = [[] for _ in ledgers]
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            for _ in range(ROUNDS):
                start.wait(timeout=60)
                got[i].extend(ledgers[i].backend.jobs.claim(["q"], f"w{i}", batch))
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)
            start.abort()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(ledgers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    return got


def fill(ledger: Ledger) -> None:
    ledger.enqueue_many(
        "call",
        [
            {"payload": {"tenant": f"t{g}", "n": n}, "key": f"t{g}:{n}"}
            for g in range(GROUPS)
            for n in range(40)
        ],
    )


def test_racing_claims_never_exceed_a_groups_leased_limit(racers):
    fill(racers[0])
    racers[0].set_group_limits("q", max_leased=LIMIT)
    got = race(racers, batch=5)
    claimed = [job for jobs in got for job in jobs]
    assert len({j.id for j in claimed}) == len(claimed), "a job was claimed twice"
    per_group = Counter(j.group for j in claimed)
    # Nothing was completed, so every claim of a group is a lease still held.
    assert per_group == dict.fromkeys([f"t{g}" for g in range(GROUPS)], LIMIT), per_group


def test_racing_claims_never_spend_more_tokens_than_a_bucket_holds(racers):
    fill(racers[0])
    # A slow refill: within the race a bucket gains well under one token.
    racers[0].set_group_limits("q", rate=0.001, burst=LIMIT)
    got = race(racers, batch=5)
    claimed = [job for jobs in got for job in jobs]
    assert len({j.id for j in claimed}) == len(claimed), "a job was claimed twice"
    per_group = Counter(j.group for j in claimed)
    assert per_group == dict.fromkeys([f"t{g}" for g in range(GROUPS)], LIMIT), per_group
