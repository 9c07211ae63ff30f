"""Fault points: named places where tests and drills make a process fail on purpose.

Off unless the environment variable ``JOBLEDGER_FAULTS`` is set (or ``configure`` is called).
The variable lists ``point=action`` pairs separated by commas::

    JOBLEDGER_FAULTS="worker.after_claim=kill"            # SIGKILL at the first claim
    JOBLEDGER_FAULTS="effect.after_call=kill@2"           # ... at the second time the point is hit
    JOBLEDGER_FAULTS="worker.before_finish=kill%0.01"     # ... with probability 1% per hit

Actions: ``kill`` (SIGKILL this process: no cleanup, no flush, like a power cut for the
process), ``exit`` (``os._exit(70)``), ``raise`` (raise ``FaultInjected``), ``sleep:SECONDS``.

Points jobledger itself calls:

- ``worker.after_claim`` — the claim is committed, the handler has not started;
- ``effect.after_call`` — inside ``ctx.once``: the effect happened, it is not recorded yet;
- ``worker.before_finish`` — the handler returned, its outcome is not written yet;
- ``worker.after_finish`` — the outcome is written;
- ``scheduler.after_batch`` — a batch of a tick's jobs is committed, the tick is not finished;
- ``scheduler.before_finish`` — every job of the tick is enqueued, the tick is not marked done;
- ``publish.in_transaction`` — an HTTP publish holds its keys (PostgreSQL: their in-flight
  locks) inside its transaction and has not inserted the jobs yet;
- ``relay.after_publish`` — the broker confirmed a batch, the relay has not marked it published;
- ``consumer.before_ack`` — a broker consumer wrote a job's outcome, the message is not acked;
- ``push.before_outcome`` — a push delivery got its answer (or failed); its outcome is not
  written yet;
- ``receiver.after_accept`` — ``WebhookReceiver`` committed a delivery's acceptance and has
  not answered yet.

Handlers may call ``fault_point("my.point")`` for points of their own.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from dataclasses import dataclass

__all__ = ["FaultInjected", "configure", "fault_point"]

ENV = "JOBLEDGER_FAULTS"


class FaultInjected(RuntimeError):
    """Raised by a fault point whose action is ``raise``."""


@dataclass(frozen=True, slots=True)
class _Fault:
    action: str
    argument: float | None
    on_hit: int | None
    probability: float | None


_faults: dict[str, _Fault] = {}
_hits: dict[str, int] = {}
_lock = threading.Lock()


def _parse(spec: str) -> dict[str, _Fault]:
    faults = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        point, sep, rule = item.partition("=")
        if not sep or not point:
            raise ValueError(f"{ENV}: expected point=action, got {item!r}")
        on_hit = probability = None
        if "@" in rule:
            rule, _, n = rule.partition("@")
            on_hit = int(n)
        elif "%" in rule:
            rule, _, p = rule.partition("%")
            probability = float(p)
        action, _, arg = rule.partition(":")
        if action not in ("kill", "exit", "raise", "sleep"):
            raise ValueError(f"{ENV}: unknown action {action!r} for {point!r}")
        faults[point.strip()] = _Fault(action, float(arg) if arg else None, on_hit, probability)
    return faults


def configure(spec: str | None) -> None:
    """Replace the active faults (``None`` or ``""`` turns them all off)."""
    global _faults
    with _lock:
        _faults = _parse(spec or "")
        _hits.clear()


def fault_point(name: str) -> None:
    """Fail here if a fault is configured for ``name``; otherwise return at once."""
    if not _faults:
        return
    fault = _faults.get(name)
    if fault is None:
        return
    with _lock:
        _hits[name] = hit = _hits.get(name, 0) + 1
    if fault.on_hit is not None and hit != fault.on_hit:
        return
    if fault.probability is not None and random.random() >= fault.probability:
        return
    if fault.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)  # SIGKILL is delivered asynchronously; never run past the point
    elif fault.action == "exit":
        os._exit(70)
    elif fault.action == "raise":
        raise FaultInjected(f"fault injected at {name}")
    elif fault.action == "sleep":
        time.sleep(fault.argument or 0.0)


configure(os.environ.get(ENV))
