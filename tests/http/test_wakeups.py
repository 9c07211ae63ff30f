"""A long poll's wake-ups outlive a listener that fails: the failure is logged with the
queues it listened for, its connection is closed, and the next wait listens again."""

from __future__ import annotations

import asyncio
import logging
import threading

from jobledger.http.wakeups import Wakeups

from ..support.processes import wait_until


class _Listener:
    def __init__(self, fails: bool):
        self.fails = fails
        self.queues: set[str] = set()
        self.closed = threading.Event()
        self.told = False

    def add(self, queue: str) -> None:
        self.queues.add(queue)

    def woken(self, timeout: float) -> set[str]:
        if self.fails:
            raise RuntimeError("the listening connection broke")
        if not self.told:
            self.told = True
            return {"a"}
        self.closed.wait(timeout)
        return set()

    def close(self) -> None:
        self.closed.set()


class _Listening:
    supported = True

    def __init__(self) -> None:
        self.made: list[_Listener] = []

    def listener(self, queues: list[str]) -> _Listener:
        listener = _Listener(fails=not self.made)  # the first one fails
        listener.queues.update(queues)
        self.made.append(listener)
        return listener


def test_a_listener_that_fails_is_logged_closed_and_made_again_by_the_next_wait(caplog):
    listening = _Listening()

    async def run() -> None:
        wakeups = Wakeups(listening, asyncio.get_running_loop())  # type: ignore[arg-type]
        try:
            first = wakeups.arm("a")
            assert await asyncio.to_thread(listening.made[0].closed.wait, 10)  # closed
            assert not first.is_set()
            # The failed listener is forgotten: the next wait listens again, and is woken.
            wait_until(lambda: wakeups._thread is None, what="the failed listener to be let go")
            again = wakeups.arm("a")
            assert await Wakeups.wait(again, 10.0)
            assert len(listening.made) == 2 and listening.made[1].queues == {"a"}
        finally:
            wakeups.close()

    with caplog.at_level(logging.ERROR, logger="jobledger.http"):
        asyncio.run(run())
    [record] = [r for r in caplog.records if r.name == "jobledger.http"]
    assert record.getMessage() == "the listener for queues a failed"
    assert record.exc_info is not None and "connection broke" in str(record.exc_info[1])
