"""Brokers for the tests: the shared servers on this machine (with names unique to each test,
deleted afterwards), and private servers that a test may kill and restart.

The shared RabbitMQ (5672), NATS JetStream (4222) and Redis (6379) are never restarted; a test
that needs a broker to die starts its own ``rabbitmq-server``, ``nats-server`` or
``redis-server`` on free ports with its own data directory, and kills it with SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from .waiting import Patience

BROKERS = ["rabbitmq", "nats", "redis"]

SHARED = {
    "rabbitmq": ("127.0.0.1", 5672),
    "nats": ("127.0.0.1", 4222),
    "redis": ("127.0.0.1", 6379),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def broker_url(kind: str, host: str, port: int, prefix: str, **options: object) -> str:
    """A broker URL with test-friendly redelivery times (1 s instead of a minute)."""
    query = {"prefix": prefix, "timeout": 5}
    if kind == "nats":
        query |= {"ack_wait": 1, "stream": prefix.upper()}
        base = f"nats://{host}:{port}"
    elif kind == "redis":
        query |= {"reclaim_after": 1}
        base = f"redis://{host}:{port}/0"
    else:
        base = f"amqp://guest:guest@{host}:{port}/"
    query |= options
    return base + "?" + "&".join(f"{k}={v}" for k, v in query.items())


def unique_prefix() -> str:
    return "t" + uuid.uuid4().hex[:10]


def cleanup(kind: str, host: str, port: int, prefix: str, queues: list[str]) -> None:
    """Delete what a test created on a broker: its queues, stream or keys."""
    asyncio.run(_cleanup(kind, host, port, prefix, queues))


async def _cleanup(kind: str, host: str, port: int, prefix: str, queues: list[str]) -> None:
    if kind == "rabbitmq":
        import aio_pika

        conn = await aio_pika.connect(f"amqp://guest:guest@{host}:{port}/", timeout=5)
        async with conn:
            for queue in queues:
                channel = await conn.channel()
                await channel.queue_delete(f"{prefix}.{queue}")
    elif kind == "nats":
        import nats
        import nats.js.errors

        nc = await nats.connect(f"nats://{host}:{port}", connect_timeout=5)
        try:
            await nc.jetstream().delete_stream(prefix.upper())
        except nats.js.errors.NotFoundError:
            pass
        finally:
            await nc.close()
    else:
        import redis.asyncio

        client = redis.asyncio.Redis(host=host, port=port)
        try:
            await client.delete(*[f"{prefix}:{q}" for q in queues])
        finally:
            await client.aclose()


def backlog(kind: str, host: str, port: int, prefix: str, queue: str) -> int:
    """Messages waiting in a queue's destination (not yet delivered or not yet acked)."""
    return asyncio.run(_backlog(kind, host, port, prefix, queue))


async def _backlog(kind: str, host: str, port: int, prefix: str, queue: str) -> int:
    if kind == "rabbitmq":
        import aio_pika

        conn = await aio_pika.connect(f"amqp://guest:guest@{host}:{port}/", timeout=5)
        async with conn:
            channel = await conn.channel()
            declared = await channel.declare_queue(f"{prefix}.{queue}", passive=True)
            return int(declared.declaration_result.message_count or 0)
    if kind == "nats":
        import nats

        nc = await nats.connect(f"nats://{host}:{port}", connect_timeout=5)
        try:
            info = await nc.jetstream().stream_info(prefix.upper())
            return int(info.state.messages)
        finally:
            await nc.close()
    import redis.asyncio

    client = redis.asyncio.Redis(host=host, port=port)
    try:
        return int(await client.xlen(f"{prefix}:{queue}"))
    finally:
        await client.aclose()


