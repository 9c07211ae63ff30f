"""The SQLite side of observability (migration 007): queue depths read through the partial
indexes, per-minute rollups, dashboard sessions. Mixed into ``SqliteBackend``."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .._records import ApiKey, MinuteStats, QueueDepth
from .common import from_epoch as _dt
from .common import queue_depths_from_rows

__all__ = ["SqliteObservability"]


def _ts(value: datetime | None) -> float:
    return time.time() if value is None else value.timestamp()


class SqliteObservability:
    """Queue depths, rollups and sessions for ``SqliteBackend``."""

    if TYPE_CHECKING:
        _sql: dict[str, str]
        _write: Callable[..., AbstractContextManager[sqlite3.Connection]]
        _read: Callable[..., list[Any]]

    def queue_depths(self, now: datetime | None = None) -> list[QueueDepth]:
        clock = _ts(now)
        rows = self._read(self._sql["queue_depths"], {"now": clock})
        return queue_depths_from_rows((q, s, n, m, first, clock) for q, s, n, m, first in rows)

    def queue_finished_counts(self) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for queue, state, n in self._read(self._sql["queue_finished_counts"]):
            counts.setdefault(queue, {})[state] = int(n)
        return counts

    def minute_stats_add(self, rows: Sequence[MinuteStats]) -> None:
        if not rows:
            return
        with self._write() as c:
            c.executemany(
                self._sql["minute_stats_add"],
                [
                    {
                        "minute": r.minute.timestamp(),
                        "queue": r.queue,
                        "task": r.task,
                        "claimed": r.claimed,
                        "wait_sum": r.wait_sum,
                        "wait_max": r.wait_max,
                        "done": r.done,
                        "retried": r.retried,
                        "dead": r.dead,
                        "run_count": r.run_count,
                        "run_sum": r.run_sum,
                        "run_max": r.run_max,
                    }
                    for r in sorted(rows, key=lambda r: (r.minute, r.queue, r.task))
                ],
            )

    def minute_stats_list(self, since: datetime) -> list[MinuteStats]:
        rows = self._read(self._sql["minute_stats_list"], {"since": since.timestamp()})
        return [MinuteStats(_dt(r[0]), *r[1:]) for r in rows]  # type: ignore[arg-type]

    def minute_stats_prune(self, before: datetime) -> int:
        with self._write() as c:
            return c.execute(
                self._sql["minute_stats_prune"], {"before": before.timestamp()}
            ).rowcount

    def session_insert(
        self, digest: str, api_key_id: str, ttl_seconds: float, now: datetime | None = None
    ) -> datetime:
        clock = _ts(now)
        with self._write() as c:
            c.execute(
                self._sql["session_insert"],
                {"digest": digest, "api_key_id": api_key_id, "now": clock, "ttl": ttl_seconds},
            )
        return _dt(clock + ttl_seconds)  # type: ignore[return-value]

    def session_get(self, digest: str, now: datetime | None = None) -> ApiKey | None:
        rows = self._read(self._sql["session_get"], {"digest": digest, "now": _ts(now)})
        if not rows:
            return None
        r = rows[0]
        return ApiKey(
            id=r[0],
            name=r[1],
            scopes=tuple(r[2].split()),
            rate_per_second=r[3],
            burst=r[4],
            created_at=_dt(r[5]),
            revoked_at=_dt(r[6]),
        )

    def session_delete(self, digest: str) -> None:
        with self._write() as c:
            c.execute(self._sql["session_delete"], {"digest": digest})

    def session_prune(self, now: datetime | None = None) -> int:
        with self._write() as c:
            return c.execute(self._sql["session_prune"], {"now": _ts(now)}).rowcount
