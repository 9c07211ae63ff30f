"""Server-side SVG charts of the last hour: throughput (done, retried, dead per minute) and wait
(average and longest wait from due to claim, per minute), from the per-minute rollups.

The chart is data — rectangles, a polyline, labels — that a template draws as inline SVG: no
script, no library, nothing loaded from elsewhere.

The SVG scales with its box, its labels with it, so the stylesheet draws them larger the
narrower the chart (from ``TICK_FONT`` user units on a wide one to ``TICK_FONT_NARROW`` on a
phone's) to keep them readable. The margins are sized for the largest, with ``text_width``'s
generous estimate of a label, so that no label is clipped or overlaps another at any size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from ..._records import MinuteStats

__all__ = [
    "EMPTY_FONT_NARROW",
    "TICK_FONT",
    "TICK_FONT_NARROW",
    "Chart",
    "Tick",
    "count_label",
    "nice_ticks",
    "text_width",
    "throughput_chart",
    "wait_chart",
]

WIDTH = 640
HEIGHT = 180
TOP = 14  # room for the top tick's label, centred on its grid line
RIGHT = 4
GAP = 6  # between a y label and the plot, and below the plot for the x labels
MINUTES = 60
#: The tick labels' font size in the SVG's units on the widest chart and on the narrowest
#: (dashboard.css steps between them by the chart's width), and the largest for the text of an
#: empty chart.
TICK_FONT = 9
TICK_FONT_NARROW = 24
EMPTY_FONT_NARROW = 22
#: Ticks of the y axis: 0 and at most this many steps above it.
MAX_STEPS = 4

# Advance widths in em of DejaVu Sans, one of the widest common sans-serif faces (Helvetica,
# Segoe UI and Roboto are narrower), so that estimates err on the wide side.
_NARROW = dict.fromkeys(" ,.:;!'|ilj", 0.32)
_WIDE = {"m": 0.98, "w": 0.82, "M": 0.87, "W": 1.0}
_DIGIT = 0.64
_OTHER = 0.66


def text_width(text: str, font_size: float) -> float:
    """A generous estimate of how wide ``text`` is drawn at ``font_size``."""
    em = sum(_DIGIT if ch.isdigit() else _NARROW.get(ch) or _WIDE.get(ch) or _OTHER for ch in text)
    return em * font_size


class Tick(NamedTuple):
    """A labelled position on an axis: ``at`` is an x or a y in the SVG's units; ``anchor`` is
    the label's ``text-anchor`` (x labels: ``start``, ``middle`` or ``end``; y labels are
    drawn right-aligned against the plot)."""

    at: float
    label: str
    anchor: str = "end"

    def extent(self, font_size: float) -> tuple[float, float]:
        """Where an x label's text begins and ends along the axis."""
        width = text_width(self.label, font_size)
        if self.anchor == "start":
            return self.at, self.at + width
        if self.anchor == "middle":
            return self.at - width / 2, self.at + width / 2
        return self.at - width, self.at


@dataclass
class Bar:
    x: float
    y: float
    width: float
    height: float
    kind: str
    title: str


@dataclass
class Chart:
    title: str
    unit: str
    bars: list[Bar] = field(default_factory=list)
    line: str = ""
    """Points of a polyline (``x,y x,y …``), or empty."""
    line_kind: str = ""
    y_ticks: list[Tick] = field(default_factory=list)
    """Bottom to top; ``at`` is the y of the tick's grid line."""
    x_ticks: list[Tick] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)
    total: str = ""
    empty_text: str = "nothing in the last hour"
    width: int = WIDTH
    height: int = HEIGHT
    left: float = 0.0
    """Where the plot begins: right of the widest y label."""
    top: int = TOP
    plot_right: int = WIDTH - RIGHT
    plot_bottom: int = HEIGHT - GAP - int(TICK_FONT_NARROW * 1.25)

    @property
    def empty(self) -> bool:
        return not self.bars and not self.line

    @property
    def y_label_x(self) -> float:
        """Where the y labels end (they are drawn right-aligned)."""
        return self.left - GAP

    @property
    def x_label_y(self) -> int:
        """The top of the x labels (drawn with a hanging baseline)."""
        return self.plot_bottom + GAP

    @property
    def middle(self) -> tuple[float, float]:
        """The plot's centre, where "nothing in the last hour" goes."""
        return (self.left + self.plot_right) / 2, (self.top + self.plot_bottom) / 2


