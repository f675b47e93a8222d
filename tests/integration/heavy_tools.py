"""Tools that run in a child process, for the isolation tests."""

from __future__ import annotations

import os
import time
from pathlib import Path

from agent_core import ToolContext, tool


@tool(isolation="subprocess", memory_mb=256)
def crunch(n: int) -> dict[str, int]:
    """Sums 0..n in a child process."""
    return {"sum": sum(range(n)), "pid": os.getpid()}


@tool(isolation="subprocess", memory_mb=128, retries=0)
def hog(megabytes: int) -> int:
    """Allocates memory until the limit stops it."""
    block = bytearray(megabytes * 1024 * 1024)
    return len(block)


@tool(isolation="subprocess", timeout=30, retries=0)
def linger(pid_file: str, ctx: ToolContext | None = None) -> str:
    """Writes its pid, then waits to be killed."""
    Path(pid_file).write_text(str(os.getpid()))
    time.sleep(60)
    return "survived"


@tool(isolation="subprocess", timeout=0.5, retries=0)
def forever() -> str:
    """Never finishes in time."""
    time.sleep(60)
    return "never"


@tool(isolation="subprocess")
def who(ctx: ToolContext | None = None) -> str:
    """Reports the caller as the child sees it."""
    assert ctx is not None
    return f"{ctx.user_id}@{ctx.conversation_id} in {ctx.workdir}"
