"""Subprocess isolation: time and memory limits, a killed child, the parent carries on."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from agent_core import ToolContext, ToolExecutor, ToolRegistry
from tests.integration.heavy_tools import crunch, forever, hog, linger, who

CTX = ToolContext(user_id="slack:U1", conversation_id="c:1", trace_id="t", role="admin",
                  permissions=frozenset({"*"}), workdir=Path("/tmp/box"))


def executor() -> ToolExecutor:
    return ToolExecutor(ToolRegistry([crunch, hog, linger, forever, who]))


async def test_a_tool_runs_in_its_own_process() -> None:
    result = await executor().execute("crunch", {"n": "1000"}, CTX)
    assert result.ok and result.output["sum"] == sum(range(1000))
    assert result.output["pid"] != os.getpid()
    context = await executor().execute("who", {}, CTX)
    assert context.output == "slack:U1@c:1 in /tmp/box"


async def test_the_memory_limit_stops_a_hog_and_the_parent_carries_on() -> None:
    result = await executor().execute("hog", {"megabytes": 512}, CTX)
    assert not result.ok and "memory" in result.observation()
    assert (await executor().execute("crunch", {"n": 10}, CTX)).ok


def _children() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"agent_core.tools._child" in cmdline:
                found.append(int(entry.name))
    return found


async def test_the_time_limit_kills_the_child() -> None:
    result = await executor().execute("forever", {}, CTX)
    assert not result.ok and result.error is not None and result.error.type == "timeout"
    for _ in range(50):
        if not _children():
            break
        await asyncio.sleep(0.05)
    assert _children() == [], "the timed-out child process is gone"


async def test_a_child_killed_from_outside_is_a_tool_error(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    call = asyncio.create_task(executor().execute("linger", {"pid_file": str(pid_file)}, CTX))
    for _ in range(200):
        if pid_file.exists() and pid_file.read_text():
            break
        await asyncio.sleep(0.02)
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    result = await asyncio.wait_for(call, 10)
    assert not result.ok and "SIGKILL" in result.observation()
