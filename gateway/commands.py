"""Chat commands understood on every channel: /help, /status, /reset, /stop, /forget."""

from __future__ import annotations

import re
from collections.abc import Callable

from adapters.base import InboundMessage
from agent_core.store.redis import RedisConversationStore

from .queue import WorkQueue

_COMMAND = re.compile(r"^\s*/([a-z]+)(?:@\w+)?\b", re.IGNORECASE)

HELP = """Here is what I understand:
• just ask: I plan, use my tools step by step and answer here
• /status: what I am doing in this conversation
• /stop: stop the running task
• /reset: start a fresh session (older messages stay searchable)
• /forget: delete everything this conversation stored
• /help: this message"""


class Commands:
    """Parses and runs chat commands; each returns the text to reply with."""

    NAMES = ("help", "status", "reset", "stop", "forget")

    def __init__(self, *, queue: WorkQueue, store: RedisConversationStore,
                 model_status: Callable[[], str]) -> None:
        self.queue = queue
        self.store = store
        self.model_status = model_status

    def parse(self, text: str) -> str | None:
        """The command a message is, or None for an ordinary message."""
        match = _COMMAND.match(text)
        if match and match.group(1).lower() in self.NAMES:
            return match.group(1).lower()
        return None

    async def run(self, command: str, msg: InboundMessage) -> str:
        """Carry out a command for the message's conversation."""
        cid = msg.conversation_id
        match command:
            case "help":
                return HELP
            case "status":
                return await self._status(cid)
            case "stop":
                if not await self.queue.is_busy(cid):
                    return "Nothing is running in this conversation."
                await self.queue.signal(cid, "stop")
                return "Stopping the running task."
            case "reset":
                if await self.queue.is_busy(cid):
                    await self.queue.signal(cid, "stop")
                await self.store.reset(cid)
                return "Started a fresh session. Older messages are archived and searchable."
            case "forget":
                if await self.queue.is_busy(cid):
                    await self.queue.signal(cid, "stop")
                await self.store.forget(cid)
                return "Deleted everything this conversation had stored."
            case _:
                return HELP

    async def _status(self, cid: str) -> str:
        snap = await self.store.snapshot(cid)
        busy = await self.queue.is_busy(cid)
        queued = await self.queue.length(cid)
        lines = [
            f"model: {self.model_status()}",
            "working on a task now" if busy else "idle",
            f"messages waiting: {max(0, queued - (1 if busy else 0))}",
            f"in view: {len(snap.window)} messages ({snap.tokens} tokens); "
            f"archived: {snap.archived}",
        ]
        if snap.waiting_task:
            lines.append("waiting for your answer to my last question")
        if snap.plan:
            lines.append(f"plan: {snap.plan.splitlines()[0]}")
        return "\n".join(lines)