class PrivateBroker:
    """A broker of this test's own, on free ports, that can be killed and started again with
    its data (durable queues, streams, append-only file) intact."""

    kind: str

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"jobledger-{self.kind}-"))
        self.host = "127.0.0.1"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def command(self) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def ready(self) -> bool:
        raise NotImplementedError

    def start(self, timeout: float = 60.0) -> PrivateBroker:
        argv, env = self.command()
        log = open(self.dir / f"server-{self.starts}.log", "wb")  # noqa: SIM115 - kept open by the child
        self.proc = subprocess.Popen(
            argv,
            env={**os.environ, **env},
            cwd=self.dir,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.starts += 1
        patience = Patience(timeout)
        while not self.ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited while starting; see {self.dir}")
            if patience.expired():
                self.kill()
                raise RuntimeError(
                    f"{self.kind} did not start: {patience.describe()}; see {self.dir}"
                )
            time.sleep(0.05)
        return self

    def kill(self) -> None:
        """SIGKILL the server and everything it started: no shutdown, like a crash."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.proc = None
        patience = Patience(10)
        while answers(self.host, self.port) and not patience.expired():
            time.sleep(0.05)

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, prefix: str, **options: object) -> str:
        return broker_url(self.kind, self.host, self.port, prefix, **options)


class PrivateRabbit(PrivateBroker):
    """``rabbitmq-server`` under its own node name, ports, config and data directory (the
    machine's epmd is shared, as Erlang nodes always share it)."""

    kind = "rabbitmq"

    def __init__(self) -> None:
        super().__init__()
        self.node = f"jltest{uuid.uuid4().hex[:8]}@localhost"
        self.dist_port = free_port()
        (self.dir / "rabbitmq.conf").write_text(
            f"listeners.tcp.local = 127.0.0.1:{self.port}\ndisk_free_limit.absolute = 1MB\n"
        )
        (self.dir / "env.conf").write_text("")
        (self.dir / "enabled_plugins").write_text("[].\n")
        cookie = self.dir / ".erlang.cookie"
        cookie.write_text(uuid.uuid4().hex)
        cookie.chmod(0o400)

    def command(self) -> tuple[list[str], dict[str, str]]:
        binary = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
        argv = [str(binary if binary.exists() else shutil.which("rabbitmq-server"))]
        env = {
            "HOME": str(self.dir),
            "RABBITMQ_CONF_ENV_FILE": str(self.dir / "env.conf"),
            "RABBITMQ_CONFIG_FILE": str(self.dir / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.dir / "enabled_plugins"),
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.dir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.dir / "log"),
            "RABBITMQ_PID_FILE": str(self.dir / "pid"),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        }
        return argv, env

    def ready(self) -> bool:
        # The AMQP handshake: a server that answers the protocol header with Connection.Start
        # (a method frame, type 1) is ready for clients.
        try:
            with socket.create_connection((self.host, self.port), timeout=1) as s:
                s.sendall(b"AMQP\x00\x00\x09\x01")
                return s.recv(1) == b"\x01"
        except OSError:
            return False


class PrivateNats(PrivateBroker):
    """``nats-server -js`` with its own store directory."""

    kind = "nats"

    def command(self) -> tuple[list[str], dict[str, str]]:
        argv = [
            shutil.which("nats-server") or "nats-server",
            "-a",
            self.host,
            "-p",
            str(self.port),
            "-js",
            "-sd",
            str(self.dir / "store"),
        ]
        return argv, {}

    def ready(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=1) as s:
                return s.recv(4) == b"INFO"
        except OSError:
            return False


class PrivateRedis(PrivateBroker):
    """``redis-server`` with an append-only file fsynced on every write, so that what it
    confirmed survives a crash."""

    kind = "redis"

    def command(self) -> tuple[list[str], dict[str, str]]:
        argv = [
            shutil.which("redis-server") or "redis-server",
            "--port",
            str(self.port),
            "--bind",
            self.host,
            "--dir",
            str(self.dir),
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
            "--protected-mode",
            "no",
        ]
        return argv, {}

    def ready(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(7) == b"+PONG\r\n"
        except OSError:
            return False


PRIVATE = {"rabbitmq": PrivateRabbit, "nats": PrivateNats, "redis": PrivateRedis}


def jobledger_process(
    db_url: str, *args: str, env: dict[str, str] | None = None, faults: str | None = None
) -> subprocess.Popen[str]:
    """``python -m jobledger ARGS`` in a new process, against ``db_url``."""
    from .processes import ROOT

    full_env = dict(os.environ)
    full_env.pop("JOBLEDGER_FAULTS", None)
    full_env.update(env or {})
    full_env["JOBLEDGER_URL"] = db_url
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full_env.get("PYTHONPATH")]))
    if faults:
        full_env["JOBLEDGER_FAULTS"] = faults
    return subprocess.Popen(
        [sys.executable, "-m", "jobledger", *args],
        cwd=ROOT,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
