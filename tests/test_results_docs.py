"""The example of docs/integrations.md's "Results" section runs and prints what it says."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from .support.processes import ROOT


def _section_code(path: Path, heading: str) -> str:
    text = path.read_text(encoding="utf-8")
    section = text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    [code] = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    return code


def test_the_results_example_runs(tmp_path):
    code = _section_code(ROOT / "docs" / "integrations.md", "## Results")
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # The keys in the database's order (PostgreSQL's jsonb keeps its own): compare values.
    assert ast.literal_eval(lines[0]) == {
        "invoice_id": 4187,
        "pdf": "s3://invoices/4187.pdf",
        "pages": 3,
    }, proc.stdout
    assert lines[1] == "dead the payment provider refused the refund", proc.stdout
