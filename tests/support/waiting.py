"""Waiting for work, not for the clock.

A test that waits for real processes must fail when what it waits for does not happen, and
never because the machine is busy. Two rules make a wait independent of the machine's load:

- **A wait is a stall window.** It fails when nothing has moved for that long, not when a total
  is exceeded. A wait for many things (every job done) gives ``progress``: a function whose
  value changes whenever some of the work is done (the number of jobs done); each change starts
  the window again. A run that keeps moving never fails for being slow; a run that stops moving
  fails one window after it stopped.
- **A window is measured in machine seconds**: wall-clock seconds divided by how many tasks
  are ready to run per core (``slowdown()``, sampled from ``/proc/loadavg`` at every poll).
  On an idle machine the two are the same; with ten busy processes on two cores a window lasts
  about five times longer, so what the test waits for gets the CPU time it would have had on a
  quiet machine before the window runs out.

``Patience`` is the window; ``wait_until`` in ``processes.py`` polls a condition with one, and
``run`` here is ``subprocess.run`` with one for its ``timeout``. ``LoadMeter`` measures the
slowdown over a stretch of a test, for the few bounds that are about time itself (a takeover
soon after a lease expired, a commit shortly after its timestamp): they are stated in machine
seconds too.
"""

from __future__ import annotations

import gc
import os
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

MAX_SLOWDOWN = 16.0
"""A window lasts at most this many times its length in wall-clock seconds."""


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


CPUS = _cpus()


#: A Linux scheduler's time slice on a busy core (CFS's default latency target is 6 ms): how
#: long another process may hold the core a thread waits for, on a shared machine.
TIME_SLICE_MS = 6.0


def slowdown() -> float:
    """How many times slower than on an idle machine a process that wants the CPU gets it now:
    the tasks ready to run (this one among them) per core, at least 1; 1 where the kernel does
    not say (no ``/proc/loadavg``)."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            runnable = int(f.read().split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        return 1.0
    return min(MAX_SLOWDOWN, max(1.0, runnable / CPUS))


def load_factor() -> float:
    """The machine's slowdown over the last minute: the 1-minute load average per core, at
    least 1 (smoother than ``slowdown()``, for sizing a test before it starts)."""
    try:
        return min(MAX_SLOWDOWN, max(1.0, os.getloadavg()[0] / CPUS))
    except OSError:
        return 1.0


class LoadMeter:
    """``slowdown()`` sampled in a thread every ``interval`` seconds while the block runs;
    ``factor()`` is their mean. A bound on how long something may take, in seconds of an idle
    machine, is ``bound * meter.factor()`` wall-clock seconds."""

    def __init__(self, interval: float = 0.1):
        self.interval = interval
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.samples.append(slowdown())

    def __enter__(self) -> LoadMeter:
        self.samples.append(slowdown())
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def factor(self) -> float:
        """The mean slowdown so far (1 on an idle machine)."""
        return sum(self.samples) / len(self.samples) if self.samples else 1.0


class Patience:
    """A stall window of ``seconds`` machine seconds, started again whenever ``progress()``
    returns a value different from the last one it returned. Call ``expired()`` at every poll."""

    def __init__(self, seconds: float, progress: Callable[[], Any] | None = None):
        self.seconds = seconds
        self.progress = progress
        self.last = progress() if progress is not None else None
        self.moves = 0
        """How many times progress was seen."""
        self.started = self._mark = self._moved_at = time.monotonic()
        self._used = 0.0  # machine seconds since the last progress
        self._wall = 0.0  # wall-clock seconds since the last progress

    def expired(self) -> bool:
        """Whether the window has run out: ``seconds`` machine seconds without progress."""
        now = time.monotonic()
        self._used += (now - self._mark) / slowdown()
        self._mark = now
        if self.progress is not None:
            value = self.progress()
            if value != self.last:
                self.last, self.moves = value, self.moves + 1
                self._used, self._moved_at = 0.0, now
        return self._used > self.seconds

    def reset(self) -> None:
        """Start the window again: progress the caller saw by itself."""
        self._used, self._moved_at = 0.0, time.monotonic()

    def describe(self) -> str:
        """Why the window ran out, for an assertion message."""
        wall = time.monotonic() - self._moved_at
        text = (
            f"nothing moved for {self.seconds:g} s of machine time ({wall:.0f} s of wall-clock "
            f"time: the machine was {wall / max(self._used, 1e-9):.1f}× slower than idle)"
        )
        if self.progress is not None:
            text += (
                f"; progress {self.last!r} after {self.moves} moves in "
                f"{time.monotonic() - self.started:.0f} s"
            )
        return text


def run(
    argv: Sequence[str], timeout: float = 120.0, **kwargs: Any
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(argv, capture_output=True, ...)`` whose ``timeout`` is a stall window of
    machine seconds rather than wall-clock seconds: the command is killed and
    ``subprocess.TimeoutExpired`` raised only once it has had that much of a quiet machine's
    time without finishing."""
    patience = Patience(timeout)
    kwargs.pop("capture_output", None)  # output is always captured unless redirected
    data = kwargs.pop("input", None)
    if data is not None:
        kwargs["stdin"] = subprocess.PIPE
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    with subprocess.Popen(list(argv), **kwargs) as proc:
        while True:
            try:
                out, err = proc.communicate(data, timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                # communicate() keeps what it has read (and sent) for the next call: retrying
                # loses nothing.
                data = None
                if patience.expired():
                    proc.kill()
                    out, err = proc.communicate()
                    raise subprocess.TimeoutExpired(
                        proc.args, timeout, output=out, stderr=err
                    ) from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def metered(run: Callable[[], T]) -> tuple[T, LoadMeter]:
    """``run()`` with the machine's slowdown sampled meanwhile (its ``LoadMeter``), for a bound
    on how late a loop may be: the test process's own heap (pytest's) is left out of the
    collector's passes, which many allocations would otherwise trigger, since that pause is
    not the code under test's."""
    gc.collect()
    gc.freeze()
    try:
        with LoadMeter() as meter:
            return run(), meter
    finally:
        gc.unfreeze()
