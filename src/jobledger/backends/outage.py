"""Knowing that the database is down: fail at once while it is, and notice at once that it is
back.

Without this, every use of a database that went away waits for its own timeout (a pool's wait
for a connection, a connect timeout) before it fails, and after the database returns the pool
reconnects on its own backoff, seconds to minutes later. Instead, each backend reports every
failure that may mean the database went away — a connection refused or broken, none handed
out in time, a file that cannot be read — to its ``Outage``, which then asks the database
itself on a fresh connection, on a thread of its own (a *probe*):

- the probe fails: the database is **down**. From then on ``check()`` (called before every
  use) raises ``BackendUnavailable`` at once, and the backend is told (``on_down``) so that it
  can release whatever is waiting on the database now. Probes repeat every ``interval``.
- a probe succeeds: the backend is told (``on_recovery``) to drop the connections it holds,
  so that the next use starts afresh rather than from a broken connection or a pool's
  backoff; then the outage ends and ``check()`` lets everything through again.

A failure while the database answers a probe (a statement that failed for its own reasons, a
pool busy under load) changes nothing: probes while the database is up are at most one every
``interval``, so a burst of errors costs one connection attempt. Stronger evidence — a pooled
connection found broken — probes at once (``suspect(now=True)``), and whoever found it may
wait for the verdict (``settle``) instead of waiting for another connection that may never come.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..errors import BackendUnavailable

__all__ = ["PROBE_INTERVAL", "Outage"]

log = logging.getLogger("jobledger.backends")

#: Seconds between probes while the database is down: how soon its return is noticed.
PROBE_INTERVAL = 0.25


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


class Outage:
    """Whether one database is down, found out by probing it.

    ``probe`` connects afresh and asks the database one cheap question; it raises when the
    database does not answer. ``describe`` names the database in messages (redacted)."""

    def __init__(
        self,
        probe: Callable[[], None],
        describe: str,
        *,
        on_down: Callable[[], None] | None = None,
        on_recovery: Callable[[], None] | None = None,
        interval: float = PROBE_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._probe = probe
        self._describe = describe
        self._on_down = on_down
        self._on_recovery = on_recovery
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._verdict = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._probing = False
        self._last_probe = float("-inf")
        self._down_since: float | None = None
        self._error = ""
        self.outages = 0
        """How many times the database was found down (for tests and curiosity)."""

    @property
    def down(self) -> bool:
        return self._down_since is not None

    def check(self) -> None:
        """Raise ``BackendUnavailable`` at once while the database is known to be down."""
        since = self._down_since
        if since is not None:
            raise BackendUnavailable(
                f"{self._describe} is unavailable ({self._error}); down for "
                f"{max(0.0, self._clock() - since):.1f} s, retry shortly"
            )

    def suspect(self, now: bool = False) -> None:
        """A failure that may mean the database went away: probe it, unless a probe runs or
        (unless ``now``) one was made less than ``interval`` ago."""
        with self._lock:
            recent = self._clock() - self._last_probe < self.interval
            if self._probing or self._stop.is_set() or (recent and not now):
                return
            self._probing = True
            self._last_probe = self._clock()
        threading.Thread(target=self._watch, name="jobledger-db-probe", daemon=True).start()

    def settle(self, timeout: float = 5.0) -> None:
        """Wait (up to ``timeout``) until a running probe has said whether the database is down:
        then ``check()`` tells."""
        with self._verdict:
            self._verdict.wait_for(lambda: not self._probing or self.down, timeout)

    def close(self) -> None:
        """Stop probing (the backend is closing)."""
        self._stop.set()

    def _watch(self) -> None:
        """Probe until the database answers; the outage (if any) ends then."""
        try:
            while not self._stop.is_set():
                try:
                    self._probe()
                except Exception as exc:  # whatever the probe met: the database did not answer
                    self._failed(exc)
                else:
                    if self._answered():
                        return
                if self._stop.wait(self.interval):
                    return
        finally:
            with self._verdict:
                self._probing = False
                self._last_probe = self._clock()
                self._verdict.notify_all()

    def _failed(self, exc: Exception) -> None:
        first = self._down_since is None
        self._error = _first_line(exc)
        if not first:
            return
        self.outages += 1
        with self._verdict:
            self._down_since = self._clock()
            self._verdict.notify_all()
        log.warning(
            "%s is down (%s): failing at once until it answers again (probing every %.2f s)",
            self._describe,
            self._error,
            self.interval,
        )
        if self._on_down is not None:
            try:
                self._on_down()
            except Exception:  # never leave the outage half-handled: it is down either way
                log.exception("releasing the connections of %s failed", self._describe)

    def _answered(self) -> bool:
        """The probe succeeded: end the outage, if there was one. False when the backend could
        not make its connections afresh (the outage goes on, and so does probing)."""
        since = self._down_since
        if since is None:
            return True
        if self._on_recovery is not None:
            try:
                self._on_recovery()
            except Exception:
                log.exception("reopening the connections of %s failed", self._describe)
                return False
        self._down_since = None
        log.warning("%s answers again after %.1f s down", self._describe, self._clock() - since)
        return True
