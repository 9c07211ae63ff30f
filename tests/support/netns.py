"""Worker "hosts" in network namespaces, linked to this machine by veth pairs, with partitions.

Each host is a network namespace (``ip netns``) with its own UTS namespace (so its hostname is
its name) and one veth pair to the root namespace, on a /30 of a private /24 chosen so as not to
collide with addresses in use. Servers the hosts talk to (PostgreSQL, the fake provider) listen on
``network.server_address`` in the root namespace; every host routes to it through its own link.

A partition drops packets with nftables *inside* the host's namespace, in both directions: the
host's TCP connections neither fail nor close, they hang and retransmit, as across a real
network partition. Healing deletes the rules; the retransmissions then get through. Everything is
removed by ``close()`` (and by the next run, for namespaces left by a run that was killed).

Needs root, iproute2 (``ip netns``), ``unshare`` and ``nft``; ``unavailable()`` says what is
missing so tests can skip with that reason.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

from .waiting import run

PREFIX = "jobledger-"
_LOCK = Path("/tmp/jobledger-netns.lock")
_NETNS_DIR = Path("/var/run/netns")


def _run(*argv: str, input: str | None = None) -> str:
    proc = run(argv, input=input, text=True, timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def unavailable() -> str | None:
    """Why namespaced hosts cannot be built here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces and nftables need root"
    for tool in ("ip", "unshare", "nft"):
        if shutil.which(tool) is None:
            return f"the {tool!r} command is missing (iproute2, util-linux, nftables)"
    name = f"{PREFIX}probe-{os.getpid()}"
    try:
        _run("ip", "netns", "add", name)
        try:
            _run("ip", "netns", "exec", name, "nft", "list", "tables")
        finally:
            _run("ip", "netns", "del", name)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return f"cannot create a network namespace with nftables here: {exc}"
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> None:
    """Delete namespaces left behind by test runs whose process is gone."""
    if not _NETNS_DIR.is_dir():
        return
    for entry in _NETNS_DIR.iterdir():
        match = re.fullmatch(rf"{re.escape(PREFIX)}(\d+)-.+", entry.name)
        if match and not _pid_alive(int(match.group(1))):
            with contextlib.suppress(RuntimeError):
                _run("ip", "netns", "del", entry.name)


class Network:
    """Hosts in namespaces around the root namespace. Use as a context manager."""

    def __init__(self, hosts: Sequence[str]):
        self.hosts = list(hosts)
        self._tag = f"{os.getpid()}-{random.randrange(16**4):04x}"
        self._ns = {host: f"{PREFIX}{self._tag}-{host}" for host in self.hosts}
        self._if = {host: f"jl{self._tag[-4:]}{i}" for i, host in enumerate(self.hosts)}
        self._cut: set[str] = set()
        self._block = -1
        self._created: list[str] = []
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    # -- addresses --------------------------------------------------------------------------------

    def _addr(self, index: int, offset: int) -> str:
        return f"10.213.{self._block}.{4 * index + offset}"

    def gateway(self, host: str) -> str:
        """The root namespace's end of ``host``'s link."""
        return self._addr(self.hosts.index(host), 1)

    def address(self, host: str) -> str:
        """``host``'s own address."""
        return self._addr(self.hosts.index(host), 2)

    @property
    def server_address(self) -> str:
        """Where servers in the root namespace listen for every host."""
        return self.gateway(self.hosts[0])

    @property
    def gateways(self) -> list[str]:
        return [self.gateway(h) for h in self.hosts]

    def namespace(self, host: str) -> str:
        return self._ns[host]

    # -- building and tearing down ----------------------------------------------------------------

    def _build(self) -> None:
        remove_stale()
        _LOCK.touch(exist_ok=True)
        with open(_LOCK) as lock:
            # Choose a /24 no other run on this machine is using, and claim it atomically.
            fcntl.flock(lock, fcntl.LOCK_EX)
            used = set(re.findall(r"10\.213\.(\d+)\.", _run("ip", "-o", "-4", "addr", "show")))
            free = [b for b in range(256) if str(b) not in used]
            if not free:
                raise RuntimeError("no free 10.213.x.0/24 block for test hosts")
            self._block = random.choice(free)
            for i, host in enumerate(self.hosts):
                ns, outer, inner = self._ns[host], self._if[host], self._if[host] + "n"
                _run("ip", "netns", "add", ns)
                self._created.append(ns)
                _run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
                _run("ip", "link", "set", inner, "netns", ns)
                _run("ip", "addr", "add", f"{self._addr(i, 1)}/30", "dev", outer)
                _run("ip", "link", "set", outer, "up")
                _run("ip", "-n", ns, "addr", "add", f"{self._addr(i, 2)}/30", "dev", inner)
                _run("ip", "-n", ns, "link", "set", inner, "up")
                _run("ip", "-n", ns, "link", "set", "lo", "up")
                _run("ip", "-n", ns, "route", "add", "default", "via", self._addr(i, 1))

    def close(self) -> None:
        """Remove the namespaces (their veth pairs and nftables rules go with them)."""
        for host in self.hosts:
            # The kernel removes a namespace's devices lazily; remove our end of each link now.
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                _run("ip", "link", "del", self._if[host])
        for ns in reversed(self._created):
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                _run("ip", "netns", "del", ns)
        self._created.clear()

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- processes --------------------------------------------------------------------------------

    def command(self, host: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run on ``host``: in its network namespace, with its name as hostname."""
        return [
            "ip",
            "netns",
            "exec",
            self._ns[host],
            "unshare",
            "--uts",
            "sh",
            "-c",
            'hostname "$0" && exec "$@"',
            host,
            *argv,
        ]

    # -- partitions -------------------------------------------------------------------------------

    def cut(self, host: str, port: int | None = None) -> None:
        """Drop every packet between ``host`` and the server address (only TCP ``port`` if
        given), both ways. Connections hang; nothing is refused or reset."""
        server = self.server_address
        match_out = f"ip daddr {server}" + (f" tcp dport {port}" if port else "")
        match_in = f"ip saddr {server}" + (f" tcp sport {port}" if port else "")
        rules = (
            "table inet jobledger_partition {\n"
            "  chain output { type filter hook output priority 0; policy accept;\n"
            f"    {match_out} drop\n  }}\n"
            "  chain input { type filter hook input priority 0; policy accept;\n"
            f"    {match_in} drop\n  }}\n"
            "}\n"
        )
        _run("ip", "netns", "exec", self._ns[host], "nft", "-f", "-", input=rules)
        self._cut.add(host)

    def heal(self, host: str) -> None:
        if host in self._cut:
            _run(
                "ip", "netns", "exec", self._ns[host], "nft", "delete", "table", "inet",
                "jobledger_partition",
            )  # fmt: skip
            self._cut.discard(host)

    @contextlib.contextmanager
    def partitioned(self, hosts: Sequence[str], port: int | None = None) -> Iterator[None]:
        for host in hosts:
            self.cut(host, port)
        try:
            yield
        finally:
            for host in hosts:
                self.heal(host)
