"""The model adapters' HTTP: one aiohttp connection pool, and what its failures mean.

The adapters used to speak httpx over this pool (an httpx transport backed by aiohttp,
since httpcore's own pool costs 3.9 ms of CPU per request at 200 in flight against 0.7
through aiohttp). httpx's request and response objects on top still cost about a tenth of
the gateway's CPU under load (building each request, its headers and URL twice over), and
importing httpx loads ~100 modules (~70-160 ms here; with click installed, as the MCP SDK
brings it, httpx also imports its command line: rich, click, pygments). The adapters now
post straight through aiohttp; ``bench/model_http.py`` measures the three ways.

Failures are sorted into what the retry rules need (``Failure.kind``):

- ``timeout``: connect or read timeout (retried);
- ``unreachable``: refused, DNS, TLS handshake, a bad URL (not retried: the setting is wrong);
- ``broken``: the connection dropped mid-request or mid-response (retried).
"""

from __future__ import annotations

import asyncio
import codecs
import re
from collections.abc import AsyncIterator
from typing import Any, Literal

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

Kind = Literal["timeout", "unreachable", "broken"]
_LINE_END = re.compile(r"\r\n|\r|\n")


class Failure(Exception):
    """A request that got no (complete) answer; ``kind`` says which way it failed."""

    def __init__(self, kind: Kind, exc: BaseException) -> None:
        super().__init__(str(exc) or type(exc).__name__)
        self.kind = kind


def classify(exc: BaseException) -> Kind | None:
    """The Failure kind of one of aiohttp's exceptions (None: not a transport failure)."""
    if isinstance(exc, TimeoutError):  # aiohttp's connect and read timeouts derive from it
        return "timeout"
    if isinstance(exc, aiohttp.InvalidURL | aiohttp.NonHttpUrlClientError |
                  aiohttp.ClientConnectorError):  # refused, DNS, TLS handshake
        return "unreachable"
    if isinstance(exc, aiohttp.ClientError):  # payload cut short, disconnected, reset
        return "broken"
    return None


class EnvProxies:
    """The proxy (and its credentials) that HTTP(S)_PROXY / NO_PROXY name for a URL's
    scheme, host and port, looked up once each (aiohttp's ``trust_env`` looks it up, and
    reads netrc, in a thread on every request)."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str | None, int | None], tuple[URL | None, Any]] = {}

    def __call__(self, url: URL) -> tuple[URL | None, Any]:
        key = (url.scheme, url.host, url.port)
        if key not in self._known:
            try:
                self._known[key] = get_env_proxy_for_url(url)
            except LookupError:
                self._known[key] = (None, None)
        return self._known[key]


class Pool:
    """One lazily created ``aiohttp.ClientSession`` (it needs the running loop).

    Proxies come from the environment (``EnvProxies``). No cookies are kept. Bodies are
    decompressed (gzip, deflate). Certificates are verified with aiohttp's default context:
    the system's trust store, or SSL_CERT_FILE / SSL_CERT_DIR when set, read at the first
    handshake (agent_core._tls; httpx used certifi's bundle, and a second context cost
    ~50 ms at the first request)."""

    def __init__(self, *, headers: dict[str, str], max_connections: int = 200,
                 keepalive_expiry: float = 5.0) -> None:
        self._headers = headers
        self._limit = max_connections
        self._keepalive = keepalive_expiry
        self._session: aiohttp.ClientSession | None = None
        self._proxy_for = EnvProxies()

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._limit, keepalive_timeout=self._keepalive)
            self._session = aiohttp.ClientSession(
                connector=connector, headers=self._headers,
                cookie_jar=aiohttp.DummyCookieJar())
        return self._session

    async def post(self, url: str, body: bytes, *, connect: float, read: float
                   ) -> aiohttp.ClientResponse:
        """Send a JSON body; the response's head has arrived (Failure if it did not)."""
        try:
            target = URL(url)
            proxy, proxy_auth = self._proxy_for(target)
            return await self._get_session().post(
                target, data=body, headers={"Content-Type": "application/json"},
                allow_redirects=False, proxy=proxy, proxy_auth=proxy_auth,
                timeout=aiohttp.ClientTimeout(total=None, connect=read, sock_connect=connect,
                                              sock_read=read))
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise Failure(classify(exc) or "unreachable", exc) from exc

    async def aclose(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
            await asyncio.sleep(0)  # let the connector close its transports


async def read_body(response: aiohttp.ClientResponse) -> bytes:
    """The whole body (Failure if the connection broke or went silent on the way)."""
    try:
        return await response.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise Failure(classify(exc) or "broken", exc) from exc
    finally:
        response.release()


async def lines(response: aiohttp.ClientResponse) -> AsyncIterator[str]:
    """The body's lines as they arrive (ended by LF, CRLF or CR, as SSE allows), without
    their line ends; a line may be any length. Failure if the stream breaks."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    pending = ""
    try:
        async for chunk in response.content.iter_any():
            pending += decoder.decode(chunk)
            held = pending.endswith("\r")  # maybe the first half of a CRLF: wait for more
            *complete, pending = _LINE_END.split(pending[:-1] if held else pending)
            pending += "\r" if held else ""
            for line in complete:
                yield line
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise Failure(classify(exc) or "broken", exc) from exc
    finally:
        response.release()
    pending += decoder.decode(b"", final=True)
    last = pending.removesuffix("\r")
    if last:
        yield last
