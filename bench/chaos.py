"""Longer chaos runs than CI's (SPEC §8 drill 7): many jobs, many SIGKILLs, several crashes of a
private PostgreSQL server. The same harness as tests/chaos.

    .venv/bin/python bench/chaos.py --backend both --jobs 20000 --db-restarts 3
    .venv/bin/python bench/chaos.py --backend sqlite --jobs 5000 --history /tmp/chaos.jsonl

Prints the figures of each run (jobs, kills, restarts, attempts, lease expiries, duplicates) and
exits 1 if any run lost a job or repeated an effect. ``--history`` writes each run's jobs,
attempts, events, effects and provider messages as JSON lines (one file per backend).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from tests.support.chaos import ChaosConfig, run_chaos  # noqa: E402
from tests.support.pgcluster import PrivatePostgres  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--lease", type=float, default=2.0, help="lease seconds")
    parser.add_argument(
        "--kill-every",
        type=int,
        nargs=2,
        default=(60, 150),
        metavar=("MIN", "MAX"),
        help="SIGKILL a worker each time this many more jobs have finished (drawn uniformly)",
    )
    parser.add_argument("--db-restarts", type=int, default=2, help="PostgreSQL crashes per run")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--stall",
        type=float,
        default=60.0,
        help="fail when no job has finished for this many seconds (of an idle machine's time)",
    )
    parser.add_argument("--history", type=Path, default=None, help="write JSON lines here")
    args = parser.parse_args()

    restarts = tuple((i + 1) / (args.db_restarts + 1) for i in range(args.db_restarts))
    config = ChaosConfig(
        jobs=args.jobs,
        workers=args.workers,
        concurrency=args.concurrency,
        lease_seconds=args.lease,
        kill_every=tuple(args.kill_every),  # type: ignore[arg-type]
        db_restart_at=restarts,
        stall_seconds=args.stall,
        seed=args.seed,
    )
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    failed = False
    for backend in backends:
        workdir = Path(tempfile.mkdtemp(prefix=f"jobledger-chaos-{backend}-"))
        server = None
        try:
            if backend == "sqlite":
                url = f"sqlite:///{workdir / 'chaos.db'}"
            else:
                server = PrivatePostgres()
                with psycopg.connect(server.url, autocommit=True) as conn:
                    conn.execute("CREATE DATABASE chaos")
                url = server.url.rsplit("/", 1)[0] + "/chaos"
            run = run_chaos(url, workdir, config, server=server, say=print)
            print(run.figures.line(), flush=True)
            if args.history:
                path = args.history.with_name(f"{args.history.stem}-{backend}{args.history.suffix}")
                print(f"history: {run.export_jsonl(path)} lines in {path}")
            if run.problems:
                failed = True
                print(f"PROBLEMS ({len(run.problems)}):", *run.problems[:30], sep="\n  ")
                print(run.log_tail)
        finally:
            if server is not None:
                server.close()
            shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
