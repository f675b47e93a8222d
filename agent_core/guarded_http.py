"""The SSRF guard (``ssrf``) for httpx clients: an SDK that takes an ``httpx.AsyncClient``
(the a2a-sdk's client) connects only to addresses the guard allows.

httpx has no resolver hook, so the guard sits where httpcore opens a TCP connection: the
host is resolved, every address checked (``ssrf.check_addresses``), and the connection made
to a checked address, so no second lookup can be rebound. TLS still verifies the URL's
host name. Every connection is checked: a URL the remote side hands over (an agent card's
interface URL, a redirect) included.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from typing import Any

import httpcore
import httpx

from .errors import AddressRefused
from .ssrf import Resolver, check_addresses, system_resolver

log = logging.getLogger(__name__)


class _GuardedBackend(httpcore.AsyncNetworkBackend):
    """Opens TCP connections to checked addresses only."""

    def __init__(self, internal_ok: Collection[str], resolver: Resolver) -> None:
        self._inner = httpcore.AnyIOBackend()
        self._internal_ok = frozenset(internal_ok)
        self._resolver = resolver

    # httpcore's interface: it names the parameter ``timeout``.
    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,  # noqa: ASYNC109
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None
                          ) -> httpcore.AsyncNetworkStream:
        name = host.strip("[]").rstrip(".").lower()
        try:
            addresses = await self._resolver(name, port)
        except (OSError, UnicodeError) as exc:
            raise httpcore.ConnectError(f"cannot resolve {name!r}: {exc}") from None
        try:
            check_addresses(name, port, addresses, internal_ok=self._internal_ok)
        except AddressRefused as exc:
            log.warning("connection refused by the SSRF guard: %s", exc)
            raise httpcore.ConnectError(str(exc)) from None
        last: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(address, port, timeout=timeout,
                                                     local_address=local_address,
                                                     socket_options=socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        raise last or httpcore.ConnectError(f"{name!r}: no address")

    async def connect_unix_socket(self, path: str, timeout: float | None = None,  # noqa: ASYNC109
                                  socket_options: Iterable[Any] | None = None
                                  ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("Unix sockets are not a remote agent's address")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """An httpx transport whose every connection passes the SSRF guard: public addresses
    only, unless the host (or host:port) is in ``internal_ok``. No proxy from the
    environment (a proxy would make the connection instead)."""

    def __init__(self, *, internal_ok: Collection[str] = (),
                 resolver: Resolver = system_resolver) -> None:
        super().__init__(trust_env=False)
        # httpx takes no network backend; its transport keeps the pool in ``_pool`` (0.28),
        # which is replaced by one that connects through the guard (tests/unit/
        # test_guarded_http.py fails should that ever stop holding).
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            network_backend=_GuardedBackend(internal_ok, resolver))


def guarded_client(*, internal_ok: Collection[str] = (), timeout: float | httpx.Timeout = 30.0,
                   headers: dict[str, str] | None = None) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` behind the SSRF guard that follows no redirect by itself
    (each hop would be a URL the remote side chose: it is refused or allowed by the guard
    all the same, but the caller decides whether to follow)."""
    return httpx.AsyncClient(transport=GuardedTransport(internal_ok=internal_ok),
                             timeout=timeout, headers=headers, follow_redirects=False,
                             trust_env=False)
