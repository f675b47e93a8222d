"""McpServers: every configured MCP server's tools in the ToolRegistry, kept current.

At start every server is connected at once (each within its connect timeout); a server
that cannot start does not stop anything: its tools appear when it first connects, are
refused with the reason while it is down, and it is retried with backoff. A server's
``list_changed`` updates the registry while running (tools added, changed and removed).

A ``sandbox: true`` server gets one session per task sandbox (its MCP root, and
``{sandbox}`` in its command line): the first call of a task opens it, at most
``max_sessions`` stay open (the least recently used closes first) and an idle one closes
after ``idle_seconds``. Its tools are listed once by a session rooted in an empty
directory under the data dir.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, TextIO

from ..background import Background, repeating
from ..errors import ToolDefinitionError, ToolError
from ..tools import ToolContext, ToolRegistry
from .config import McpServerConfig
from .session import McpSession
from .tools import build_tool

log = logging.getLogger(__name__)


class McpServers:
    """The MCP servers of one process and the tools they add to ``registry``."""

    def __init__(self, servers: dict[str, McpServerConfig], registry: ToolRegistry, *,
                 data_dir: Path) -> None:
        self.configs = servers
        self.registry = registry
        self.data_dir = Path(data_dir)
        self.sessions: dict[str, McpSession] = {}
        self.pools: dict[str, SandboxSessions] = {}
        self._names: dict[str, set[str]] = {name: set() for name in servers}
        self._logs: list[TextIO] = []
        self._sweep: Background | None = None

    async def start(self) -> None:
        """Connect every server (in parallel) and register the tools of those that are up."""
        for name, config in self.configs.items():
            root = None
            if config.sandbox:
                root = self.data_dir / "mcp" / name / "listing"
                root.mkdir(parents=True, exist_ok=True)
                self.pools[name] = SandboxSessions(name, config, self._errlog(name))
            self.sessions[name] = McpSession(name, config, root=root,
                                             errlog=self._errlog(name),
                                             on_tools=self._tools_of)
        await asyncio.gather(*(s.start() for s in self.sessions.values()))
        if self.pools:
            every = min(30.0, min(c.idle_seconds for c in self.configs.values()) / 2)
            self._sweep = repeating(self._close_idle, every, "mcp idle sessions")

    async def aclose(self) -> None:
        """Disconnect every server; stdio servers' processes end."""
        if self._sweep is not None:
            await self._sweep.stop()
        await asyncio.gather(*(p.aclose() for p in self.pools.values()),
                             *(s.aclose() for s in self.sessions.values()))
        for handle in self._logs:
            handle.close()

    def status(self) -> dict[str, dict[str, Any]]:
        """Each server's state and its number of tools, for /readyz and the CLI."""
        return {name: {"state": session.state, "transport": self.configs[name].transport,
                       "tools": len(self._names[name]),
                       **({"error": session.describe()} if session.state != "up" else {})}
                for name, session in self.sessions.items()}

    # --- the registry --------------------------------------------------------------------
    def _tools_of(self, session: McpSession) -> None:
        """Register what ``session`` lists now; remove what it no longer lists."""
        name, config = session.name, self.configs[session.name]
        wanted = {}
        for spec in session.tools:
            if not config.wants(spec.name):
                continue
            built = build_tool(name, config, spec, self._session_for(name))
            if built is not None:
                wanted[built.name] = built
        for old in self._names[name] - set(wanted):
            self.registry.remove(old)
        for tool_name, built in wanted.items():
            if tool_name in self._names[name]:
                self.registry.remove(tool_name)
            try:
                self.registry.add(built)
            except ToolDefinitionError as exc:
                log.warning("MCP server %s: %s", name, exc)
                wanted.pop(tool_name, None)
        self._names[name] = set(wanted) & set(self.registry.names())
        log.info("MCP server %s: %d tools registered", name, len(self._names[name]))

    def _session_for(self, server: str) -> Any:
        async def session_for(ctx: ToolContext) -> McpSession:
            pool = self.pools.get(server)
            if pool is None:
                return self.sessions[server]
            if ctx.workdir is None:
                raise ToolError(f"the {server} tools work on the task's sandbox, and this "
                                "task has none")
            return await pool.session(ctx.workdir)

        return session_for

    async def _close_idle(self) -> None:
        for pool in self.pools.values():
            await pool.close_idle()

    def _errlog(self, name: str) -> TextIO:
        folder = self.data_dir / "mcp"
        folder.mkdir(parents=True, exist_ok=True)
        handle = (folder / f"{name}.stderr.log").open("a", encoding="utf-8")
        self._logs.append(handle)
        return handle


class SandboxSessions:
    """The open sessions of one ``sandbox: true`` server, one per sandbox directory."""

    def __init__(self, name: str, config: McpServerConfig, errlog: TextIO) -> None:
        self.name = name
        self.config = config
        self._errlog = errlog
        self._open: OrderedDict[Path, McpSession] = OrderedDict()
        self._opening: dict[Path, asyncio.Task[McpSession]] = {}

    async def session(self, workdir: Path) -> McpSession:
        """The session rooted at ``workdir``, opened on first use."""
        key = _absolute(workdir)
        session = self._open.get(key)
        if session is not None and session.state == "up":
            self._open.move_to_end(key)
            return session
        task = self._opening.get(key)
        if task is None:
            task = self._opening[key] = asyncio.create_task(self._open_one(key, session))
            task.add_done_callback(lambda _t: self._opening.pop(key, None))
        return await asyncio.shield(task)

    async def _open_one(self, key: Path, old: McpSession | None) -> McpSession:
        if old is not None:
            self._open.pop(key, None)
            await old.aclose()
        await asyncio.to_thread(key.mkdir, parents=True, exist_ok=True)
        session = McpSession(self.name, self.config, root=key, errlog=self._errlog)
        if not await session.start():
            reason = session.describe()
            await session.aclose()
            raise ToolError(f"the MCP server {self.name!r} could not start for this "
                            f"sandbox: {reason}")
        self._open[key] = session
        await self._evict()
        return session

    async def _evict(self) -> None:
        # Least recently used first; a session in a call is never closed under it.
        idle = [k for k, s in self._open.items() if not s.in_flight]
        for key in idle[:max(0, len(self._open) - self.config.max_sessions)]:
            await self._open.pop(key).aclose()

    async def close_idle(self) -> None:
        """Close the sessions unused for ``idle_seconds``."""
        now = time.monotonic()
        for key, session in list(self._open.items()):
            if not session.in_flight and now - session.last_used >= self.config.idle_seconds:
                self._open.pop(key, None)
                await session.aclose()

    async def aclose(self) -> None:
        """Close every session."""
        for task in list(self._opening.values()):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        sessions, self._open = list(self._open.values()), OrderedDict()
        await asyncio.gather(*(s.aclose() for s in sessions))


def _absolute(path: Path) -> Path:
    """``path`` made absolute (the working directory is read, the disk is not)."""
    return Path(path).absolute()
