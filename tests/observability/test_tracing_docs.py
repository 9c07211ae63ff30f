"""The OpenTelemetry example of docs/integrations.md runs as written, and its spans are what the
page says: the attempt's span links to the request's, and the handler's span is its child."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ..support.docs import section_code
from ..support.processes import ROOT


def test_the_opentelemetry_example_runs(tmp_path):
    pytest.importorskip("opentelemetry.sdk")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("JOBLEDGER_URL", None)
    proc = subprocess.run(
        [sys.executable, "-c", section_code("OpenTelemetry")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    decoder, spans, at = json.JSONDecoder(), {}, 0
    out = proc.stdout
    while at < len(out):
        if out[at].isspace():
            at += 1
            continue
        span, at = decoder.raw_decode(out, at)
        spans[span["name"]] = span
    assert set(spans) == {"POST /orders", "jobledger run send_receipt", "render receipt"}
    request, attempt = spans["POST /orders"], spans["jobledger run send_receipt"]
    [link] = attempt["links"]
    assert link["context"]["span_id"] == request["context"]["span_id"]
    assert attempt["attributes"]["jobledger.job.key"] == "receipt:4187"
    assert attempt["attributes"]["jobledger.outcome"] == "done"
    assert spans["render receipt"]["parent_id"] == attempt["context"]["span_id"]
