"""Running the ``jobledger`` command in this process, as a user would from a shell."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import pytest

from jobledger.cli import main


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture
def cli(capsys, monkeypatch):
    """``cli(*args)`` runs ``jobledger ARGS`` and returns its exit code, stdout and stderr."""
    monkeypatch.delenv("JOBLEDGER_URL", raising=False)
    monkeypatch.setenv("JOBLEDGER_ACTOR", "ana")
    monkeypatch.setenv("COLUMNS", "200")

    def run(*args: str) -> Run:
        capsys.readouterr()
        # Commands that run a service point the root logger at this test's captured stderr;
        # put it back, so that later tests do not log into a closed stream.
        root = logging.getLogger()
        handlers, level = root.handlers[:], root.level
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        else:  # pragma: no cover - main always exits
            code = 0
        finally:
            root.handlers[:] = handlers
            root.setLevel(level)
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run


def assert_one_line_error(run: Run, *fragments: str) -> None:
    """The contract for every CLI error: exit code 2, one line on stderr, no traceback."""
    assert run.code == 2, (run.code, run.out, run.err)
    lines = run.err.strip().splitlines()
    assert len(lines) == 1, run.err
    assert lines[0].startswith("error: "), run.err
    assert "Traceback" not in run.err + run.out
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
