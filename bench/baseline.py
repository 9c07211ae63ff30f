"""jobledger at another git revision, to measure beside the working tree (``--baseline REV``).

The revision's ``src/`` is taken with ``git archive`` into a cache directory (once per commit:
default ``~/.cache/jobledger-bench/baseline/<commit>``, or ``$BENCH_BASELINE_DIR``), compiled,
and put first on the ``PYTHONPATH`` of the adapter and worker processes of that system. They
run with the same interpreter and the same installed dependencies as the working tree's, and
the same adapter (``bench/adapters/ours.py``): the only thing that differs between the two
sets of figures is jobledger's own code.
"""

from __future__ import annotations

import compileall
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .harness import ROOT, BenchError


@dataclass(frozen=True)
class Baseline:
    """An unpacked revision: ``path`` is the directory to put on ``PYTHONPATH``."""

    rev: str
    commit: str
    path: Path

    @property
    def label(self) -> str:
        return self.rev if self.commit.startswith(self.rev) else f"{self.rev} ({self.commit[:7]})"


def cache_dir() -> Path:
    return Path(
        os.environ.get(
            "BENCH_BASELINE_DIR", Path.home() / ".cache" / "jobledger-bench" / "baseline"
        )
    )


def _git(*args: str) -> bytes:
    try:
        proc = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, check=False)
    except OSError as exc:
        raise BenchError(f"--baseline needs git: {exc}") from None
    if proc.returncode != 0:
        raise BenchError(
            f"git {' '.join(args)} failed: {proc.stderr.decode(errors='replace').strip()}"
        )
    return proc.stdout


def prepare(rev: str) -> Baseline:
    """Resolve ``rev`` to a commit and unpack its ``src/`` (once: later runs reuse it)."""
    commit = _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").decode().strip()
    target = cache_dir() / commit
    src = target / "src"
    if not (target / "complete").exists():
        archive = _git("archive", "--format=tar", commit, "src")
        partial = target.with_name(f"{commit}.partial-{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(partial, filter="data")
        # Compiled now, so that neither side's first process pays for writing .pyc files.
        compileall.compile_dir(partial / "src", quiet=1)
        (partial / "complete").touch()
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    found = subprocess.run(
        [sys.executable, "-c", "import jobledger; print(jobledger.__file__)"],
        env=dict(os.environ, PYTHONPATH=str(src)),
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0 or not found.stdout.strip().startswith(str(src)):
        raise BenchError(
            f"jobledger at {rev} does not import from {src}: {found.stdout}{found.stderr}"
        )
    return Baseline(rev, commit, src)


def prepare_or_say(rev: str) -> Baseline | None:
    """``prepare(rev)``, or None after saying on stderr why it could not be (the bench then
    exits with status 2)."""
    try:
        return prepare(rev)
    except BenchError as exc:
        print(f"error: --baseline {rev}: {exc}", file=sys.stderr)
        return None


def stamp(event: str) -> str:
    """``# <event> <UTC time>, load <1, 5 and 15 minutes>``: the first and last line of a
    bench's table."""
    load = "/".join(f"{x:.2f}" for x in os.getloadavg())
    return f"# {event} {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load {load}"


def run_case(module: str, args: list[str], pythonpath: str | None) -> dict[str, Any]:
    """``python -m <module> <args>`` in a process of its own, with ``pythonpath`` (a baseline
    revision's directory, or None: the working tree) first on its path; the JSON object its
    last line prints."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [pythonpath, str(ROOT), os.environ.get("PYTHONPATH")])
    )
    command = [sys.executable, "-m", module, *args]
    proc = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BenchError(f"{' '.join(command)} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]
