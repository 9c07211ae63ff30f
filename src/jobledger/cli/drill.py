"""``jobledger drill``: prove on a real database that the ledger keeps its promises."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from .base import open_ledger
from .params import console, echo_json, json_option, url_option

if TYPE_CHECKING:
    from ..testing.drill.runner import DrillResult


@click.command()
@url_option
@click.option(
    "--only",
    type=click.IntRange(1, 5),
    multiple=True,
    help="Run only this drill (1 to 5; repeatable); default all.",
)
@click.option(
    "--keep", is_flag=True, help="Keep the drills' jobs for inspection (default: delete them)."
)
@json_option
def drill(url: str, only: tuple[int, ...], keep: bool, as_json: bool) -> None:
    """Run the drills of SPEC §8 (1–5) against the database and print each as passed or failed,
    with the evidence (rows, attempts, what the provider saw).

    \b
    1  enqueue the same key twice → one row
    2  kill a worker after its claim → reclaimed only after the lease expires
    3  kill a worker between the effect and completion → the effect happens once
    4  10 jobs, lease 3: complete 2, let 1 lease expire, restart → 10 done
    5  429 ×3 then 400 → backoff, dead; a redrive does not repeat the effect

    Each drill works in a queue of its own (drill-<run>-<n>) with its own worker processes
    (SIGKILLed on purpose) and a fake provider on 127.0.0.1, then deletes its jobs. Production
    queues are not touched. Run it in staging after every deploy; it takes about 20 seconds.
    Exits 1 if any drill failed.
    """
    from ..testing.drill.runner import run_drills

    ledger = open_ledger(url)
    out = console()

    def show(result: DrillResult) -> None:
        if as_json:
            return
        verdict = "[green]passed[/]" if result.passed else "[bold red]FAILED[/]"
        out.print(f"drill {result.number}  {result.title}  {verdict}  ({result.seconds} s)")
        for line in result.evidence:
            out.print(
                f"    {line}", markup=False, style="red" if line.startswith("FAILED") else None
            )

    if not as_json:
        out.print(f"jobledger drill on {ledger.url.redacted}")
    results = run_drills(ledger, only or None, keep=keep, on_result=show)
    failed = [r.number for r in results if not r.passed]
    if as_json:
        echo_json(
            {
                "url": ledger.url.redacted,
                "passed": not failed,
                "drills": [
                    {
                        "number": r.number,
                        "title": r.title,
                        "passed": r.passed,
                        "seconds": r.seconds,
                        "evidence": r.evidence,
                    }
                    for r in results
                ],
            }
        )
    elif failed:
        out.print(f"[bold red]{len(failed)} of {len(results)} drills failed:[/] {failed}")
    else:
        out.print(f"[bold green]all {len(results)} drills passed[/]")
    if failed:
        sys.exit(1)
