"""Rendering pages: one Jinja2 environment with autoescaping on for everything, filters for
times and durations, and the security headers every dashboard response carries."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.responses import HTMLResponse, Response

__all__ = ["SECURITY_HEADERS", "env", "page", "secure"]

#: No inline script or style, nothing from another origin, never framed, forms post here only.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def when(value: datetime | None) -> str:
    """``2026-08-10 06:00:01Z`` (UTC, to the second); an em dash for None."""
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def iso(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(UTC).isoformat()


def seconds(value: float | None) -> str:
    """A duration for people: ``850 ms``, ``12.3 s``, ``4 min 05 s``, ``3 h 20 min``, ``2 d 4 h``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    value = float(value)
    if value < 0:
        return "-" + seconds(-value)
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 60:
        return f"{value:.1f} s"
    minutes, secs = divmod(int(value), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def since(value: datetime | None, now: datetime | None = None) -> str:
    """``4 min 05 s ago`` or ``in 12.0 s``."""
    if value is None:
        return "—"
    delta = ((now or datetime.now(UTC)) - value).total_seconds()
    return f"{seconds(delta)} ago" if delta >= 0 else f"in {seconds(-delta)}"


def count(value: int | None) -> str:
    """``40,890``: thousands grouped, so that long counts read at a glance."""
    return "—" if value is None else f"{value:,}"


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


env = Environment(
    loader=PackageLoader("jobledger.http.dashboard", "templates"),
    autoescape=True,  # every template, whatever its name: all output is escaped
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
env.filters.update(
    when=when, iso=iso, seconds=seconds, since=since, count=count, pretty_json=pretty_json
)


def secure(response: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def page(template: str, status: int = 200, **context: Any) -> Response:
    """A rendered page with the security headers."""
    html = env.get_template(template).render(**context)
    return secure(HTMLResponse(html, status_code=status))
