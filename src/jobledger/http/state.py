"""What the server shares between requests: settings, the ledger, wake-ups, keys in flight, pull
consumers' leases, and the services that run beside the routes (the rescuer, push delivery)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .._records import positive_seconds
from ..errors import ConfigError
from .wakeups import Wakeups

if TYPE_CHECKING:
    from .._ledger import Ledger
    from .._runtime.pull import PullLeases
    from ..push import PushSettings

__all__ = ["InFlight", "ServerSettings", "ServerState", "Service"]

log = logging.getLogger("jobledger.http")

KIB = 1024


@dataclass(frozen=True)
class ServerSettings:
    """How ``jobledger serve`` behaves. Validated when built.

    - ``default_rate`` / ``default_burst``: the publish rate limit (messages per second, and how
      many may go at once) of keys created without one; None: no limit.
    - ``max_wait_seconds``: the longest long poll a receive may ask for (the API allows 20).
    - ``rescue_interval``: seconds between scans for expired leases (pull consumers that died).
    - ``poll_interval``: the longest pause between claims of a waiting receive; default 1 s on
      PostgreSQL (LISTEN/NOTIFY wakes it sooner), 0.25 s on SQLite.
    - ``publish_limit`` / ``batch_limit`` / ``body_limit``: request body limits in bytes for
      publish, publish-batch and every other route.
    - ``snapshot_seconds``: how long ``/metrics`` and the dashboard reuse one read of the
      ledger's state (queue depths, schedules, leaders); ``finished_seconds``: the longest
      done and cancelled counts are reused (see docs/observability.md).
    - ``public_metrics``: serve ``/metrics`` without an API key (default: a key with ``read``
      or ``admin``).
    - ``dashboard_refresh_seconds``: how often the dashboard's live parts reload themselves.
    - ``session_seconds``: how long a dashboard login lasts.
    - ``push``: run the push delivery loop with the server, with these settings (None: do not;
      ``jobledger serve`` runs it unless ``--no-push``).
    """

    default_rate: float | None = None
    default_burst: float | None = None
    max_wait_seconds: float = 20.0
    rescue_interval: float = 5.0
    poll_interval: float | None = None
    publish_limit: int = 256 * KIB
    batch_limit: int = 4096 * KIB
    body_limit: int = 64 * KIB
    snapshot_seconds: float = 5.0
    finished_seconds: float = 300.0
    public_metrics: bool = False
    dashboard_refresh_seconds: float = 5.0
    session_seconds: float = 12 * 3600.0
    push: PushSettings | None = None

    def __post_init__(self) -> None:
        if self.default_rate is not None and not self.default_rate > 0:
            raise ConfigError(f"default rate must be > 0 per second, got {self.default_rate!r}")
        if self.default_burst is not None:
            if self.default_rate is None:
                raise ConfigError("a default burst needs a default rate")
            if not self.default_burst >= 1:
                raise ConfigError(f"default burst must be >= 1, got {self.default_burst!r}")
        if not 0 <= self.max_wait_seconds <= 20:
            raise ConfigError(f"max_wait_seconds must be 0..20, got {self.max_wait_seconds!r}")
        positive_seconds(self.rescue_interval, "rescue_interval")
        if self.poll_interval is not None:
            positive_seconds(self.poll_interval, "poll_interval")
        if not 0 <= self.snapshot_seconds <= 3600:
            raise ConfigError(f"snapshot_seconds must be 0..3600, got {self.snapshot_seconds!r}")
        if not 0 <= self.finished_seconds <= 86400:
            raise ConfigError(f"finished_seconds must be 0..86400, got {self.finished_seconds!r}")
        if not 0.2 <= self.dashboard_refresh_seconds <= 3600:
            raise ConfigError(
                "dashboard_refresh_seconds must be 0.2..3600, got "
                f"{self.dashboard_refresh_seconds!r}"
            )
        if not 60 <= self.session_seconds <= 30 * 86400:
            raise ConfigError(f"session_seconds must be 60..2592000, got {self.session_seconds!r}")

    def rate_for(self, rate: float | None, burst: float | None) -> tuple[float, float] | None:
        """The (rate, burst) a key publishes under, or None for no limit."""
        if rate is not None:
            return rate, burst if burst is not None else max(1.0, rate)
        if self.default_rate is not None:
            return self.default_rate, self.default_burst or max(1.0, self.default_rate)
        return None


class InFlight:
    """The (queue, key) pairs this server process is publishing right now.

    Together with the database's own check (a try-lock on PostgreSQL; SQLite's single writer),
    this is how a second request with a key still in flight is answered 409 instead of waiting.
    Touched only from the event loop, so a plain set is enough.
    """

    def __init__(self) -> None:
        self._keys: set[tuple[str, str]] = set()

    def claim(self, idents: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
        """Register ``idents``; return the ones already in flight (which are not registered)."""
        busy = set()
        for ident in idents:
            if ident in self._keys:
                busy.add(ident)
            else:
                self._keys.add(ident)
        return busy

    def release(self, idents: Iterable[tuple[str, str]]) -> None:
        for ident in idents:
            self._keys.discard(ident)

    def __contains__(self, ident: object) -> bool:
        return ident in self._keys


class Service(Protocol):
    """Something the server runs beside its routes, started with it and stopped before it ends
    (called from a worker thread, so it may block briefly)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


ServiceFactory = Callable[["ServerState"], "Service | None"]


class ServerState:
    """Everything a route handler may need, as ``call.state``."""

    def __init__(self, ledger: Ledger, settings: ServerSettings):
        self.ledger = ledger
        self.settings = settings
        self.in_flight = InFlight()
        self.wakeups: Wakeups | None = None
        self.services: list[Service] = []
        self._pull: PullLeases | None = None
        self.observability: Any = None
        """The server's metrics, ledger snapshots and rollups (``jobledger.http.observe``)."""

    @property
    def poll_interval(self) -> float:
        if self.settings.poll_interval is not None:
            return self.settings.poll_interval
        return 1.0 if self.ledger.listening.supported else 0.25

    @property
    def pull(self) -> PullLeases:
        """Pull consumers' leases, over the runtime (``jobledger._runtime.pull``)."""
        if self._pull is None:
            from .observe import observe

            self._pull = self.ledger.pull_leases(observe(self))
        return self._pull
