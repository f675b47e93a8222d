"""One MCP server connection, kept up by a supervisor task of its own.

The supervisor connects (within ``connect_timeout``), lists the tools, follows
``notifications/tools/list_changed`` (and ``subscriptions/listen`` on 2026-07-28 sessions),
lists its tools again every ``ping_interval`` (a liveness check, and a change the server
did not announce) and, when the server cannot start, crashes, hangs
or drops the connection, marks the session down and connects again with backoff (1 s
doubling to ``max_backoff``). Calls made while it is down fail at once, saying why and when
the next attempt is. The mcp SDK's client runs its task groups in the supervisor's task,
the only place that enters and leaves it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TextIO

import mcp_types as types
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError

from ..errors import ToolError
from ..redaction import redact
from .config import SANDBOX, McpServerConfig

log = logging.getLogger(__name__)

State = Literal["starting", "up", "down", "closed"]
#: Errors of the protocol that mean the connection itself is gone.
_GONE = (types.CONNECTION_CLOSED,)
_CLIENT = types.Implementation(name="hermes-gateway", version="1")



class ServerUnavailable(ToolError):
    """The server is not connected now (the model is told why, and when it is retried)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class McpSession:
    """A live connection to one server; ``root`` (a sandbox) is its MCP root and fills
    ``{sandbox}`` in its command line, environment, URL and headers."""

    def __init__(self, name: str, config: McpServerConfig, *, root: Path | None = None,
                 errlog: TextIO | None = None,
                 on_tools: Callable[[McpSession], None] | None = None) -> None:
        self.name = name
        self.config = config
        self.root = Path(root).absolute() if root is not None else None
        self.state: State = "starting"
        self.error: str | None = None
        self.tools: list[types.Tool] = []
        self.connects = 0
        self.refreshes = 0
        self.retry_at: float | None = None
        self.last_used = time.monotonic()
        #: Calls under way (a pool never closes a session in a call).
        self.in_flight = 0
        self._errlog = errlog
        self._on_tools = on_tools
        self._client: Client | None = None
        self._first = asyncio.Event()
        self._wake = asyncio.Event()
        self._refresh = False
        self._lost = False
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._http: Any = None  # the HTTP client of a url server's connection

    # --- life ----------------------------------------------------------------------------
    async def start(self) -> bool:
        """Start the supervisor and wait for its first attempt; True when it connected."""
        self._task = asyncio.create_task(self._supervise(), name=f"mcp:{self.name}")
        await self._first.wait()
        return self.state == "up"

    async def aclose(self) -> None:
        """Disconnect (a stdio server's process ends) and stop supervising."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            # A connection still being made ends within its connect timeout; do not wait
            # that long to stop.
            await asyncio.wait([self._task], timeout=5)
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.state = "closed"

    @property
    def closing(self) -> bool:
        """Whether ``aclose`` was called (the supervisor ends)."""
        return self._closing

    def describe(self) -> str:
        """One line on the session's state, for /readyz, the CLI and the model."""
        if self.state == "up":
            return "up"
        if self.state == "down":
            wait = (self.retry_at or 0.0) - time.monotonic()
            when = f"next attempt in {wait:.0f}s" if wait >= 1 else "reconnecting"
            return f"down ({self.error}); {when}"
        return self.state

    # --- calls ---------------------------------------------------------------------------
    async def call(self, tool: str, arguments: dict[str, Any], *,
                   progress: ProgressFnT | None = None) -> types.CallToolResult:
        """Call one of the server's tools; ServerUnavailable while it is down, ToolError
        for an error the server answers."""
        client = self._client
        if client is None or self.state != "up":
            raise ServerUnavailable(f"the MCP server {self.name!r} is unavailable: "
                                    f"{self.describe()}")
        self.last_used = time.monotonic()
        self.in_flight += 1
        try:
            return await client.call_tool(tool, arguments,
                                          read_timeout_seconds=self.config.call_timeout,
                                          progress_callback=progress)
        except MCPError as exc:
            if exc.code in _GONE:
                self._connection_lost(f"the connection closed during a call to {tool}")
                raise ServerUnavailable(f"the MCP server {self.name!r} went away during "
                                        "the call; it is being restarted") from None
            if exc.code == types.REQUEST_TIMEOUT:
                # Not retried: the server had the whole call timeout already.
                raise ToolError(f"{tool} did not answer within "
                                f"{self.config.call_timeout:g}s") from None
            raise ToolError(redact(f"{self.name} refused the call: {exc.message}")) from None
        except (OSError, EOFError, RuntimeError) as exc:
            self._connection_lost(f"{type(exc).__name__} during a call to {tool}")
            raise ServerUnavailable(f"the MCP server {self.name!r} failed during the call "
                                    f"({type(exc).__name__}); it is being restarted") from None
        finally:
            self.in_flight -= 1
            self.last_used = time.monotonic()

    def _connection_lost(self, why: str) -> None:
        if self.state == "up":
            self.state, self.error = "down", why
        self._lost = True
        self._wake.set()

    # --- the supervisor ------------------------------------------------------------------
    async def _supervise(self) -> None:
        delay = 1.0
        me = asyncio.current_task()
        while not self._closing:
            # Each connection runs in a task of its own: the SDK's cancel scopes, torn down
            # after a broken HTTP stream, can cancel the task they run in (seen here), and
            # the supervisor must outlive that.
            attempt = asyncio.create_task(self._connected(), name=f"mcp-connection:{self.name}")
            try:
                await attempt
                delay = 1.0
            except asyncio.CancelledError:
                if me is not None and me.cancelling():
                    attempt.cancel()  # and let it close the connection (bounded)
                    await asyncio.wait([attempt], timeout=5)
                    raise
                self._down(ConnectionError(self.error if self.state == "down" and self.error
                                           else "the connection was torn down"))
            except Exception as exc:  # the server's failure is reported, never raised
                self._down(exc)
            self._first.set()
            if self.closing:
                break
            self.retry_at = time.monotonic() + delay
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wait_wake()
            delay = min(delay * 2, self.config.max_backoff)
        self._client = None

    def _down(self, exc: BaseException) -> None:
        self.state = "down"
        self.error = redact(_reason(exc))
        self._client = None
        log.warning("MCP server %s is down: %s", self.name, self.error)

    async def _wait_wake(self) -> None:
        await self._wake.wait()
        self._wake.clear()

    async def _connected(self) -> None:
        """Connect, serve until the connection is lost or the session closes, disconnect."""
        self._lost, self._refresh = False, False
        try:
            client = Client(self._transport(), mode="auto", cache=None, client_info=_CLIENT,
                            list_roots_callback=self._roots if self.root is not None else None,
                            message_handler=self._on_message)
            async with asyncio.timeout(self.config.connect_timeout):
                await client.__aenter__()
            await self._connection(client)
        finally:
            http, self._http = self._http, None
            if http is not None:
                with contextlib.suppress(BaseException):
                    await http.aclose()

    async def _connection(self, client: Client) -> None:
        listener: asyncio.Task[None] | None = None
        try:
            async with asyncio.timeout(self.config.connect_timeout):
                self.tools = await _list_tools(client)
            self._client, self.state, self.error, self.retry_at = client, "up", None, None
            self.connects += 1
            log.info("MCP server %s is up (%s, %d tools)", self.name, client.protocol_version,
                     len(self.tools))
            self._first.set()
            self._tools_changed()
            listener = _listen(client, self)
            await self._serve(client)
        finally:
            self._client = None
            if listener is not None:
                listener.cancel()
                with contextlib.suppress(BaseException):
                    await listener
            with contextlib.suppress(BaseException):
                async with asyncio.timeout(5):
                    await client.__aexit__(None, None, None)

    async def _serve(self, client: Client) -> None:
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.ping_interval):
                    await self._wait_wake()
            if self.closing:
                return
            if self._lost:
                raise ConnectionError(self.error or "the connection was lost")
            # Listing the tools is the liveness check (ping is gone from 2026-07-28) and
            # catches a change the server did not announce.
            announced, self._refresh = self._refresh, False
            async with asyncio.timeout(self.config.connect_timeout):
                tools = await _list_tools(client)
            if announced:
                self.refreshes += 1
            if tools != self.tools:
                self.tools = tools
                self._tools_changed()

    def _tools_changed(self) -> None:
        if self._on_tools is not None:
            self._on_tools(self)

    def list_changed(self) -> None:
        """The server said its tools changed: list them again."""
        self._refresh = True
        self._wake.set()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.list_changed()
        elif isinstance(message, Exception):
            log.debug("MCP server %s sent something unreadable: %s", self.name, message)

    async def _roots(self, context: ClientRequestContext) -> types.ListRootsResult:
        assert self.root is not None
        return types.ListRootsResult(roots=[types.Root(uri=self.root.as_uri(),
                                                       name="sandbox")])

    def _transport(self) -> Any:
        config, fill = self.config, self._fill
        if config.command is not None:
            params = StdioServerParameters(
                command=fill(config.command), args=[fill(a) for a in config.args],
                env={k: fill(v.get_secret_value()) for k, v in config.env.items()} or None,
                cwd=fill(str(config.cwd)) if config.cwd else None)
            if self._errlog is not None:
                return stdio_client(params, errlog=self._errlog)
            return stdio_client(params)
        assert config.url is not None
        headers = {k: fill(v.get_secret_value()) for k, v in config.headers.items()}
        # The SDK leaves a client it is given open: closed with the connection (_connected).
        self._http = create_mcp_http_client(headers=headers)
        return streamable_http_client(fill(config.url), http_client=self._http)

    def _fill(self, text: str) -> str:
        return text.replace(SANDBOX, str(self.root)) if self.root else text


async def _list_tools(client: Client) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(100):  # a server whose pages never end cannot hang the start
        page = await client.list_tools(cursor=cursor) if cursor else await client.list_tools()
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _listen(client: Client, session: McpSession) -> asyncio.Task[None] | None:
    """On 2026-07-28 sessions list_changed comes only to a ``subscriptions/listen``."""
    tools_caps = client.server_capabilities.tools
    if client.protocol_version < "2026-07-28" or not (tools_caps and tools_caps.list_changed):
        return None

    async def follow() -> None:
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    session.list_changed()
        except Exception as exc:
            log.info("MCP server %s: no change notifications (%s)", session.name,
                     _reason(exc))

    return asyncio.create_task(follow(), name=f"mcp-listen:{session.name}")


def _reason(exc: BaseException) -> str:
    """The innermost meaningful message of ``exc`` (task groups wrap their errors)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "did not answer in time"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
