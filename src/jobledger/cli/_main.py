"""Running the root group: every error becomes one line on stderr and an exit code."""

from __future__ import annotations

import os
import traceback

import click

from ..errors import JobledgerError
from .base import cli


def run(argv: list[str] | None) -> int:
    """Run ``jobledger ARGV``; return the exit code (0 done, 1 a broken promise or a bug, 2 the
    command could not run, 130 interrupted)."""
    try:
        code = cli.main(args=argv, prog_name="jobledger", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        # No command (`jobledger`, `jobledger queues`): the help, on stderr, and exit 2, as
        # click does: nothing ran, and `jobledger $COMMAND` with an empty variable in a script
        # must not pass for a success. `--help` asks for it: stdout, exit 0.
        click.echo(exc.format_message(), err=True)
        return 2
    except click.UsageError as exc:
        hint = f" Try '{exc.ctx.command_path} --help' for help." if exc.ctx is not None else ""
        click.echo(f"error: {exc.format_message()}{hint}", err=True)
        return 2
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        return 2
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except JobledgerError as exc:
        click.echo(f"error: {exc}", err=True)
        return 2
    except Exception as exc:  # noqa: BLE001 - a bug: one line, and the traceback on request
        if os.environ.get("JOBLEDGER_DEBUG"):
            traceback.print_exc()
        click.echo(
            f"internal error: {type(exc).__name__}: {exc} (JOBLEDGER_DEBUG=1 shows the traceback)",
            err=True,
        )
        return 1
    return code if isinstance(code, int) else 0
