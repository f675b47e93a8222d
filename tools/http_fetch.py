"""http_fetch: GET a public web page, behind the guard against server-side request
forgery (``agent_core.ssrf``): every address the host resolves to is checked before the
connection, which goes to the checked addresses only; redirects are followed by hand and
each hop is checked again; size and time are capped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

import aiohttp

from agent_core import (
    AddressRefused,
    PinnedResolver,
    ToolContext,
    ToolError,
    Vetted,
    system_resolver,
    tool,
    vet_url,
)

if TYPE_CHECKING:
    from agent_core import SsrfResolver

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
    resolver: SsrfResolver = field(default=system_resolver, compare=False)


class FetchRefused(ToolError):
    """The URL is not allowed; the message says why (for the model)."""


async def check(url: str, policy: FetchPolicy) -> Vetted:
    """The host, port and vetted addresses of ``url``, or FetchRefused."""
    try:
        return await vet_url(url, allow_hosts=policy.allow_hosts, internal_ok=policy.internal_ok,
                         resolver=policy.resolver)
    except AddressRefused as exc:
        raise FetchRefused(str(exc).replace("is not on the allowlist",
                                            "is not on the fetch allowlist")) from None


async def fetch(url: str, policy: FetchPolicy) -> dict[str, Any]:
    """GET ``url`` under ``policy``: status, content type, final URL and (capped) text."""
    current = url
    for _ in range(policy.max_redirects + 1):
        vetted = await check(current, policy)
        connector = aiohttp.TCPConnector(resolver=PinnedResolver(vetted.host, vetted.addresses),
                                         use_dns_cache=False)
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


@tool(timeout=60, context_policy="summarise", tags={"egress"})
async def http_fetch(url: str, ctx: ToolContext | None = None) -> dict[str, Any]:
    """Fetch a public web page or API over HTTP(S) and return its text.

    Internal and private network addresses are refused.

    Args:
        url: The http:// or https:// URL to GET.
    """
    return await fetch(url, policy_from(ctx))
