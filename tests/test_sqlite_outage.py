"""A SQLite connection that met a broken file is dropped at once, whatever the outage probe
finds: it does not recover by itself, and a probe that met another connection's lock counts the
file as readable, so the outage may never be declared (and its recovery never renew the
connections). Found by the public-scrape outage test under load."""

from __future__ import annotations

import pytest

from jobledger import Ledger
from jobledger.errors import BackendUnavailable

from .support.outage import SqliteCut


def test_a_connection_that_met_a_broken_file_is_opened_afresh_after_it_is_whole(tmp_path):
    cut = SqliteCut(tmp_path)
    ledger = Ledger(cut.url)
    ledger.migrate()
    try:
        job = ledger.enqueue("t", {"n": 1}, key="a").id
        db = ledger.backend.db
        db.outage._probe = lambda: None  # a probe that met a lock: the file "answers"
        assert ledger.job(job) is not None  # this thread's connection is open and warm
        cut.cut()
        with pytest.raises(BackendUnavailable, match="not a database"):
            ledger.job(job)
        assert not db.outage.down  # the probe never said so: nothing renews the connections
        cut.restore()
        assert ledger.job(job) is not None
    finally:
        ledger.close()
