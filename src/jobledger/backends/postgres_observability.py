"""The PostgreSQL side of observability (migration 007): queue depths read through the partial
indexes, per-minute rollups, dashboard sessions. Mixed into ``PostgresBackend``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .._records import ApiKey, MinuteStats, QueueDepth
from .common import queue_depths_from_rows
from .common import utc as _utc

__all__ = ["PostgresObservability"]


class PostgresObservability:
    """Queue depths, rollups and sessions for ``PostgresBackend``."""

    if TYPE_CHECKING:
        _run: Callable[..., list[Any]]

    def queue_depths(self, now: datetime | None = None) -> list[QueueDepth]:
        rows = self._run("queue_depths", {"now": now})
        return queue_depths_from_rows(rows)

    def queue_finished_counts(self) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for queue, state, n in self._run("queue_finished_counts", {}):
            counts.setdefault(queue, {})[state] = int(n)
        return counts

    def minute_stats_add(self, rows: Sequence[MinuteStats]) -> None:
        if not rows:
            return
        ordered = sorted(rows, key=lambda r: (r.minute, r.queue, r.task))
        self._run(
            "minute_stats_add",
            {
                "minute": [r.minute for r in ordered],
                "queue": [r.queue for r in ordered],
                "task": [r.task for r in ordered],
                "claimed": [r.claimed for r in ordered],
                "wait_sum": [r.wait_sum for r in ordered],
                "wait_max": [r.wait_max for r in ordered],
                "done": [r.done for r in ordered],
                "retried": [r.retried for r in ordered],
                "dead": [r.dead for r in ordered],
                "run_count": [r.run_count for r in ordered],
                "run_sum": [r.run_sum for r in ordered],
                "run_max": [r.run_max for r in ordered],
            },
        )

    def minute_stats_list(self, since: datetime) -> list[MinuteStats]:
        return [
            MinuteStats(_utc(r[0]), *r[1:])  # type: ignore[arg-type]
            for r in self._run("minute_stats_list", {"since": since})
        ]

    def minute_stats_prune(self, before: datetime) -> int:
        rows = self._run("minute_stats_prune", {"before": before})
        return int(rows[0][0]) if rows else 0

    def session_insert(
        self, digest: str, api_key_id: str, ttl_seconds: float, now: datetime | None = None
    ) -> datetime:
        [(expires,)] = self._run(
            "session_insert",
            {"digest": digest, "api_key_id": api_key_id, "ttl": float(ttl_seconds), "now": now},
        )
        return _utc(expires)  # type: ignore[return-value]

    def session_get(self, digest: str, now: datetime | None = None) -> ApiKey | None:
        rows = self._run("session_get", {"digest": digest, "now": now})
        if not rows:
            return None
        r = rows[0]
        return ApiKey(
            id=r[0],
            name=r[1],
            scopes=tuple(r[2].split()),
            rate_per_second=r[3],
            burst=r[4],
            created_at=_utc(r[5]),
            revoked_at=_utc(r[6]),
        )

    def session_delete(self, digest: str) -> None:
        self._run("session_delete", {"digest": digest})

    def session_prune(self, now: datetime | None = None) -> int:
        rows = self._run("session_prune", {"now": now})
        return int(rows[0][0]) if rows else 0
