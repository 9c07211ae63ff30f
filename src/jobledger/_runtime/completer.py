"""The completer: writes outcomes in batches on a thread of its own ("group commit").

Whatever finished while the previous batch was being written goes in the next one, so there is
no added delay when idle and large batches under load. While the database is unavailable the
batch is kept and written again, with backoff.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from ..errors import BackendUnavailable
from .outcomes import Finished

__all__ = ["Completer"]

log = logging.getLogger("jobledger.worker")


class Completer:
    """Batches ``Finished`` items for ``write`` (the recorder's), then ``after(batch)``."""

    def __init__(
        self,
        write: Callable[[Sequence[Finished]], None],
        after: Callable[[list[Finished]], None],
        max_batch: int = 1000,
    ):
        self._write = write
        self._after = after
        self._max_batch = max_batch
        self._items: list[Finished] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._busy = False
        self._thread = threading.Thread(target=self._loop, name="jobledger-completer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def submit(self, item: Finished) -> None:
        with self._cond:
            self._items.append(item)
            self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._items) + (1 if self._busy else 0)

    def stop(self, deadline: float) -> None:
        """Write what is left (until ``deadline``, a ``time.monotonic()``), then end."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(max(0.0, deadline - time.monotonic()))

    def _loop(self) -> None:
        backoff = 0.05
        while True:
            with self._cond:
                while not self._items and not self._stopping:
                    self._cond.wait()
                if not self._items and self._stopping:
                    return
                batch = self._items[: self._max_batch]
                del self._items[: self._max_batch]
                self._busy = True
            try:
                self._write(batch)
                backoff = 0.05
            except BackendUnavailable as exc:
                log.warning("could not write %d outcomes, will retry: %s", len(batch), exc)
                with self._cond:
                    self._items[:0] = batch
                time.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            except Exception:  # a bug: keep the runtime alive, say so loudly
                log.exception("unexpected error writing %d outcomes", len(batch))
                with self._cond:
                    self._items[:0] = batch
                time.sleep(1.0)
                continue
            finally:
                with self._cond:
                    self._busy = False
            self._after(batch)