def nice_ticks(peak: float, whole: bool = False) -> list[float]:
    """0 and the multiples of a 1, 2 or 5 × 10ⁿ step up to the first at or above ``peak``, at
    most ``MAX_STEPS`` steps: ``[0, 2, 4, 6, 8]`` for 7, ``[0, 500, 1000]`` for 1000. With
    ``whole`` the step is at least 1 (counts). Nothing to show (``peak`` ≤ 0) is ``[0, 1]``."""
    if not peak > 0:
        return [0.0, 1.0]
    raw = peak / MAX_STEPS
    exp = math.floor(math.log10(raw))
    step = next(
        m * 10.0**e for e in (exp, exp + 1) for m in (1, 2, 5) if m * 10.0**e >= raw * (1 - 1e-9)
    )
    if whole:
        step = max(step, 1.0)
    steps = max(1, math.ceil(peak / step - 1e-9))
    return [round(i * step, 12) for i in range(steps + 1)]


def count_label(value: float, top: float) -> str:
    """A count on an axis whose highest tick is ``top``: ``850``, ``1,500``, ``20k``, ``3M`` (one
    form for every label of an axis)."""
    if value == 0:
        return "0"
    if top >= 10_000_000:
        return f"{value / 1_000_000:g}M"
    if top >= 10_000:
        return f"{value / 1000:g}k"
    return f"{value:,.0f}"


#: The unit a wait axis is labelled in, by its longest wait in seconds: (below, name, size).
#: The bounds keep the top tick short: at most 600 ms, 200 s or 200 min.
_UNITS = ((0.5, "ms", 0.001), (180.0, "s", 1.0), (10800.0, "min", 60.0), (math.inf, "h", 3600.0))


def _seconds_ticks(peak: float) -> list[tuple[float, str]]:
    """Ticks in seconds, with labels in the unit that suits the longest wait."""
    _, name, size = next(u for u in _UNITS if peak < u[0]) if peak > 0 else _UNITS[1]
    return [(v * size, f"{v:g} {name}") for v in nice_ticks(peak / size)]


def _minutes(now: datetime) -> list[datetime]:
    last = now.replace(second=0, microsecond=0)
    return [last - timedelta(minutes=MINUTES - 1 - i) for i in range(MINUTES)]


def _by_minute(rows: Sequence[MinuteStats], queue: str | None) -> dict[datetime, list[MinuteStats]]:
    grouped: dict[datetime, list[MinuteStats]] = {}
    for row in rows:
        if queue is None or row.queue == queue:
            grouped.setdefault(row.minute, []).append(row)
    return grouped


def _frame(chart: Chart, ticks: list[tuple[float, str]]) -> float:
    """Lay out the axes for ``ticks`` (value, label), bottom to top; return the top value."""
    widest = max(text_width(label, TICK_FONT_NARROW) for _, label in ticks)
    chart.left = math.ceil(widest + 2 * GAP)
    top = ticks[-1][0]
    plot_h = chart.plot_bottom - chart.top
    chart.y_ticks = [
        Tick(chart.plot_bottom - plot_h * value / top, label, "end") for value, label in ticks
    ]
    slot = _slot(chart)
    # Each marks the middle of its minute; the current one ("now") ends flush with the right
    # edge. The left edge goes unlabelled: next to the y axis's "0" a "-60 min" read as one.
    chart.x_ticks = [
        Tick(chart.left + slot * (MINUTES - 1 - ago + 0.5), f"-{ago} min", "middle")
        for ago in (45, 30, 15)
    ]
    chart.x_ticks.append(Tick(chart.plot_right, "now", "end"))
    return top


