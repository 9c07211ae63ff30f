"""Test and demo machinery, kept installable because operators and users need it too.

- ``FakeProvider`` (``fakeprovider``): an e-mail provider on 127.0.0.1 that honours
  ``Idempotency-Key``, can answer 429, time out or refuse, and records what it accepted;
- fault points (``configure_faults``, ``FaultInjected``): make a process fail at a named place
  on purpose; jobledger's own points are listed in ``jobledger._faults``;
- the history recorder and checker (``history``): record a run under faults as JSON lines and
  check it for lost jobs, duplicate effects, stale completions and keys with several jobs
  (``jobledger history check``);
- ``drill`` (``jobledger drill``) and ``demo`` (``jobledger demo``): the SPEC drills against a
  real database, and the weekly digest story;
- ``processes``: worker processes started as ``jobledger worker APP`` for the drill and the demo.

Nothing here is imported by the rest of jobledger but the CLI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._faults import FaultInjected, fault_point
from .._faults import configure as configure_faults
from .._lazy import lazy_attributes

if TYPE_CHECKING:
    from .fakeprovider import FakeProvider, ProviderScript
    from .history import HistoryRecorder, HistoryReport, check_paths

__all__ = [
    "FakeProvider",
    "FaultInjected",
    "HistoryRecorder",
    "HistoryReport",
    "ProviderScript",
    "check_paths",
    "configure_faults",
    "fault_point",
]

_LAZY = {
    "FakeProvider": "fakeprovider",
    "ProviderScript": "fakeprovider",
    "HistoryRecorder": "history",
    "HistoryReport": "history",
    "check_paths": "history",
}


# The provider brings a web server with it: imported when first asked for, not before.
__getattr__ = lazy_attributes(__name__, _LAZY, globals())
