"""The other queues: installed into a virtualenv outside the repository, driven by adapters.

``--compare`` creates the virtualenv (default ``~/.cache/jobledger-bench/peers``, or
``$BENCH_PEERS_VENV``) and pip-installs each queue that is not there yet. A queue that does not
install (oban needs Python 3.12, for one) is reported and skipped, not fatal.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: peer → (distribution to pip install, extra requirements); its adapter is
#: ``bench.adapters.peer_<peer>``
PEERS = {
    "pgqueuer": ("pgqueuer", ["asyncpg"]),
    "procrastinate": ("procrastinate", ["psycopg[binary]", "psycopg-pool"]),
    "chancy": ("chancy", ["psycopg[binary]", "psycopg-pool"]),
    "oban": ("oban", []),
}


def default_venv() -> Path:
    return Path(
        os.environ.get("BENCH_PEERS_VENV", Path.home() / ".cache" / "jobledger-bench" / "peers")
    )


def ensure(venv: Path, names: list[str], log: list[str]) -> dict[str, str]:
    """Install what is missing; return {peer: version} for the peers that are usable."""
    python = venv / "bin" / "python"
    if not python.exists():
        venv.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    usable = {}
    for name in names:
        dist, extras = PEERS[name]
        version = _version(python, dist)
        if version is None:
            proc = subprocess.run(
                [str(python), "-m", "pip", "install", "--quiet", dist, *extras],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                reason = (proc.stderr.strip().splitlines() or ["pip failed"])[-1]
                log.append(f"{name}: not installed ({reason})")
                continue
            version = _version(python, dist)
        if version is not None:
            usable[name] = version
    return usable


def _version(python: Path, dist: str) -> str | None:
    proc = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
        capture_output=True,
        text=True,
    )
    return proc.stdout.strip() if proc.returncode == 0 else None
