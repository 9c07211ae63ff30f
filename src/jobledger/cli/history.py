"""``jobledger history check``: hold histories of runs under faults against the guarantees."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .base import open_ledger
from .params import json_option


@click.group()
def history() -> None:
    """Histories of runs under faults (JSON lines) and their checker.

    Workers write their side with `jobledger worker --history PATH` (or JOBLEDGER_HISTORY);
    a test harness adds enqueues, injected faults, the provider's effects and a snapshot of the
    ledger's tables. See docs/guarantees.md for the format.
    """


@history.command("check")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--url",
    default=None,
    help="Also hold the history against this ledger's tables now (when it has no snapshot).",
)
@click.option(
    "--together",
    is_flag=True,
    help="Treat all PATHS as one history (default: each PATH, file or directory, is one).",
)
@click.option("--examples", type=click.IntRange(0), default=5, show_default=True,
              help="Violations shown per kind.")  # fmt: skip
@json_option
def check_command(
    paths: tuple[Path, ...], url: str | None, together: bool, examples: int, as_json: bool
) -> None:
    """Check histories and print a summary of each.

    Each PATH is one history: a .jsonl file, or a directory whose .jsonl files (one per
    process) make up one run. Reports lost jobs, unfinished jobs, effects delivered twice,
    completions by stale tokens, double completions, two leases for one attempt, acknowledged
    writes the ledger lacks, refused writes it applied, and keys with more than one job.
    Exit status 1 when any violation is found.
    """
    from ..testing.history import check_paths, ledger_records

    groups = [list(paths)] if together else [[p] for p in paths]
    live = None
    if url:
        live = [{"event": "snapshot", "expect_final": False}, *ledger_records(open_ledger(url))]
    reports = [
        check_paths(group, ", ".join(str(p) for p in group), extra_records=live) for group in groups
    ]
    violations = sum(len(r.violations) for r in reports)
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in reports], indent=2))
    else:
        for report in reports:
            click.echo(report.summary(examples))
        if len(reports) > 1:
            click.echo(
                f"{len(reports)} histories, {sum(r.records for r in reports)} records, "
                f"{sum(sum(r.faults.values()) for r in reports)} faults, violations: {violations}"
            )
    if violations:
        sys.exit(1)
