"""The completer: writes outcomes in batches on a thread of its own ("group commit").

Whatever finished while the previous batch was being written goes in the next one, so there is
no added delay when idle and large batches under load. While the database is unavailable the
batch is kept and written again, with backoff. A batch that fails with an error that is no
outage (a value the storage refuses, a bug) is written again item by item, so that one outcome
holds back no other; an item that fails alone ``TRIES_ALONE`` times is given up.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence

from ..errors import BackendUnavailable
from .outcomes import Finished

__all__ = ["TRIES_ALONE", "Completer"]

log = logging.getLogger("jobledger.worker")

#: Failed writes of one outcome alone, each with an error that is no outage, after which the
#: completer gives it up: its job's lease is left to expire, and the rescuer hands the job out
#: again (as after a crashed worker), instead of the worker retrying the write, and holding
#: the job, for as long as it runs.
TRIES_ALONE = 3


class Completer:
    """Batches ``Finished`` items for ``write`` (the recorder's), then ``after(batch)``;
    ``give_up(items)`` for items it will not write (``TRIES_ALONE``).

    Items come in through a ``SimpleQueue``: ``submit`` is its ``put``, one call in C per
    finished job, with no lock or condition taken in Python."""

    def __init__(
        self,
        write: Callable[[Sequence[Finished]], None],
        after: Callable[[list[Finished]], None],
        give_up: Callable[[list[Finished]], None],
        max_batch: int = 1000,
    ):
        self._write = write
        self._after = after
        self._give_up = give_up
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[Finished | None] = queue.SimpleQueue()
        self.submit: Callable[[Finished], None] = self._queue.put
        """Hand one item to the completer (written in the next batch)."""
        self._again: list[Finished] = []
        """Items whose write failed, written again first (only the completer's thread)."""
        self._stopping = False
        self._busy = False
        self._thread = threading.Thread(target=self._loop, name="jobledger-completer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def pending(self) -> int:
        """Items not written yet (a snapshot: the completer may be taking some right now)."""
        return self._queue.qsize() + len(self._again) + (1 if self._busy else 0)

    def stop(self, deadline: float) -> None:
        """Write what is left (until ``deadline``, a ``time.monotonic()``), then end."""
        self._stopping = True
        self._queue.put(None)  # wakes the loop, which then sees that it is stopping
        if self._thread.is_alive():
            self._thread.join(max(0.0, deadline - time.monotonic()))

    def _take(self) -> list[Finished]:
        """The next batch: items to write again first, then what waits in the queue (waiting
        for one if there is none). Empty once stopping and nothing is left."""
        queue_, most = self._queue, self._max_batch
        batch = self._again[:most]
        del self._again[:most]
        while not batch:
            if self._stopping and not queue_.qsize():
                return []
            first = queue_.get()
            if first is not None:
                batch.append(first)
        # One consumer: what ``qsize`` counts is there to take without waiting.
        more = min(queue_.qsize(), most - len(batch))
        if more > 0:
            get = queue_.get_nowait
            batch += [get() for _ in range(more)]  # type: ignore[misc]
            if self._stopping:  # the wake-up of ``stop`` may be among them
                batch = [item for item in batch if item is not None]
        return batch

    def _loop(self) -> None:
        backoff = 0.05
        while True:
            batch = self._take()
            if not batch:
                return
            self._busy = True
            try:
                self._write(batch)
                backoff = 0.05
            except BackendUnavailable as exc:
                log.warning("could not write %d outcomes, will retry: %s", len(batch), exc)
                self._again[:0] = batch
                time.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            except Exception:  # no outage: keep the runtime alive, say so loudly
                log.exception("unexpected error writing %d outcomes", len(batch))
                if len(batch) == 1:
                    self._refused(batch[0])
                else:
                    self._one_by_one(batch)
                if self._again:
                    time.sleep(1.0)
                continue
            finally:
                self._busy = False
            self._after(batch)

    def _one_by_one(self, batch: list[Finished]) -> None:
        """Write each item of a batch that failed by itself: the others are written, the one
        the storage refuses is counted (``_refused``). An outage stops it: what is left is
        written again first, as after any outage. (Writing an item again is safe: the
        recorder tells its own earlier writes from a stale token's.)"""
        for n, item in enumerate(batch):
            try:
                self._write([item])
            except BackendUnavailable:
                self._again[:0] = batch[n:]
                return
            except Exception:
                log.exception("unexpected error writing the outcome of job %d", item.hold.job.id)
                self._refused(item)
                continue
            self._after([item])

    def _refused(self, item: Finished) -> None:
        """``item`` failed alone: written again later, or given up after ``TRIES_ALONE``."""
        item.refusals += 1
        if item.refusals < TRIES_ALONE:
            self._again.append(item)
            return
        job = item.hold.job
        log.error(
            "job %d %s/%s attempt %d: its outcome was refused %d times; given up",
            job.id,
            job.queue,
            job.key,
            job.attempt,
            item.refusals,
            extra={"job_id": job.id, "key": job.key, "queue": job.queue},
        )
        self._give_up([item])
