"""Real MCP servers this project did not write: mcp-server-time (PyPI, in the venv) and the
reference servers "everything" and "filesystem" (npm, installed by dev.py into
tests/mcp/npm with the machine's Node.js)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_core.mcp import McpServerConfig, McpServers
from agent_core.store.embedded import free_port
from agent_core.tools import ToolContext, ToolExecutor, ToolRegistry
from tests.integration.conftest import make_gateway  # noqa: F401 - the gateway fixture

NPM = Path(__file__).parent / "npm" / "node_modules" / "@modelcontextprotocol"
EVERYTHING = NPM / "server-everything" / "dist" / "index.js"
FILESYSTEM = NPM / "server-filesystem" / "dist" / "index.js"
TIME = str(Path(sys.executable).parent / "mcp-server-time")


def node_server(script: Path, *args: str) -> dict[str, Any]:
    """The settings of a stdio server run by node (installed by ``python3 dev.py test``)."""
    if not script.exists():
        pytest.fail(f"{script} is missing: `python3 dev.py test` installs the MCP test "
                    "servers with npm")
    return {"command": "node", "args": [str(script), *args]}


def children(marker: str) -> list[int]:
    """Pids of this process's children whose command line contains ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            command = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if int(stat[1]) == os.getpid() and marker in command:
            found.append(int(entry))
    return found


async def until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Wait for ``condition`` (polled), failing after ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.05)


Servers = Callable[..., Awaitable[tuple[McpServers, ToolExecutor]]]


@pytest.fixture
async def mcp(tmp_path: Path) -> AsyncIterator[Servers]:
    """Start McpServers for ``{name: settings}``; returns (servers, executor)."""
    started: list[McpServers] = []

    async def factory(**servers: dict[str, Any]) -> tuple[McpServers, ToolExecutor]:
        registry = ToolRegistry()
        made = McpServers({k: McpServerConfig(**v) for k, v in servers.items()}, registry,
                          data_dir=tmp_path / "data")
        started.append(made)
        await made.start()
        return made, ToolExecutor(registry, timeout=60)

    yield factory
    for made in started:
        await made.aclose()


def caller(tmp_path: Path, *, role: str = "admin", notes: list[str] | None = None,
           files: list[tuple[str, str, int, str | None]] | None = None) -> ToolContext:
    """A caller with a sandbox of its own; progress notes and attachments are collected."""
    return ToolContext(
        "u1", "conv-1", "trace-1", role=role,
        permissions=frozenset({"*"}) if role == "admin" else frozenset({"read"}),
        workdir=tmp_path / "sandbox", task_id="t1",
        progress=notes.append if notes is not None else None,
        attachments=(lambda *a: files.append(a)) if files is not None else None)


class HttpEverything:
    """server-everything over Streamable HTTP, in a process the test can stop and start."""

    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        command = node_server(EVERYTHING, "streamableHttp")
        self.process = subprocess.Popen([command["command"], *command["args"]],
                                        env={**os.environ, "PORT": str(self.port)},
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    async def ready(self) -> None:
        async def accepts() -> bool:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                return False
            writer.close()
            return True

        async with asyncio.timeout(30):
            while not await accepts():
                assert self.process is not None and self.process.poll() is None
                await asyncio.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None


@pytest.fixture
async def http_everything() -> AsyncIterator[HttpEverything]:
    server = HttpEverything()
    server.start()
    await server.ready()
    yield server
    server.stop()


@pytest.fixture
def no_children() -> Iterator[None]:
    """Every server process a test started has ended when it ends."""
    yield
    assert not children("server-everything") and not children("server-filesystem") \
        and not children("mcp-server-time")
