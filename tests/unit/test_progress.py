"""ProgressRelay: a task's steps reach its chat, throttled, and none is left behind."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_core import Event, EventType
from gateway.progress import ProgressRelay


class SlowChat:
    """A channel whose progress updates take as long as the test says."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.sending = asyncio.Event()
        self.release = asyncio.Event()

    async def working(self, target: dict[str, Any], task_id: str) -> None:
        return None

    async def progress(self, target: dict[str, Any], task_id: str, line: str) -> None:
        self.sending.set()
        await self.release.wait()
        self.lines.append(line)

    async def done(self, target: dict[str, Any], task_id: str) -> None:
        return None


def tool_event(type_: EventType, **payload: Any) -> Event:
    return Event(type_, "trace", "conv", 1, payload, task_id="t1")


async def test_a_step_that_comes_while_the_last_one_is_being_sent_is_sent_next() -> None:
    relay = ProgressRelay(min_interval=0.0)
    chat = SlowChat()
    await relay.begin("t1", chat, {})  # type: ignore[arg-type]
    relay(tool_event(EventType.TOOL_STARTED, tool="delegate",
                     arguments={"capability": "validate_claim"}))
    async with asyncio.timeout(10):
        await chat.sending.wait()  # the first line is on its way to the platform
    relay(tool_event(EventType.TOOL_PROGRESS, tool="delegate",
                     note="claims-validator is working on validate_claim"))
    chat.release.set()
    async with asyncio.timeout(10):
        while len(chat.lines) < 2:
            await asyncio.sleep(0.01)
    assert chat.lines == ["🤝 asking a validate_claim agent…",
                          "🤝 claims-validator is working on validate_claim…"]
    await relay.end("t1")
