"""Without OpenTelemetry nothing changes and nothing is imported (issue 17, item 7): a process
that does not use it (whether the ``otel`` extra is installed or not) enqueues, runs a worker
and serves HTTP without importing ``opentelemetry``; with the package hidden, as if the extra
were not installed, everything works the same. Each case runs in a fresh interpreter: this
test process has imported OpenTelemetry for the other tracing tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ..support.processes import ROOT

HIDE = """
import importlib.abc, sys

class Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError(f"{name} is not installed (hidden by the test)")
        return None

sys.meta_path.insert(0, Hidden())
try:
    import opentelemetry.trace
except ImportError:
    pass
else:
    raise SystemExit("the finder did not hide opentelemetry")
"""

APP = """
import json, sys
from jobledger import Ledger
from jobledger.observability.tracing import current_trace_context

ledger = Ledger(sys.argv[1])
ran = []

@ledger.task(queue="mail")
def send(ctx, n):
    ran.append(n)

send.enqueue({"n": 1}, key="a")
ledger.enqueue_many(send, [{"payload": {"n": 2}, "key": "b"}])
stats = ledger.run_worker(burst=True, handle_signals=False)
assert sorted(ran) == [1, 2] and stats.completed == 2, (ran, stats)
assert current_trace_context() is None and ledger.attempt_tracer() is None

from starlette.testclient import TestClient
from jobledger.http import create_app

with TestClient(create_app(ledger)) as client:
    answer = client.get("/healthz", headers={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"})
    assert answer.status_code == 200, answer.text

from jobledger.push import PushService
PushService(ledger)  # built without tracing
ledger.close()
print("OTEL " + json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")))
"""


def _run(code: str, url: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("JOBLEDGER_URL", None)
    proc = subprocess.run(
        [sys.executable, "-c", code, url],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = [x for x in proc.stdout.splitlines() if x.startswith("OTEL ")][-1]
    return list(json.loads(line.removeprefix("OTEL ")))


def test_a_process_that_does_not_trace_imports_no_opentelemetry(db_url):
    pytest.importorskip("opentelemetry.trace")  # installed here (the dev extra) but unused
    assert _run(APP, db_url) == []


def test_everything_works_with_opentelemetry_hidden(db_url):
    assert _run(HIDE + APP, db_url) == []
