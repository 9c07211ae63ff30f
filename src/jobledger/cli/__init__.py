"""The ``jobledger`` command: one subcommand per operator action, each a thin wrapper.

Every command takes ``--url`` (default ``JOBLEDGER_URL``, else ``sqlite:///jobledger.db``). Errors
are one line on stderr and exit code 2 — never a traceback (set ``JOBLEDGER_DEBUG=1`` to see it).
"""

from __future__ import annotations

import os
import sys
import traceback

import click

from ..errors import JobledgerError
from . import actions, demo, drill, keys, queues, serve, subscriptions, views  # noqa: F401  (operator commands, demo, drill)  # noqa: F401  (registers: keys, queues, serve)
from . import brokers as _brokers  # noqa: F401  (registers: relay, consume, outbox)
from . import groups as _groups  # noqa: F401  (registers: groups list, limits, pause, resume)
from . import history as _history  # noqa: F401  (registers: history check)
from . import schedules as _schedules  # noqa: F401  (registers: schedules, scheduler)
from . import worker as _worker  # noqa: F401  (registers: migrate, worker)
from .base import cli

__all__ = ["cli", "main"]


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``jobledger`` script."""
    try:
        code = cli.main(args=argv, prog_name="jobledger", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        sys.exit(0)
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        click.echo(f"error: {exc.format_message()}{hint}", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except JobledgerError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - a bug: one line, and the traceback on request
        if os.environ.get("JOBLEDGER_DEBUG"):
            traceback.print_exc()
        click.echo(
            f"internal error: {type(exc).__name__}: {exc} (JOBLEDGER_DEBUG=1 shows the traceback)",
            err=True,
        )
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
