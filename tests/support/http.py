"""HTTP API servers for the tests: in a thread of the test process, or as real processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn

from jobledger import Ledger
from jobledger._services.keys import create_api_key
from jobledger.http import ServerSettings, create_app

from .processes import ROOT, wait_until
from .waiting import Patience

_RUNNING = re.compile(r"jobledger serving .* on http://[^:]+:(\d+)")


class ThreadServer:
    """``create_app(ledger)`` served by uvicorn on a free port, in a thread of this process."""

    def __init__(self, ledger: Ledger, settings: ServerSettings | None = None):
        self.ledger = ledger
        self.app = create_app(ledger, settings)
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, daemon=True)
        self._thread.start()
        wait_until(lambda: self.server.started, timeout=10, what="the server to start")
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    @property
    def state(self) -> Any:
        return self.app.state.jobledger

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(10)


class Api:
    """A server plus keys and clients for one test."""

    def __init__(self, ledger: Ledger, settings: ServerSettings | None = None):
        self.ledger = ledger
        self.server = ThreadServer(ledger, settings)
        self.url = self.server.url
        self.admin_key = self.key("admin")
        self._clients: list[httpx.Client] = []
        self.admin = self.client(self.admin_key)

    def key(self, *scopes: str, rate: float | None = None, burst: float | None = None) -> str:
        key, _ = create_api_key(
            self.ledger.backend, "test", list(scopes), rate_per_second=rate, burst=burst
        )
        return key

    def client(self, key: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        client = httpx.Client(base_url=self.url, headers=headers, timeout=30)
        self._clients.append(client)
        return client

    def queue(self, name: str = "q", **settings: Any) -> dict[str, Any]:
        response = self.admin.put(f"/v1/queues/{name}", json=settings)
        assert response.status_code in (200, 201), response.text
        return dict(response.json())

    def close(self) -> None:
        for client in self._clients:
            client.close()
        self.server.stop()


@contextmanager
def api_server(ledger: Ledger, settings: ServerSettings | None = None) -> Iterator[Api]:
    api = Api(ledger, settings)
    try:
        yield api
    finally:
        api.close()


class ServeProcess:
    """``jobledger serve`` in a process of its own; its output is collected as it comes."""

    def __init__(self, url: str, *args: str, faults: str | None = None):
        env = dict(os.environ)
        env.pop("JOBLEDGER_FAULTS", None)
        if faults:
            env["JOBLEDGER_FAULTS"] = faults
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jobledger", "serve", "--url", url, "--port", "0", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        port = wait_until(self._port, timeout=30, what="jobledger serve to listen")
        self.url = f"http://127.0.0.1:{port}"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def _port(self) -> int | None:
        for line in list(self.lines):
            match = _RUNNING.search(line)
            if match:
                return int(match[1])
        if self.proc.poll() is not None:
            raise AssertionError(f"jobledger serve exited:\n{self.output}")
        return None

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def stop(self, kill: bool = False) -> int:
        if self.proc.poll() is None:
            if kill:
                self.proc.kill()
            else:
                self.proc.terminate()
        patience = Patience(15)
        while self.proc.poll() is None and not patience.expired():
            time.sleep(0.05)
        if self.proc.poll() is None:
            self.proc.kill()
        code = self.proc.wait()
        self._reader.join(5)
        return code

    def rss_peak_kib(self) -> int:
        """The process's peak resident memory (VmHWM), in KiB."""
        with open(f"/proc/{self.proc.pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        raise AssertionError("no VmHWM in /proc status")


def elapsed(fn: Any) -> tuple[Any, float]:
    start = time.monotonic()
    result = fn()
    return result, time.monotonic() - start
