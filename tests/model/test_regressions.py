"""Counter-examples the stateful test found (or would find), kept as plain tests on both backends.

Each replays a short history through the same machine, so that a regression fails fast and
deterministically instead of waiting for hypothesis to rediscover it.
"""

from __future__ import annotations

from jobledger import Ledger

from .test_stateful import LedgerMachine


def machine(db_url: str) -> LedgerMachine:
    ledger = Ledger(db_url)
    ledger.migrate()
    ledger.close()
    LedgerMachine.url = db_url
    m = LedgerMachine()
    m.setup()
    return m


def test_retry_with_the_budget_spent_is_dead(db_url):
    """Mutation found: ``attempts <= attempt_limit`` in job_fail kept a spent job pending."""
    m = machine(db_url)
    try:
        for _ in range(2):
            m.work_one(retry=True, delay=0)
            m.backend_agrees_with_model()
        assert m.model.jobs[min(m.model.jobs)].state == "dead"
    finally:
        m.teardown()


def test_stale_heartbeat_after_the_job_was_leased_again(db_url):
    """Mutation found: a heartbeat matching id and state but not token renewed another's lease."""
    m = machine(db_url)
    try:
        m.claim(1)
        m.advance(31)
        m.rescue()
        m.claim(2)  # both jobs: the rescued one is leased again, under a new token
        m.advance(10)
        m.heartbeat(0, True)  # the first lease, now stale: must not extend the second
        m.backend_agrees_with_model()
        m.complete(0, True)
        m.fail(0, True, True, 0)
        m.backend_agrees_with_model()
    finally:
        m.teardown()


def test_released_job_keeps_its_budget_after_redrive(db_url):
    m = machine(db_url)
    try:
        m.claim(1)
        m.release(0, False)
        m.work_one(retry=False, delay=0)
        m.redrive(0)
        m.backend_agrees_with_model()
    finally:
        m.teardown()
