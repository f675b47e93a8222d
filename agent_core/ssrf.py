"""The guard against server-side request forgery, for everything that connects to a URL
someone else chose (http_fetch, webhook callbacks, files people send, remote agents).

Before a connection the host is resolved and every address it resolves to is checked:
loopback, private, link-local (cloud metadata at 169.254.169.254 included), shared,
reserved, multicast and unspecified addresses are refused, IPv4 written as a decimal, hex or
octal number or in short form, IPv4-mapped/6to4/Teredo IPv6 included. The connection then
goes to the checked addresses only (``PinnedResolver``: no second DNS lookup that could be
rebound); a long-lived session checks each resolution as it happens
(``GuardedResolver``). Redirects are the caller's to follow by hand, each hop vetted again.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult

from .errors import AddressRefused

Resolver = Callable[[str, int], Awaitable[list[str]]]
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


async def system_resolver(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for ``host``."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def forbidden(address: Address) -> str | None:
    """Why an address must not be connected to, or None for a public one."""
    if isinstance(address, ipaddress.IPv6Address):
        for embedded in (address.ipv4_mapped, address.sixtofour,
                         address.teredo[1] if address.teredo else None):
            if embedded is not None:
                reason = forbidden(embedded)
                if reason:
                    return f"{reason} (embedded in {address})"
    checks = [("loopback", address.is_loopback), ("unspecified", address.is_unspecified),
              ("link-local (cloud metadata)", address.is_link_local),
              ("private", address.is_private), ("multicast", address.is_multicast),
              ("reserved", address.is_reserved)]
    for name, hit in checks:
        if hit:
            return f"a {name} address"
    if not address.is_global:
        return "a non-public address"
    return None


@dataclass(frozen=True, slots=True)
class Vetted:
    """A URL's host and port, and the addresses it may be reached at."""

    host: str
    port: int
    addresses: list[str]


def target(url: str) -> tuple[str, int]:
    """(host, port) of an http(s) URL; AddressRefused for anything else."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise AddressRefused(f"only http and https URLs are allowed, not {parts.scheme!r}")
    if "@" in parts.netloc:
        raise AddressRefused("URLs with credentials (user@host) are not allowed")
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise AddressRefused("the URL has no host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise AddressRefused("the URL's port is invalid") from None
    return host, port


def check_addresses(host: str, port: int, addresses: Collection[str], *,
                    internal_ok: Collection[str] = ()) -> None:
    """AddressRefused unless every one of ``addresses`` is public (or ``host`` or
    ``host:port`` is an internal service the deployment trusts)."""
    if not addresses:
        raise AddressRefused(f"{host!r} resolves to no address")
    exempt = host in internal_ok or f"{host}:{port}" in internal_ok
    for raw in addresses:
        try:
            address = ipaddress.ip_address(raw.split("%")[0])
        except ValueError:
            raise AddressRefused(f"{host!r} resolved to an unreadable address {raw!r}"
                                 ) from None
        reason = forbidden(address)
        if reason and not exempt:
            raise AddressRefused(f"{host!r} resolves to {address}, {reason}; refused")


def check_url(url: str, *, allow_hosts: Collection[str] = (),
              internal_ok: Collection[str] = ()) -> tuple[str, int]:
    """(host, port) of ``url`` after what can be checked without resolving it: the scheme,
    the allowlist, and an address written as a literal (which no resolver ever sees);
    AddressRefused otherwise. A name is checked as it resolves (``GuardedResolver``)."""
    host, port = target(url)
    if allow_hosts and host not in allow_hosts:
        raise AddressRefused(f"{host!r} is not on the allowlist")
    literal = _literal(host)
    if literal is not None:
        check_addresses(host, port, [literal], internal_ok=internal_ok)
    return host, port


def _literal(host: str) -> str | None:
    """The address ``host`` writes, in any spelling a resolver accepts (IPv4 as one
    decimal, hex or octal number or in short form), or None for a name."""
    bare = host.strip("[]").split("%")[0]
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        pass
    if bare and all(c in "0123456789abcdefx." for c in bare.lower()):
        try:
            return socket.inet_ntoa(socket.inet_aton(bare))
        except OSError:
            return None
    return None


async def vet_url(url: str, *, allow_hosts: Collection[str] = (),
              internal_ok: Collection[str] = (),
              resolver: Resolver = system_resolver) -> Vetted:
    """``url``'s host, port and checked addresses, or AddressRefused saying why.
    ``allow_hosts``: when not empty, the only hosts allowed; ``internal_ok``: ``host:port``
    pairs allowed even on internal addresses (an intranet service the deployment trusts)."""
    host, port = target(url)
    if allow_hosts and host not in allow_hosts:
        raise AddressRefused(f"{host!r} is not on the allowlist")
    try:
        addresses = await resolver(host, port)
    except (OSError, UnicodeError) as exc:
        raise AddressRefused(f"cannot resolve {host!r}: {exc}") from None
    check_addresses(host, port, addresses, internal_ok=internal_ok)
    return Vetted(host, port, addresses)


def _results(host: str, port: int, addresses: list[str]) -> list[ResolveResult]:
    return [{"hostname": host, "host": a, "port": port,
             "family": socket.AF_INET6 if ":" in a else socket.AF_INET,
             "proto": 0, "flags": socket.AI_NUMERICHOST} for a in addresses]


class PinnedResolver(AbstractResolver):
    """Answers a connector with the addresses already checked, nothing else."""

    def __init__(self, host: str, addresses: list[str]) -> None:
        self.host = host
        self.addresses = addresses

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        if host.rstrip(".").lower() != self.host:
            raise OSError(f"unexpected host {host!r}")
        return _results(host, port, self.addresses)

    async def close(self) -> None:
        return None


class ResolutionRefused(OSError):
    """What ``GuardedResolver`` raises for a name that leads inside (aiohttp hands it on
    as the ``os_error`` of its connection error)."""


class GuardedResolver(AbstractResolver):
    """Resolves for a long-lived session and refuses (OSError) any name that leads to an
    internal address, unless it is one of ``internal_ok`` (``host`` or ``host:port``).
    Addresses written as literals never reach a resolver: ``check_url`` the URL first."""

    def __init__(self, *, internal_ok: Collection[str] = (),
                 resolver: Resolver = system_resolver) -> None:
        self.internal_ok = frozenset(internal_ok)
        self.resolver = resolver

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        name = host.rstrip(".").lower()
        addresses = await self.resolver(name, port)
        try:
            check_addresses(name, port, addresses, internal_ok=self.internal_ok)
        except AddressRefused as exc:
            raise ResolutionRefused(str(exc)) from None
        return _results(host, port, addresses)

    async def close(self) -> None:
        return None
