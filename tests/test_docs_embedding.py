"""The code of docs/integrations.md, section "Embedding a worker", runs as written: each Python
block in its own interpreter, in a directory of its own (its SQLite file there)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from .support.processes import ROOT
from .support.waiting import run

SECTION = "## Embedding a worker"

# The app that the block about several processes names.
MYAPP = """
from jobledger import Ledger

ledger = Ledger("sqlite:///app.db")


@ledger.task(queue="emails")
def send_welcome(ctx, user_id: int) -> None:
    pass
"""

# Appended to the block that defines a lifespan: run it, as a server would.
LIFESPAN = """
from starlette.testclient import TestClient

with TestClient(app):
    print("lifespan ran")
"""


def _blocks() -> list[str]:
    text = (ROOT / "docs" / "integrations.md").read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start : end if end != -1 else len(text)]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


BLOCKS = _blocks()


def test_the_section_has_its_examples():
    assert len(BLOCKS) == 5


@pytest.mark.parametrize("n", range(len(BLOCKS)))
def test_a_block_runs(n: int, tmp_path: Path):
    code = BLOCKS[n]
    if "lifespan" in code:
        code += LIFESPAN
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "tasks.py").write_text(MYAPP)
    (tmp_path / "block.py").write_text(code)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("JOBLEDGER_URL", None)
    proc = run([sys.executable, "block.py"], timeout=60, cwd=tmp_path, env=env, text=True)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    if "completed" in code:
        assert "completed 1" in out, out
    if "on loop" in code:
        [app_loop] = re.findall(r"the application's loop is (\d+)", out)
        [handler_loop] = re.findall(r"on loop (\d+)", out)
        assert app_loop == handler_loop, out
    if "lifespan" in code:
        assert "lifespan ran" in out, out
    if "WorkerProcesses" in code:
        assert "worker processes stopped with status 0" in out, out
