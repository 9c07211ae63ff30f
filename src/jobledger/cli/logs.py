"""Logging for CLI processes: readable lines on a terminal."""

from __future__ import annotations

import logging
import sys


def setup_logging(level: str = "info", fmt: str = "console") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
