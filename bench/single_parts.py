"""What each part of the single enqueue costs on PostgreSQL, against a bare ``INSERT``.

    python -m bench.single_parts                 # 30 rounds of 100 calls per variant
    python -m bench.single_parts --rounds 3 --calls 20

``ledger.enqueue`` of one job is one prepared statement (``job_insert_one``) and the Python
around it. The statement does four things a bare ``INSERT`` of the same row does not: it looks
for the key among the jobs and among the live tombstones (one job per key, and a pruned key is
not reused while its tombstone lives), it inserts with ``ON CONFLICT DO NOTHING`` (a key that
another transaction inserts meanwhile), and it sends a ``NOTIFY`` (an idle worker starts the
job at once). This bench takes them away one at a time, and adds them one at a time to the bare
``INSERT``, each variant sent the way ``ledger.enqueue`` sends its statement (libpq's
``PQexecPrepared``, autocommit, one connection), in alternating rounds so that every variant
meets the disk's commits of the same minutes. Beside them, the whole ``ledger.enqueue`` call,
and its Python alone in a tight loop with the statement not sent (what the call would cost on a
server that answered at once).

A diagnostic, not a configuration: every part taken away here is a guarantee. The figure it
gives is the ceiling of the single enqueue against a bare ``INSERT``: the statement with every
check, as if the call had no Python at all (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from jobledger import Ledger
from jobledger._records import NewJob
from jobledger.backends.postgres import prepared
from jobledger.backends.postgres.newjob import new_job_values
from jobledger.backends.postgres.prepared import PreparedStatement

from .floor import _BARE_INSERT, PUBLIC_TABLES, _pg_sql
from .harness import fresh_database

_NOTIFY = ", pg_notify(%(channel)s, %(queue)s)"
_KEY_PROBE = "NOT EXISTS (SELECT 1 FROM public.jobledger_jobs WHERE queue = %(queue)s AND key = %(key)s)\n  AND "
_TOMBSTONE_PROBE = """
  AND NOT EXISTS (
    SELECT 1 FROM public.jobledger_tombstones
    WHERE queue = %(queue)s AND key = %(key)s AND expires_at > COALESCE(%(now)s::timestamptz, now())
  )"""


def _as_ctes(one: str) -> str:
    """The statement as it was written before 2026-12-07: the same checks, the key's rows in a
    common table expression (``known``) beside one of the insert, the ``NOTIFY`` outside both."""
    insert = one[: one.index("WHERE NOT EXISTS")]
    probes = one[one.index("WHERE NOT EXISTS") : one.index("ON CONFLICT")]
    jobs_probe = "SELECT 1 FROM public.jobledger_jobs WHERE queue = %(queue)s AND key = %(key)s"
    tombstone_probe = probes[probes.index("SELECT 1 FROM public.jobledger_tombstones") :]
    tombstone_probe = tombstone_probe[: tombstone_probe.rindex(")")].strip()
    return (
        f"WITH known AS ({jobs_probe} UNION ALL {tombstone_probe}), inserted AS ("
        f"{insert} WHERE NOT EXISTS (SELECT 1 FROM known) "
        "ON CONFLICT (queue, key) DO NOTHING RETURNING id) "
        "SELECT id, pg_notify(%(channel)s, %(queue)s) FROM inserted"
    )


def variants() -> dict[str, tuple[str, str]]:
    """Each variant: what it is, and its statement (jobledger's own, with a part taken away,
    or the floor's bare ``INSERT`` with a part added)."""
    one = _pg_sql(PUBLIC_TABLES)["job_insert_one"]
    bare = _BARE_INSERT.format(jobs="public.jobledger_jobs", json="::jsonb", now="now()")
    for part in (_NOTIFY, _KEY_PROBE, _TOMBSTONE_PROBE):
        if one.count(part) != 1:
            raise SystemExit(f"job_insert_one changed: this bench no longer finds {part!r}")
    return {
        "bare": ("a bare INSERT of the row", bare),
        "bare_notify": (
            "the bare INSERT and a NOTIFY",
            bare.replace("RETURNING id", "RETURNING id, pg_notify(%(channel)s, %(queue)s)"),
        ),
        "bare_on_conflict": (
            "the bare INSERT, ON CONFLICT (queue, key) DO NOTHING",
            bare.replace("RETURNING id", "ON CONFLICT (queue, key) DO NOTHING RETURNING id"),
        ),
        "statement": ("jobledger's statement, every check (job_insert_one)", one),
        "as_ctes": ("the same checks as common table expressions (before)", _as_ctes(one)),
        "no_notify": ("the statement without its NOTIFY", one.replace(_NOTIFY, "")),
        "no_key_probe": ("the statement without its look for the key's job", one.replace(_KEY_PROBE, "")),
        "no_tombstone_probe": (
            "the statement without its look for a live tombstone",
            one.replace(_TOMBSTONE_PROBE, ""),
        ),
    }  # fmt: skip


def measure(dsn: str, rounds: int, calls: int) -> dict[str, float]:
    """Microseconds a call of each variant and of ``ledger.enqueue``, over ``rounds``
    alternating rounds of ``calls`` calls each; ``python_us``: the call's Python alone."""
    ledger = Ledger(dsn)
    ledger.migrate()
    job = NewJob("one", "", "noop", '{"n": 0}', 0, None, 3, 60.0, "c" * 32)
    params = new_job_values(job) | {"channel": "bench", "now": None}
    statements = {
        name: PreparedStatement(f"bench_part_{name}", text)
        for name, (_, text) in variants().items()
    }
    ledger.task(_noop, name="noop", queue="call")
    ledger.enqueue("noop", {"n": 0}, key="warm")  # the pool opened, the statement prepared
    spent: dict[str, float] = dict.fromkeys([*statements, "call"], 0.0)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:

            def sender(name: str, statement: PreparedStatement) -> Callable[[str], object]:
                # Each variant's jobs in a queue of its own, named after it.
                return lambda key: statement.rows(conn, params | {"queue": name, "key": key})

            series = {name: sender(name, s) for name, s in statements.items()}
            series["call"] = lambda key: ledger.enqueue("noop", {"n": 0}, key=key)
            for r in range(rounds):
                for name, call in series.items():
                    started = time.perf_counter()
                    for i in range(calls):
                        call(f"{r}-{i}")
                    spent[name] += time.perf_counter() - started
            # Every call inserted its job (a variant that inserted nothing would time nothing).
            rows: dict[str, int] = dict(
                conn.execute("SELECT queue, count(*) FROM jobledger_jobs GROUP BY queue")
            )
            for name in series:
                if rows.get(name, 0) < rounds * calls:
                    raise SystemExit(f"{name}: {rows.get(name, 0)} jobs of {rounds * calls}")
        python_us = _python_alone(ledger, rounds * calls)
    finally:
        ledger.close()
    figures = {name: seconds / (rounds * calls) * 1e6 for name, seconds in spent.items()}
    figures["python_us"] = python_us
    return figures


def _python_alone(ledger: Ledger, calls: int) -> float:
    """µs a ``ledger.enqueue`` call in a tight loop with its statement not sent: the
    parameters are converted as for sending, and the answer is a new job's."""
    # As defined on the class (``_values`` is a static method), to be put back as they were.
    result, rows = vars(PreparedStatement)["_result"], vars(PreparedStatement)["_values"]

    def unsent(self: PreparedStatement, conn: Any, values: dict[str, Any]) -> Any:
        return [prepared._param(values[name]) for name in self.params]

    PreparedStatement._result = unsent  # type: ignore[method-assign]
    PreparedStatement._values = staticmethod(lambda _: [(b"1", b"")])  # type: ignore[method-assign,assignment]
    try:
        best = float("inf")
        for attempt in range(3):
            started = time.perf_counter()
            for i in range(calls):
                ledger.enqueue("noop", {"n": 0}, key=f"unsent{attempt}-{i}")
            best = min(best, (time.perf_counter() - started) / calls * 1e6)
        return best
    finally:
        PreparedStatement._result = result  # type: ignore[method-assign]
        PreparedStatement._values = rows  # type: ignore[method-assign]


def _noop(ctx: Any, n: int) -> None:
    """The task ``ledger.enqueue`` names here (never run)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.single_parts",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rounds", type=int, default=30, help="alternating rounds")
    parser.add_argument("--calls", type=int, default=100, help="calls per variant per round")
    parser.add_argument("--runs", type=int, default=1, help="fresh databases, one after another")
    parser.add_argument("--out", help="write every run's figures here (JSON)")
    args = parser.parse_args(argv)
    runs = []
    for run in range(args.runs):
        with fresh_database("postgres") as dsn:
            figures = measure(dsn, args.rounds, args.calls)
        runs.append(figures)
        print(f"[run {run + 1}] {json.dumps(figures)}", flush=True)
    load = os.getloadavg()[0]
    median = {name: statistics.median(r[name] for r in runs) for name in runs[0]}
    print(
        f"\nOne job a call, autocommit, one connection; {args.rounds} alternating rounds of "
        f"{args.calls} calls, median of {args.runs} run(s) (load average {load:.2f} at the end)\n"
    )
    print(f"{'variant':<58} {'µs a call':>10} {'calls/s':>9} {'vs bare':>8}")
    described = {name: what for name, (what, _) in variants().items()}
    described["call"] = "ledger.enqueue, the whole call"
    for name, what in described.items():
        us = median[name]
        print(f"{what:<58} {us:>10.1f} {1e6 / us:>9,.0f} {median['bare'] / us:>7.3f}×")
    print(
        f"\nThe call's Python alone, in a tight loop, its statement not sent: "
        f"{median['python_us']:.1f} µs a call; between the statements above it cost "
        f"{median['call'] - median['statement']:.1f} µs (a core that waited on the server "
        f"runs the same Python slower)."
    )
    if args.out:
        Path(args.out).write_text(json.dumps({"runs": runs, "load": load}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
