"""An httpx transport that sends requests through aiohttp's connection pool.

The adapters speak httpx (requests, responses, timeouts, streaming). Its own pool,
httpcore, scans every pooled connection on each request and polls each socket to see
whether it has expired, so its CPU per request grows with concurrency: with a local server
in the same process, 0.9 ms per request at 1 in flight and 3.9 ms at 200, against 0.55 and
0.70 ms through aiohttp (``bench/model_http.py``). At gateway load the model client was the
largest single CPU cost, so this transport keeps the httpx API and swaps the pool.

aiohttp's errors are mapped onto httpx's so that callers classify them exactly as before:
refused / DNS / TLS → ``ConnectError``; connect timeout → ``ConnectTimeout``; read timeout
→ ``ReadTimeout``; a connection dropped mid-response → ``ReadError``; a bad URL →
``UnsupportedProtocol``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import httpx
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

_CHUNK = 64 * 1024


@contextlib.contextmanager
def _mapped_errors(request: httpx.Request) -> Iterator[None]:
    try:
        yield
    except aiohttp.ConnectionTimeoutError as exc:
        raise httpx.ConnectTimeout(str(exc) or "connect timed out", request=request) from exc
    except (aiohttp.SocketTimeoutError, aiohttp.ServerTimeoutError, TimeoutError) as exc:
        raise httpx.ReadTimeout(str(exc) or "read timed out", request=request) from exc
    except (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError) as exc:
        raise httpx.UnsupportedProtocol(str(exc), request=request) from exc
    except aiohttp.ClientConnectorError as exc:  # refused, DNS, TLS handshake
        raise httpx.ConnectError(str(exc), request=request) from exc
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError,
            aiohttp.ClientOSError) as exc:
        raise httpx.ReadError(str(exc) or type(exc).__name__, request=request) from exc
    except aiohttp.ClientError as exc:
        raise httpx.NetworkError(str(exc) or type(exc).__name__, request=request) from exc


class _Body(httpx.AsyncByteStream):
    """The response body, yielded as it arrives (so SSE streams stay live)."""

    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _mapped_errors(self._request):
            async for chunk in self._response.content.iter_chunked(_CHUNK):
                yield chunk

    async def aclose(self) -> None:
        self._response.release()


class AiohttpTransport(httpx.AsyncBaseTransport):
    """httpx requests over one lazily created ``aiohttp.ClientSession``.

    Proxies come from the environment (HTTP_PROXY, HTTPS_PROXY, NO_PROXY), as with httpx,
    looked up once per host (aiohttp's ``trust_env`` would do it, and a netrc lookup, in a
    thread on every request); certificates are verified with httpx's default context
    (certifi, or SSL_CERT_FILE). No cookies are kept."""

    def __init__(self, *, max_connections: int = 200, keepalive_expiry: float = 5.0,
                 verify: ssl.SSLContext | bool = True) -> None:
        self._limit = max_connections
        self._keepalive = keepalive_expiry
        self._ssl: ssl.SSLContext | bool = (
            httpx.create_ssl_context() if verify is True else verify)
        self._session: aiohttp.ClientSession | None = None
        self._proxies: dict[tuple[str, str, int | None], tuple[URL | None, Any]] = {}

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._limit, ssl=self._ssl,
                                             keepalive_timeout=self._keepalive)
            self._session = aiohttp.ClientSession(
                connector=connector, auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"))
        return self._session

    def _proxy_for(self, url: httpx.URL) -> tuple[URL | None, Any]:
        key = (url.scheme, url.host, url.port)
        if key not in self._proxies:
            try:
                self._proxies[key] = get_env_proxy_for_url(URL(str(url)))
            except LookupError:
                self._proxies[key] = (None, None)
        return self._proxies[key]

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeout = request.extensions.get("timeout", {})
        body = await request.aread()
        proxy, proxy_auth = self._proxy_for(request.url)
        with _mapped_errors(request):
            response = await self._get_session().request(
                request.method, str(request.url),
                headers=list(request.headers.multi_items()), data=body or None,
                allow_redirects=False, compress=None, proxy=proxy, proxy_auth=proxy_auth,
                timeout=aiohttp.ClientTimeout(
                    total=None, connect=timeout.get("pool"),
                    sock_connect=timeout.get("connect"), sock_read=timeout.get("read")))
        extensions = {"http_version": b"HTTP/1.1"}
        if response.reason:
            extensions["reason_phrase"] = response.reason.encode("ascii", "replace")
        return httpx.Response(response.status, headers=list(response.raw_headers),
                              stream=_Body(response, request), request=request,
                              extensions=extensions)

    async def aclose(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
            await asyncio.sleep(0)  # let the connector close its transports
