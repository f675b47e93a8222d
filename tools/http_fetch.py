"""http_fetch: GET a public web page, with a guard against server-side request forgery.

Before any connection the host is resolved and every address it resolves to is checked:
loopback, private, link-local (cloud metadata at 169.254.169.254 included), shared,
reserved, multicast and unspecified addresses are refused, IPv4 written as a decimal, hex or
octal number or in short form, IPv4-mapped/6to4/Teredo IPv6 included. The connection then
goes to the checked address only (no second DNS lookup that could be rebound), redirects
are followed by hand and each hop is checked again, and size and time are capped.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from agent_core import ToolContext, ToolError, tool

Resolver = Callable[[str, int], Awaitable[list[str]]]
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


async def system_resolver(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for ``host``."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class FetchPolicy:
    """Limits of http_fetch for one deployment."""

    #: When non-empty, only these host names may be fetched.
    allow_hosts: frozenset[str] = frozenset()
    #: host:port pairs allowed even on internal addresses (an intranet service you trust).
    internal_ok: frozenset[str] = frozenset()
    max_bytes: int = 1_000_000
    timeout: float = 10.0
    max_redirects: int = 5
    resolver: Resolver = field(default=system_resolver, compare=False)


class FetchRefused(ToolError):
    """The URL is not allowed; the message says why (for the model)."""


def forbidden(address: Address) -> str | None:
    """Why an address must not be fetched from, or None for a public one."""
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


async def check(url: str, policy: FetchPolicy) -> tuple[str, int, list[str]]:
    """(host, port, vetted addresses) for ``url``, or FetchRefused."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise FetchRefused(f"only http and https URLs can be fetched, not {parts.scheme!r}")
    if "@" in parts.netloc:
        raise FetchRefused("URLs with credentials (user@host) are not allowed")
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise FetchRefused("the URL has no host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise FetchRefused("the URL's port is invalid") from None
    if policy.allow_hosts and host not in policy.allow_hosts:
        raise FetchRefused(f"{host!r} is not on the fetch allowlist")
    try:
        addresses = await policy.resolver(host, port)
    except (OSError, UnicodeError) as exc:
        raise FetchRefused(f"cannot resolve {host!r}: {exc}") from None
    if not addresses:
        raise FetchRefused(f"{host!r} resolves to no address")
    exempt = f"{host}:{port}" in policy.internal_ok
    for raw in addresses:
        try:
            address = ipaddress.ip_address(raw.split("%")[0])
        except ValueError:
            raise FetchRefused(f"{host!r} resolved to an unreadable address {raw!r}") from None
        reason = forbidden(address)
        if reason and not exempt:
            raise FetchRefused(f"{host!r} resolves to {address}, {reason}; refused")
    return host, port, addresses


class _Pinned(AbstractResolver):
    """Answers the connector with the addresses already checked, nothing else."""

    def __init__(self, host: str, addresses: list[str]) -> None:
        self.host = host
        self.addresses = addresses

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        if host.rstrip(".").lower() != self.host:
            raise OSError(f"unexpected host {host!r}")
        return [{"hostname": host, "host": a, "port": port,
                 "family": socket.AF_INET6 if ":" in a else socket.AF_INET,
                 "proto": 0, "flags": socket.AI_NUMERICHOST} for a in self.addresses]

    async def close(self) -> None:
        return None


async def fetch(url: str, policy: FetchPolicy) -> dict[str, Any]:
    """GET ``url`` under ``policy``: status, content type, final URL and (capped) text."""
    current = url
    for _ in range(policy.max_redirects + 1):
        host, _port, addresses = await check(current, policy)
        connector = aiohttp.TCPConnector(resolver=_Pinned(host, addresses), use_dns_cache=False)
        timeout = aiohttp.ClientTimeout(total=policy.timeout)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            try:
                async with session.get(current, allow_redirects=False) as response:
                    if response.status in (301, 302, 303, 307, 308):
                        location = response.headers.get("Location")
                        if not location:
                            raise ToolError(f"redirect {response.status} without a Location")
                        current = urljoin(current, location)
                        continue
                    body = await response.content.read(policy.max_bytes + 1)
                    text = body[:policy.max_bytes].decode(response.charset or "utf-8",
                                                          errors="replace")
                    return {"url": current, "status": response.status,
                            "content_type": response.content_type, "text": text,
                            "truncated": len(body) > policy.max_bytes}
            except TimeoutError:
                raise ToolError(f"{current!r} did not answer within {policy.timeout:g}s",
                                retryable=True) from None
            except aiohttp.ClientError as exc:
                raise ToolError(f"fetching {current!r} failed: {exc}", retryable=True) from None
    raise ToolError(f"more than {policy.max_redirects} redirects")


def policy_from(ctx: ToolContext | None) -> FetchPolicy:
    """The deployment's fetch policy (ctx.extra["fetch"], set by the gateway)."""
    raw = (ctx.extra.get("fetch") if ctx is not None else None) or {}
    return FetchPolicy(
        allow_hosts=frozenset(h.lower() for h in raw.get("allow_hosts", ())),
        internal_ok=frozenset(raw.get("internal_ok", ())),
        max_bytes=int(raw.get("max_bytes", 1_000_000)),
        timeout=float(raw.get("timeout", 10.0)))


@tool(timeout=60, context_policy="summarise")
async def http_fetch(url: str, ctx: ToolContext | None = None) -> dict[str, Any]:
    """Fetch a public web page or API over HTTP(S) and return its text.

    Internal and private network addresses are refused.

    Args:
        url: The http:// or https:// URL to GET.
    """
    return await fetch(url, policy_from(ctx))
