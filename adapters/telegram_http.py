"""python-telegram-bot's Bot API requests over aiohttp (its ``BaseRequest`` extension point).

PTB's own backend is httpx, which in the gateway is used for nothing else: two
``httpx.AsyncClient`` pools and, at the first request, httpcore's async connection pool on
anyio, ~2.5 MB of every gateway with a Telegram channel (``bench/gateway_rss.py``), a second
HTTP stack beside the aiohttp the rest of the gateway speaks. This one sends the same
requests (form fields, or multipart with the files to upload, PTB's User-Agent) on aiohttp,
verifying with aiohttp's default context (the process's one trust store,
``agent_core._tls``), and keeps PTB's contract: a timeout is ``TimedOut``,
any other transport failure ``NetworkError`` (``Unsent``, one of them, when no connection
was made, so the request is known not to have arrived), and the status and body go back to
PTB, which reads the Bot API's own errors (429 retry_after, 400, 403) from them. As httpx
did: the proxy HTTP(S)_PROXY / NO_PROXY name (looked up once per host), no redirects
followed, no cookies kept.

Timeouts as PTB gives them (its defaults: 5 s to connect, read and write, 1 s for a free
connection, 20 s to write an upload): ``pool + connect`` to have a connection, ``read``
between two reads of the answer, and the sum of all four for the whole request, since
aiohttp has no write timeout of its own.
"""

from __future__ import annotations

from typing import Any

import aiohttp
from telegram.error import NetworkError, TimedOut
from telegram.request import BaseRequest, RequestData
from yarl import URL

from agent_core import EnvProxies

#: The type of PTB's "not given" timeouts (``BaseRequest.DEFAULT_NONE``).
_NOT_GIVEN = type(BaseRequest.DEFAULT_NONE)


class Unsent(NetworkError):
    """The request never reached the Bot API (no connection could be made): sending it
    again cannot show anything twice. Any other NetworkError or TimedOut came after the
    request was sent, and Telegram may have carried it out."""


class AiohttpRequest(BaseRequest):
    """A pool of ``pool_size`` connections to the Bot API, opened by ``initialize``."""

    def __init__(self, *, pool_size: int, read_timeout: float | None = 5.0,
                 write_timeout: float | None = 5.0, connect_timeout: float | None = 5.0,
                 pool_timeout: float | None = 1.0,
                 media_write_timeout: float | None = 20.0) -> None:
        self.pool_size = pool_size
        self._defaults = {"read": read_timeout, "write": write_timeout,
                          "connect": connect_timeout, "pool": pool_timeout}
        self._media_write_timeout = media_write_timeout
        self._session: aiohttp.ClientSession | None = None
        self._proxy_for = EnvProxies()

    @property
    def read_timeout(self) -> float | None:
        return self._defaults["read"]

    async def initialize(self) -> None:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.pool_size),
                headers={"User-Agent": self.USER_AGENT}, timeout=aiohttp.ClientTimeout(),
                cookie_jar=aiohttp.DummyCookieJar())

    async def shutdown(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    async def do_request(  # noqa: PLR0917 - BaseRequest's signature
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: Any = BaseRequest.DEFAULT_NONE,
        write_timeout: Any = BaseRequest.DEFAULT_NONE,
        connect_timeout: Any = BaseRequest.DEFAULT_NONE,
        pool_timeout: Any = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        session = self._session
        if session is None or session.closed:
            raise RuntimeError("This AiohttpRequest is not initialized!")
        files = request_data.multipart_data if request_data else None
        fields = request_data.json_parameters if request_data else {}
        write_default = self._media_write_timeout if files else self._defaults["write"]
        read = self._given(read_timeout, self._defaults["read"])
        write = self._given(write_timeout, write_default)
        connect = self._given(connect_timeout, self._defaults["connect"])
        pool = self._given(pool_timeout, self._defaults["pool"])
        timeout = aiohttp.ClientTimeout(
            total=_sum(read, write, connect, pool), connect=_sum(pool, connect),
            sock_connect=connect, sock_read=read)
        target = URL(url)
        proxy, proxy_auth = self._proxy_for(target)
        try:
            async with session.request(method, target, data=_body(fields, files),
                                       timeout=timeout, allow_redirects=False, proxy=proxy,
                                       proxy_auth=proxy_auth) as response:
                return response.status, await response.read()
        except aiohttp.ConnectionTimeoutError as exc:  # no connection in time: not sent
            raise Unsent(f"Timed out connecting: {type(exc).__name__}") from exc
        except TimeoutError as exc:  # aiohttp's other timeouts
            raise TimedOut(f"Timed out: {type(exc).__name__}") from exc
        except aiohttp.ClientConnectorError as exc:
            raise Unsent(f"aiohttp.{type(exc).__name__}: {exc}") from exc
        except aiohttp.ClientError as exc:
            raise NetworkError(f"aiohttp.{type(exc).__name__}: {exc}") from exc

    @staticmethod
    def _given(value: Any, default: float | None) -> float | None:
        if isinstance(value, _NOT_GIVEN):
            return default
        return None if value is None else float(value)


def _sum(*timeouts: float | None) -> float | None:
    """The sum of the timeouts, or None (no limit) when one of them is None."""
    given = [t for t in timeouts if t is not None]
    return sum(given) if len(given) == len(timeouts) else None


def _body(fields: dict[str, str], files: dict[str, Any] | None) -> Any:
    """Form fields alone (urlencoded, as httpx sends them), or multipart with the files,
    each PTB's (filename, content, mimetype), its content bytes or a file object."""
    if not files:
        return fields or None
    form = aiohttp.FormData()
    for name, value in fields.items():
        form.add_field(name, value)
    for name, (filename, content, mimetype) in files.items():
        form.add_field(name, content, filename=filename, content_type=mimetype)
    return form
