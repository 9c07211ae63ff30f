"""A monotonic clock that moves only when a test moves it (``clock.t += …``): for the claim
cursors' schedules of scans from the start."""

from __future__ import annotations


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t
