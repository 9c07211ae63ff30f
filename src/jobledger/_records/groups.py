"""Groups: tenant isolation within a queue.

A job may carry a ``group`` (a tenant, a customer, a downstream host). Per queue, ``GroupLimits``
caps how many of one group's jobs are leased at once and how fast one group's jobs start (a token
bucket per group). The claim itself enforces both, on every backend, for every worker, server and
host: it takes a group's jobs only under that group's lock, counting its leases and spending its
tokens there. Claims go round the groups with due jobs, least recently served first, one job per
group per round, so a group with 100,000 due jobs gets one turn like a group with one. A group can
be paused as a whole until a time (``Retry(after=…, scope="group")``, or an operator).

This module holds the plain parts the backends share: the records, the validation, and the
arithmetic of the bucket and of one claim's allowance per group. See docs/groups.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..errors import ConfigError
from .checks import validate_name, whole_number

__all__ = [
    "GroupLimits",
    "GroupState",
    "GroupStatus",
    "MAX_GROUP_LENGTH",
    "MAX_LEASED",
    "MAX_RATE",
    "MIN_RATE",
    "allowance",
    "claim_share",
    "group_status",
    "tokens_now",
    "validate_group",
]

MAX_GROUP_LENGTH = 200


def validate_group(group: Any) -> str:
    """A group name is 1-200 characters without control characters."""
    hint = " (leave it out for a job without a group)"
    return validate_name(group, "group", MAX_GROUP_LENGTH, hint)


#: The slowest rate a group may be given, jobs per second: one job in about 11.6 days. A rate
#: below it means nothing to a queue, and the bucket's refill (rate × seconds since the last
#: claim) would fall below what a double can hold (PostgreSQL refuses such a product).
MIN_RATE = 1e-6
#: Limits beyond these are typing mistakes, and a count past it would not fit the column that
#: holds it (an integer).
MAX_LEASED = 1_000_000
MAX_RATE = 1_000_000.0


@dataclass(frozen=True, slots=True)
class GroupLimits:
    """What each group of a queue may do. ``None``: no limit of that kind.

    ``max_leased``: at most this many of one group's jobs leased at once.
    ``rate``: one group's jobs start at most this many times per second on average,
    with bursts of up to ``burst`` (default: one second's worth, at least 1).
    """

    max_leased: int | None = None
    rate: float | None = None
    burst: float | None = None

    def __post_init__(self) -> None:
        if self.max_leased is not None:
            whole_number(self.max_leased, 1, MAX_LEASED, "max_leased")
        for name in ("rate", "burst"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ConfigError(f"{name} must be a positive number, got {value!r}")
            if value is not None and value > MAX_RATE:
                raise ConfigError(f"{name} must be at most {MAX_RATE:,.0f}, got {value!r}")
        if self.rate is not None and self.rate < MIN_RATE:
            raise ConfigError(
                f"rate must be at least {MIN_RATE:g} jobs per second (one in about 11.6 days), "
                f"got {self.rate!r}"
            )
        if self.burst is not None and self.burst < 1:
            raise ConfigError(f"burst must be at least 1 (one job), got {self.burst!r}")
        if self.burst is not None and self.rate is None:
            raise ConfigError("burst needs a rate: it is the size of the rate's bucket")

    @property
    def bucket_size(self) -> float:
        """How many tokens a group's bucket holds when full."""
        if self.rate is None:
            return math.inf
        return float(self.burst) if self.burst is not None else max(1.0, float(self.rate))

    @property
    def unlimited(self) -> bool:
        return self.max_leased is None and self.rate is None

    def as_dict(self, queue: str) -> dict[str, Any]:
        """A queue's group limits as JSON; ``bucket_size`` is the burst in force (null: no
        rate)."""
        return {
            "queue": queue,
            "max_leased": self.max_leased,
            "rate": self.rate,
            "burst": self.burst,
            "bucket_size": None if self.rate is None else self.bucket_size,
        }


@dataclass(frozen=True, slots=True)
class GroupState:
    """One group as a claim sees it under the group's lock."""

    queue: str
    name: str
    leased: int
    tokens: float | None
    """The bucket's tokens when last written (None: never written, so full)."""
    refilled_at: datetime | None
    limits: GroupLimits


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """A group of a queue, for operators: its jobs by state and whether it is paused."""

    queue: str
    name: str
    pending: int
    due: int
    leased: int
    paused_until: datetime | None
    paused_reason: str | None
    served_at: datetime | None
    tokens: float | None
    """Tokens in the bucket now (None: the queue sets no rate)."""

    def as_dict(self) -> dict[str, Any]:
        def iso(t: datetime | None) -> str | None:
            return None if t is None else t.isoformat().replace("+00:00", "Z")

        return {
            "queue": self.queue,
            "group": self.name,
            "pending": self.pending,
            "due": self.due,
            "leased": self.leased,
            "paused_until": iso(self.paused_until),
            "paused_reason": self.paused_reason,
            "served_at": iso(self.served_at),
            "tokens": None if self.tokens is None else round(self.tokens, 3),
        }


def group_status(
    queue: str,
    row: Sequence[Any],
    limits: GroupLimits,
    now: datetime,
    to_time: Callable[[Any], datetime | None],
) -> GroupStatus:
    """A row of ``group_list`` (name, pending, due, leased, paused_until, paused_reason,
    served_at, tokens, refilled_at) as the operator sees it at ``now``."""
    paused_until = to_time(row[4])
    paused = paused_until is not None and paused_until > now
    return GroupStatus(
        queue=queue,
        name=row[0],
        pending=row[1],
        due=row[2],
        leased=row[3],
        paused_until=paused_until if paused else None,
        paused_reason=row[5] if paused else None,
        served_at=to_time(row[6]),
        tokens=None if limits.rate is None else tokens_now(limits, row[7], to_time(row[8]), now),
    )


def tokens_now(
    limits: GroupLimits, tokens: float | None, refilled_at: datetime | None, now: datetime
) -> float:
    """The tokens in a group's bucket at ``now``: what was left, plus the refill since, capped."""
    size = limits.bucket_size
    if limits.rate is None:
        return size
    if tokens is None or refilled_at is None:
        return size
    elapsed = max(0.0, (now - refilled_at).total_seconds())
    return min(size, tokens + elapsed * float(limits.rate))


def claim_share(limit: int, groups: int) -> int:
    """How many of each group's jobs a claim of ``limit`` over ``groups`` groups reads first:
    the batch spread over them, rounded up. A claim takes one job per group per round, so when
    the shares give ``limit`` jobs no job of a later round could have been chosen."""
    return -(-limit // groups)


def allowance(state: GroupState, now: datetime, cap: int) -> int:
    """How many of the group's jobs one claim may take: its free lease slots and whole tokens,
    at most ``cap``."""
    room = cap
    if state.limits.max_leased is not None:
        room = min(room, state.limits.max_leased - state.leased)
    if state.limits.rate is not None:
        room = min(room, math.floor(tokens_now(state.limits, state.tokens, state.refilled_at, now)))
    return max(0, room)
