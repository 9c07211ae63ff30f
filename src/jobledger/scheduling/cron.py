"""Cron expressions in IANA time zones: validation, and the ticks they produce.

Parsing and matching are cronsim's; this module adds what a scheduler needs on top of it:
validation with exact messages, results in UTC, strictly increasing ticks, and a bound on how
many ticks one call enumerates.

Daylight saving follows cron (Debian's, which cronsim imitates) for expressions with a fixed
minute and hour, such as ``30 2 * * *``:

- on the spring-forward day a time that does not exist fires once, at the moment the clocks
  jump (02:30 in Europe/Berlin fires at 03:00 CEST);
- on the fall-back day a time that happens twice fires once, at its first occurrence (02:30
  CEST, not again at 02:30 CET).

Expressions whose minute or hour field starts with ``*`` (``*/15 * * * *``, ``0 * * * *``) fire
by the clock on the wall as it passes: every real quarter hour, both passes through the
repeated hour, nothing in the hour that is skipped.
"""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime

from cronsim import CronSim, CronSimError

from ..errors import ConfigError

__all__ = ["MACROS", "CronSpec", "zone"]

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_FIELDS = "minute hour day-of-month month day-of-week"


def zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA time zone ``name`` (``Europe/Berlin``), or ``ConfigError``."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"time zone must be an IANA name such as 'Europe/Berlin', got {name!r}")
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise ConfigError(
            f"unknown time zone {name!r}: use an IANA name such as 'Europe/Berlin', "
            "'America/New_York' or 'UTC'"
        ) from None


class CronSpec:
    """A validated 5-field cron expression (names, ranges, steps and the ``@daily`` family) in
    an IANA time zone. Raises ``ConfigError`` for a bad expression or zone, or one that never
    fires."""

    def __init__(self, expression: str, tz: str = "UTC"):
        if not isinstance(expression, str) or not expression.strip():
            raise ConfigError(
                f"cron expression must be a string of 5 fields ({_FIELDS}), got {expression!r}"
            )
        text = " ".join(expression.split())
        text = MACROS.get(text.lower(), text)
        if text.startswith("@"):
            raise ConfigError(
                f"cron expression {expression!r} is not supported: use 5 fields ({_FIELDS}) or "
                f"one of {', '.join(sorted(MACROS))}"
            )
        if len(text.split()) != 5:
            raise ConfigError(
                f"cron expression {expression!r} has {len(text.split())} fields; expected 5: "
                f"{_FIELDS} (e.g. '0 6 * * MON')"
            )
        self.expression = text
        self.tz = tz
        self.zone = zone(tz)
        probe = datetime(2026, 1, 1, tzinfo=UTC)
        try:
            CronSim(text, probe.astimezone(self.zone))
        except CronSimError as exc:
            raise ConfigError(
                f"cron expression {expression!r} is invalid: {exc} ({_FIELDS}; names such as "
                "MON or JAN, ranges 1-5, lists 1,15, steps */10)"
            ) from None
        if self.next_after(probe) is None:
            raise ConfigError(f"cron expression {expression!r} never fires")

    def __repr__(self) -> str:
        return f"CronSpec({self.expression!r}, tz={self.tz!r})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, CronSpec)
            and other.expression == self.expression
            and other.tz == self.tz
        )

    def __hash__(self) -> int:
        return hash((self.expression, self.tz))

    def _iterate(self, after: datetime) -> CronSim:
        if after.tzinfo is None:
            raise ValueError(f"naive datetime {after!r}: pass an aware datetime")
        return CronSim(self.expression, after.astimezone(self.zone))

    def next_after(self, after: datetime) -> datetime | None:
        """The first tick strictly after ``after``, in UTC; None when there is none within 50
        years."""
        for tick in self._ticks(after):
            return tick
        return None

    def _ticks(self, after: datetime) -> _Increasing:
        return _Increasing(self._iterate(after), after)

    def ticks_between(
        self, after: datetime, until: datetime, cap: int = 100_000
    ) -> tuple[list[datetime], bool]:
        """The ticks in ``(after, until]``, oldest first, in UTC, and whether the list was cut
        at ``cap`` entries (more ticks follow before ``until``)."""
        found: list[datetime] = []
        for tick in self._ticks(after):
            if tick > until:
                return found, False
            if len(found) >= cap:
                return found, True
            found.append(tick)
        return found, False


class _Increasing:
    """Ticks of a CronSim as UTC instants, strictly increasing.

    cronsim walks local wall-clock time. Started inside a repeated hour it can name a wall time
    whose first occurrence lies before the start; such results are dropped.
    """

    def __init__(self, sim: CronSim, after: datetime):
        self._sim = sim
        self._last = after.astimezone(UTC)

    def __iter__(self) -> _Increasing:
        return self

    def __next__(self) -> datetime:
        while True:
            tick = next(self._sim).astimezone(UTC)
            if tick > self._last:
                self._last = tick
                return tick
