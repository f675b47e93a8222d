"""A tool that holds its task until the test lets it go: the test does something while a
task is surely running (a message steered into it), then creates the flag file."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agent_core import tool


@tool(timeout=60, retries=0)
async def hold(flag: str) -> str:
    """Waits until the file ``flag`` exists."""
    while not Path(flag).exists():
        await asyncio.sleep(0.02)
    return "released"