def _slot(chart: Chart) -> float:
    return (chart.plot_right - chart.left) / MINUTES


def throughput_chart(rows: Sequence[MinuteStats], now: datetime, queue: str | None = None) -> Chart:
    """Outcomes per minute, stacked: done, retried, dead."""
    minutes = _minutes(now)
    grouped = _by_minute(rows, queue)
    counts = [
        (
            sum(r.done for r in grouped.get(m, [])),
            sum(r.retried for r in grouped.get(m, [])),
            sum(r.dead for r in grouped.get(m, [])),
        )
        for m in minutes
    ]
    chart = Chart(
        "Throughput, last hour",
        "attempts finished per minute",
        legend=[("done", "done"), ("retried", "retried"), ("dead", "dead")],
        empty_text="no attempt finished in the last hour",
    )
    values = nice_ticks(max((sum(c) for c in counts), default=0), whole=True)
    top = _frame(chart, [(v, count_label(v, values[-1])) for v in values])
    plot_h = chart.plot_bottom - chart.top
    slot = _slot(chart)
    for i, (minute, parts) in enumerate(zip(minutes, counts, strict=True)):
        base = float(chart.plot_bottom)
        for kind, n in zip(("done", "retried", "dead"), parts, strict=True):
            if not n:
                continue
            h = plot_h * n / top
            base -= h
            chart.bars.append(
                Bar(
                    chart.left + slot * i + 1,
                    base,
                    max(1.0, slot - 2),
                    h,
                    kind,
                    f"{minute:%H:%M}Z: {n:,} {kind}",
                )
            )
    done, retried, dead = (sum(c[k] for c in counts) for k in range(3))
    chart.total = f"{done:,} done, {retried:,} retried, {dead:,} dead"
    return chart


def wait_chart(rows: Sequence[MinuteStats], now: datetime, queue: str | None = None) -> Chart:
    """Seconds from due to claim per minute: bars for the average, a line for the longest."""
    minutes = _minutes(now)
    grouped = _by_minute(rows, queue)
    stats = []
    for m in minutes:
        group = grouped.get(m, [])
        claimed = sum(r.claimed for r in group)
        avg = sum(r.wait_sum for r in group) / claimed if claimed else None
        longest = max((r.wait_max for r in group), default=None) if claimed else None
        stats.append((claimed, avg, longest))
    chart = Chart(
        "Wait, last hour",
        "from due to claim, per minute",
        legend=[("wait", "average"), ("wait-max", "longest")],
        line_kind="wait-max",
        empty_text="no job claimed in the last hour",
    )
    top = _frame(chart, _seconds_ticks(max((s[2] or 0.0 for s in stats), default=0.0)))
    plot_h = chart.plot_bottom - chart.top
    slot = _slot(chart)
    points = []
    for i, (minute, (claimed, avg, longest)) in enumerate(zip(minutes, stats, strict=True)):
        if not claimed:
            continue
        assert avg is not None and longest is not None
        h = plot_h * avg / top
        chart.bars.append(
            Bar(
                chart.left + slot * i + 1,
                chart.plot_bottom - h,
                max(1.0, slot - 2),
                max(h, 0.5),
                "wait",
                f"{minute:%H:%M}Z: {claimed:,} claimed, average wait {avg:.3f} s, "
                f"longest {longest:.3f} s",
            )
        )
        points.append(
            f"{chart.left + slot * i + slot / 2:.1f},{chart.plot_bottom - plot_h * longest / top:.1f}"
        )
    chart.line = " ".join(points)
    claimed = sum(s[0] for s in stats)
    waited = sum(r.wait_sum for g in grouped.values() for r in g if r.minute >= minutes[0])
    chart.total = (
        f"{claimed:,} claimed, average wait {waited / claimed:.3f} s"
        if claimed
        else "nothing claimed"
    )
    return chart
