"""A job's attempts as a timeline: one bar per attempt on a shared time axis, coloured by
outcome, with the gaps between them (backoff, waiting for a worker) visible as space."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from ..._records import Attempt, JobRow
from .charts import GAP, TICK_FONT_NARROW, text_width

__all__ = ["Timeline", "attempt_timeline"]

WIDTH = 640
#: A row per attempt, tall enough for its label at the narrow screen's larger font.
ROW = 30
BAR = 20
RIGHT = 10


@dataclass
class Span:
    y: float
    x: float
    width: float
    kind: str
    label: str
    title: str


@dataclass
class Timeline:
    spans: list[Span] = field(default_factory=list)
    width: int = WIDTH
    height: int = 0
    left: float = 0.0
    bar: int = BAR
    start: datetime | None = None
    end: datetime | None = None


def attempt_timeline(attempts: Sequence[Attempt], job: JobRow, now: datetime) -> Timeline:
    """From the job's creation to its last attempt's end (or now, while one runs)."""
    timeline = Timeline()
    if not attempts:
        return timeline
    start = min(job.created_at, attempts[0].started_at)
    end = max([a.finished_at or now for a in attempts] + [attempts[-1].started_at])
    span = max((end - start).total_seconds(), 1e-3)
    widest = max(text_width(f"attempt {a.attempt}", TICK_FONT_NARROW) for a in attempts)
    timeline.left = left = float(math.ceil(widest + 2 * GAP))
    scale = (WIDTH - left - RIGHT) / span
    for i, a in enumerate(attempts):
        finished = a.finished_at or now
        x = left + (a.started_at - start).total_seconds() * scale
        width = max(2.0, (finished - a.started_at).total_seconds() * scale)
        outcome = a.outcome.value if a.outcome is not None else "running"
        took = (finished - a.started_at).total_seconds()
        timeline.spans.append(
            Span(
                y=(ROW - BAR) / 2 + i * ROW,
                x=x,
                width=width,
                kind=outcome,
                label=f"attempt {a.attempt}",
                title=f"attempt {a.attempt} on {a.worker}: {outcome} after {took:.3f} s"
                + (f" ({a.error_class})" if a.error_class else ""),
            )
        )
    timeline.height = len(attempts) * ROW
    timeline.start, timeline.end = start, end
    return timeline
