"""The asyncio section of docs/integrations.md runs as written, on PostgreSQL."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from .support.waiting import run

ROOT = Path(__file__).resolve().parents[1]


def section_code(doc: Path, heading: str) -> str:
    """The first ```python block after ``heading`` in ``doc``."""
    text = doc.read_text()
    start = text.index(f"\n{heading}\n")
    block = re.search(r"```python\n(.*?)```", text[start:], re.S)
    assert block, f"no python block under {heading!r} in {doc}"
    return block.group(1)


def test_the_asyncio_section_runs(pg, tmp_path):
    code = section_code(ROOT / "docs" / "integrations.md", "## asyncio")
    script = tmp_path / "asyncio_section.py"
    script.write_text(code)
    schema, url = pg.new_schema_url()
    try:
        proc = run(
            [sys.executable, str(script)],
            env={**os.environ, "JOBLEDGER_URL": url},
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
    finally:
        pg.drop_schema(schema)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "['1001']" in out
    assert "100 created" in out and "created again: False" in out
    assert "refused: key '2000' already exists" in out
    assert "101 receipts sent" in out and "done 1 attempt" in out
