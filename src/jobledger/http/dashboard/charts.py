"""Server-side SVG charts of the last hour: throughput (done, retried, dead per minute) and wait
(average and longest wait from due to claim, per minute), from the per-minute rollups.

The chart is data — rectangles, a polyline, labels — that a template draws as inline SVG: no
script, no library, nothing loaded from elsewhere.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ..._records import MinuteStats

__all__ = ["Chart", "throughput_chart", "wait_chart"]

WIDTH = 640
HEIGHT = 170
LEFT = 48  # room for the y labels
BOTTOM = 20  # room for the x labels
TOP = 8
MINUTES = 60


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
    y_ticks: list[tuple[float, str]] = field(default_factory=list)
    x_ticks: list[tuple[float, str]] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)
    total: str = ""
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    plot_bottom: int = HEIGHT - BOTTOM

    @property
    def empty(self) -> bool:
        return not self.bars and not self.line


def _minutes(now: datetime) -> list[datetime]:
    last = now.replace(second=0, microsecond=0)
    return [last - timedelta(minutes=MINUTES - 1 - i) for i in range(MINUTES)]


def _nice(value: float) -> float:
    """The smallest 1, 2, 5 × 10^n at or above ``value``."""
    if value <= 0:
        return 1.0
    exp = math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        top = step * 10**exp
        if top >= value:
            return float(top)
    return float(10 ** (exp + 1))


def _by_minute(rows: Sequence[MinuteStats], queue: str | None) -> dict[datetime, list[MinuteStats]]:
    grouped: dict[datetime, list[MinuteStats]] = {}
    for row in rows:
        if queue is None or row.queue == queue:
            grouped.setdefault(row.minute, []).append(row)
    return grouped


def _frame(chart: Chart, minutes: list[datetime], top: float, fmt: str) -> None:
    plot_h = chart.plot_bottom - TOP
    chart.y_ticks = [(chart.plot_bottom - plot_h * f, fmt.format(top * f)) for f in (0.0, 0.5, 1.0)]
    slot = (chart.width - chart.left) / MINUTES
    chart.x_ticks = [
        (chart.left + slot * i, "now" if i == MINUTES - 1 else f"-{MINUTES - 1 - i} min")
        for i in (0, 15, 30, 45, MINUTES - 1)
    ]


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
        "Throughput",
        "outcomes per minute",
        legend=[("done", "done"), ("retried", "retried"), ("dead", "dead")],
    )
    top = _nice(max((sum(c) for c in counts), default=0))
    _frame(chart, minutes, top, "{:.0f}")
    plot_h = chart.plot_bottom - TOP
    slot = (chart.width - chart.left) / MINUTES
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
                    f"{minute:%H:%M}Z: {n} {kind}",
                )
            )
    done, retried, dead = (sum(c[k] for c in counts) for k in range(3))
    chart.total = f"last hour: {done} done, {retried} retried, {dead} dead"
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
        "Wait",
        "seconds from due to claim",
        legend=[("wait", "average"), ("wait-max", "longest")],
        line_kind="wait-max",
    )
    top = _nice(max((s[2] or 0.0 for s in stats), default=0.0))
    _frame(chart, minutes, top, "{:.3g} s")
    plot_h = chart.plot_bottom - TOP
    slot = (chart.width - chart.left) / MINUTES
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
                f"{minute:%H:%M}Z: {claimed} claimed, average wait {avg:.3f} s, "
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
        f"last hour: {claimed} claimed, average wait {waited / claimed:.3f} s"
        if claimed
        else "last hour: nothing claimed"
    )
    return chart
