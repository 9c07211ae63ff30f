"""Histories for the fault tests: where they go, how the harness records, how a test checks.

With ``JOBLEDGER_HISTORY_DIR`` set (CI sets it), each test writes its history to a directory of
its own below it, so that CI can print the checker's summary of every run afterwards; otherwise
to the test's temporary directory.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from jobledger import BackendUnavailable, Enqueued, Ledger
from jobledger.testing.history import HistoryRecorder, HistoryReport, check_paths


def history_dir(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    root = os.environ.get("JOBLEDGER_HISTORY_DIR")
    # By the node id (file and name): tests of one name in two files, which may run at once
    # in two test processes, never share a directory.
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.nodeid).strip("-")
    path = Path(root) / name if root else tmp_path / "history"
    path.mkdir(parents=True, exist_ok=True)
    for old in path.glob("*.jsonl"):  # a rerun of the same test starts a new history
        old.unlink()
    return path


def enqueue(
    ledger: Ledger, recorder: HistoryRecorder, task: str, payload: dict, key: str
) -> Enqueued | None:
    """Enqueue and record the outcome: acknowledged, or unknown (the call raised)."""
    queue = ledger.get_task(task).queue
    try:
        result = ledger.enqueue(task, payload, key=key)
    except BackendUnavailable as exc:
        recorder.enqueue_failed(queue, key, exc)
        return None
    recorder.enqueued(queue, key, result)
    return result


def checked(path: Path) -> HistoryReport:
    """Check the history in ``path``; print its summary (shown by pytest on failure)."""
    report = check_paths([path], path.name)
    print(report.summary())
    return report


def assert_clean(path: Path) -> HistoryReport:
    report = checked(path)
    assert report.ok, report.summary(examples=20)
    return report
