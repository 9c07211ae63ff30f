"""The ``jobledger`` command: one subcommand per operator action, each a thin wrapper.

Every command takes ``--url`` (default ``JOBLEDGER_URL``, else ``sqlite:///jobledger.db``). Errors
are one line on stderr and exit code 2 — never a traceback (set ``JOBLEDGER_DEBUG=1`` to see it).
Ctrl-C ends a command with exit code 130, without a traceback, at any point of its start-up.

Nothing is imported here but what ``main`` needs: each subcommand's module is imported when it
runs (see ``base.COMMANDS``), so that ``jobledger --help`` and short commands start quickly.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["cli", "main"]


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``jobledger`` script."""
    try:
        from ._main import run

        code = run(argv)
    except KeyboardInterrupt:
        # Ctrl-C anywhere, importing included: no traceback. Long-running commands catch the
        # signal themselves and stop gracefully; this is the rest.
        sys.exit(130)
    sys.exit(code)


def __getattr__(name: str) -> Any:
    if name == "cli":  # the root click group, for click.testing
        from .base import cli

        return cli
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
