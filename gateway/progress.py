"""ProgressRelay: shows a running task's steps in its chat (a "working" message updated as
tools run, typing, a reaction), throttled to what the platforms tolerate, and sends the
files its tools make. Chat platforms whose replies are shown live (``gateway/live.py``)
get only the files from here."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters.base import Channel, FileToShow
from agent_core import Event, EventType, Sandbox, ToolError
from agent_core.tools.sandbox import sandbox_dir

log = logging.getLogger(__name__)


@dataclass
class _Watch:
    channel: Channel
    target: dict[str, Any]
    #: Progress shown here (else only files are: a live reply shows the rest).
    display: bool = True
    last_update: float = 0.0
    pending: str | None = None
    flusher: asyncio.Task[None] | None = field(default=None, repr=False)


class ProgressRelay:
    """Subscribe once to the bus; each running task registered here gets its updates."""

    def __init__(self, *, min_interval: float = 1.5, data_dir: Path | None = None) -> None:
        self.min_interval = min_interval
        #: Where task sandboxes are: files tools made for the person are read from them.
        self.data_dir = data_dir
        self._watches: dict[str, _Watch] = {}
        self._sending: set[asyncio.Task[None]] = set()

    async def begin(self, task_id: str, channel: Channel, target: dict[str, Any], *,
                    display: bool = True) -> None:
        """A task started in a chat; ``display=False``: its steps are shown by its live
        reply (``gateway/live.py``), only the files it makes are sent from here."""
        self._watches[task_id] = _Watch(channel, target, display)
        if display:
            await _quietly(channel.working(target, task_id))

    async def end(self, task_id: str) -> None:
        """The task ended (its answer is being delivered)."""
        watch = self._watches.pop(task_id, None)
        if watch is None:
            return
        # Files go before the answer that may speak of them.
        sending = [t for t in self._sending if t.get_name() == f"attach:{task_id}"]
        if sending:
            await asyncio.wait(sending, timeout=30)
        if watch.flusher is not None:
            watch.flusher.cancel()
        if watch.display:
            await _quietly(watch.channel.done(watch.target, task_id))

    def __call__(self, event: Event) -> None:
        """EventBus handler."""
        watch = self._watches.get(event.task_id)
        if watch is None:
            return
        if event.type == EventType.TOOL_ATTACHMENT:
            self._attach(event, watch)
        if not watch.display:
            return
        line = describe(event)
        if line is None:
            return
        watch.pending = line
        if watch.flusher is None or watch.flusher.done():
            watch.flusher = asyncio.ensure_future(self._flush(event.task_id, watch))

    async def _flush(self, task_id: str, watch: _Watch) -> None:
        # A line that comes while the previous one is being sent is sent next, not left
        # waiting for an event that may never come.
        while watch.pending is not None:
            wait = watch.last_update + self.min_interval - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            line, watch.pending = watch.pending, None
            if line is None or self._watches.get(task_id) is not watch:
                return
            watch.last_update = time.monotonic()
            await _quietly(watch.channel.progress(watch.target, task_id, line))


    def _attach(self, event: Event, watch: _Watch) -> None:
        kept = event.payload.get("path")
        if self.data_dir is None or not isinstance(kept, str):
            return  # not kept (over the sandbox's quota): the progress line says it all
        sandbox = Sandbox(sandbox_dir(self.data_dir, event.conversation_id, event.task_id))

        async def send() -> None:
            try:
                # Inside the task's sandbox and never through a symlink: the path comes
                # from a tool, and a link it planted may point anywhere.
                data = await asyncio.to_thread(sandbox.read, kept)
            except (ToolError, OSError) as exc:
                log.info("attachment %r not sent: %s", Path(kept).name, exc)
                return
            file = FileToShow(str(event.payload.get("name")),
                              str(event.payload.get("mime_type")), data)
            await _quietly(watch.channel.attach(watch.target, event.task_id, file))

        task = asyncio.ensure_future(send())
        task.set_name(f"attach:{event.task_id}")
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def aclose(self) -> None:
        """Wait (bounded) for files still being sent."""
        if self._sending:
            await asyncio.wait(list(self._sending), timeout=10)


def describe(event: Event) -> str | None:
    """One short line for a step worth showing, or None."""
    p = event.payload
    match event.type:
        case EventType.TOOL_STARTED if p.get("tool") == "delegate":
            wanted = (p.get("arguments") or {}).get("capability", "another agent")
            return f"🤝 asking a {wanted} agent…"
        case EventType.TOOL_STARTED:
            return f"⚙️ {p.get('tool')}…"
        case EventType.TOOL_PROGRESS if p.get("tool") == "delegate":
            return f"🤝 {p.get('note')}…"
        case EventType.TOOL_PROGRESS:
            return f"⏳ {p.get('tool')}: {p.get('note')}"
        case EventType.TOOL_ATTACHMENT:
            return f"📎 {p.get('tool')}: {p.get('name')} ({p.get('mime_type')})"
        case EventType.TOOL_FINISHED:
            return f"✅ {p.get('tool')} done"
        case EventType.TOOL_ERROR:
            return f"⚠️ {p.get('tool')}: {p.get('error')}"
        case EventType.MODEL_FALLBACK:
            return f"↪️ switched to {p.get('to')}"
        case _:
            return None


async def _quietly(awaitable: Any) -> None:
    """Progress is decoration: a failure is logged, never raised; a channel without such
    a display (NotImplementedError) is skipped silently."""
    try:
        await awaitable
    except NotImplementedError:
        pass
    except Exception as exc:
        log.info("progress update failed: %s", exc)
