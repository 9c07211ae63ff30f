"""Where deliveries may go: the SSRF guard.

A subscription's URL comes from whoever may create subscriptions, and the delivery loop runs
inside the operator's network, so a URL must not be a way to reach internal services
(``http://10.0.0.5/admin``, a cloud metadata endpoint, the database's HTTP port). The guard
decides on the **address a connection is actually made to**, at connect time: the host name is
resolved there, every address is checked, and the connection is opened to a checked address —
never resolved a second time. A name that resolved to a public address when the subscription
was created and to ``127.0.0.1`` now (DNS rebinding) is refused now.

Refused unless allow-listed: loopback, private (RFC 1918, unique local), link-local (which holds
cloud metadata services), carrier-grade NAT, multicast, unspecified, reserved, and any other
address that is not globally routable; IPv4-mapped IPv6 addresses are judged by their IPv4
address. Plain ``http://`` goes only to allow-listed networks; everything else must be https.
"""

from __future__ import annotations

import asyncio
import contextvars
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpcore

from ..errors import ConfigError

__all__ = ["AddressPolicy", "GuardedNetworkBackend", "TargetRefused"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]

#: Set around each request: True when its URL is plain http (allowed only to allow-listed
#: networks). Connections are made inside the request's task, so they see it.
plain_http: contextvars.ContextVar[bool] = contextvars.ContextVar("plain_http", default=False)


class TargetRefused(Exception):
    """The delivery's target address is not allowed (SSRF guard); nothing was sent."""


def _kind(addr: Address) -> str | None:
    """Why an address is not public, or None when it is."""
    if addr.is_loopback:
        return "loopback"
    if addr.is_link_local:
        return "link-local"
    if addr.is_unspecified:
        return "unspecified"
    if addr.is_multicast:
        return "multicast"
    if addr.is_private:
        return "private"
    if addr.is_reserved:
        return "reserved"
    if not addr.is_global:
        return "non-public"
    return None


def _address(text: str) -> Address:
    addr = ipaddress.ip_address(text.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


@dataclass(frozen=True)
class AddressPolicy:
    """Which addresses deliveries may connect to: public ones, plus the ``allow`` networks."""

    allow: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, networks: Iterable[str]) -> AddressPolicy:
        """From ``127.0.0.1``, ``10.0.0.0/8``, ``::1``-style texts (``ConfigError`` if bad)."""
        parsed = []
        for text in networks:
            try:
                parsed.append(ipaddress.ip_network(text.strip(), strict=False))
            except ValueError:
                raise ConfigError(
                    f"allow-listed network {text!r} is not an IP address or CIDR network "
                    "(e.g. 127.0.0.1 or 10.0.0.0/8)"
                ) from None
        return cls(tuple(parsed))

    def refusal(self, ip: str, plain: bool = False) -> str | None:
        """Why a connection to ``ip`` is refused, or None when it is allowed."""
        addr = _address(ip)
        if any(addr.version == net.version and addr in net for net in self.allow):
            return None
        kind = _kind(addr)
        if kind is not None:
            return (
                f"{addr} is a {kind} address; deliveries there are refused unless its network "
                "is allow-listed (--push-allow-network)"
            )
        if plain:
            return (
                f"{addr} is not in an allow-listed network, and plain http goes only there; "
                "use an https:// URL"
            )
        return None


async def _resolve(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class GuardedNetworkBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network layer with the guard: resolve, check, connect to a checked address.

    TLS is started afterwards by httpcore with the URL's host name, so certificates are
    verified against the name, not the address."""

    def __init__(self, policy: AddressPolicy, resolve: Resolver | None = None):
        self._policy = policy
        self._resolve = resolve or _resolve
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            addresses = await self._resolve(host, port)
        except OSError as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        plain = plain_http.get()
        allowed, refusals = [], []
        for ip in addresses:
            why = self._policy.refusal(ip, plain)
            if why is None:
                allowed.append(ip)
            else:
                refusals.append(why)
        if not allowed:
            raise TargetRefused(
                f"{host} resolves to no allowed address: " + "; ".join(refusals or ["nothing"])
            )
        error: Exception | None = None
        for ip in allowed:
            try:
                return await self._inner.connect_tcp(
                    ip, port, timeout, local_address, socket_options
                )
            except httpcore.ConnectError as exc:
                error = exc
        assert error is not None
        raise error

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise TargetRefused("deliveries never go to a Unix socket")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)
