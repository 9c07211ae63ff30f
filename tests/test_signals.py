"""SIGTERM and SIGINT are acted on off the signal handler (``jobledger._signals``).

Python runs a handler in the main thread between two bytecodes, possibly while that thread
holds the lock of the event it waits on. A worker whose handler called ``stop()`` there waited
for its own lock for ever: CI saw a worker ignore SIGTERM (once in about a hundred runs of the
shutdown test). Each case below makes the main thread hold that lock when the signal arrives,
in a process of its own, which must then end: with the handler acting in place, it hangs.
"""

from __future__ import annotations

import sys
import textwrap

from .support.waiting import run

HELPER = """
import os, signal, threading
from jobledger._signals import relayed_signals

stopped = threading.Event()
seen = []

def act(signum, count):
    seen.append((signal.Signals(signum).name, count))
    if count == 2:
        stopped.set()

with relayed_signals(act):
    with stopped._cond:  # as inside Event.wait: the main thread holds the event's lock
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10_000):  # the handlers run here, between two bytecodes
            pass
    stopped.wait()
print(seen, signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
"""


def _python(code: str, *args: str) -> tuple[int, str, str]:
    done = run([sys.executable, "-c", textwrap.dedent(code), *args], timeout=30, text=True)
    return done.returncode, done.stdout, done.stderr


def test_a_signal_is_acted_on_while_the_main_thread_holds_the_lock_the_action_takes():
    code, out, err = _python(HELPER)
    assert code == 0, err
    # In the order they came, counted; and the handlers are put back after the block.
    assert out.strip() == "[('SIGTERM', 1), ('SIGINT', 2)] True"


def test_the_signal_after_interrupt_after_interrupts_the_main_thread_at_once():
    code, out, err = _python(
        """
        import os, signal, threading, time
        from jobledger._signals import relayed_signals

        first = threading.Event()
        try:
            with relayed_signals(lambda s, n: first.set(), [signal.SIGINT], interrupt_after=1):
                os.kill(os.getpid(), signal.SIGINT)
                first.wait()
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(60)
        except KeyboardInterrupt:
            print("interrupted")
        """
    )
    assert (code, out.strip()) == (0, "interrupted"), err


WORKER = """
import os, signal, sys, threading
from jobledger import Ledger
from jobledger._runtime.hooks import WorkerObserver

ledger = Ledger(sys.argv[1])
ledger.migrate()
ledger.task(lambda ctx: None, name="ping", queue="q")
ledger.enqueue("ping", key="p1")

class TermDuringClaim(WorkerObserver):
    # on_claim runs in the fetch loop: the main thread, under run_worker
    def on_claim(self, worker, jobs):
        with worker._wake._cond:  # the lock worker.stop() takes, held by the main thread
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(10_000):  # the handler runs here
                pass

ledger.observers.append(TermDuringClaim())
stats = ledger.run_worker(["q"], poll_interval=0.05)
print("stopped", stats.claimed, ledger.jobs()[0].state.value)
"""


def test_a_worker_in_the_main_thread_stops_on_sigterm_whatever_lock_its_thread_holds(db_url):
    code, out, err = _python(WORKER, db_url)
    assert code == 0, err
    assert out.strip() == "stopped 1 done"
