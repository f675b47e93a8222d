"""Event and EventBus: every step of a task, visible to whoever subscribes.

Handlers may be sync or async. A failing handler is logged and never breaks the loop; an
async handler runs as its own task so a slow subscriber cannot stall the agent.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .redaction import redact

log = logging.getLogger(__name__)


class EventType(StrEnum):
    """Names of events. Add new names; never rename one (subscribers match on them)."""

    AGENT_STARTED = "AGENT_STARTED"
    AGENT_FINISHED = "AGENT_FINISHED"
    PLANNER_DECISION = "PLANNER_DECISION"
    TOOL_STARTED = "TOOL_STARTED"
    TOOL_FINISHED = "TOOL_FINISHED"
    TOOL_ERROR = "TOOL_ERROR"
    CONTEXT_UPDATED = "CONTEXT_UPDATED"
    HUMAN_CONFIRM_REQUIRED = "HUMAN_CONFIRM_REQUIRED"
    # additions
    HUMAN_CONFIRM_RESOLVED = "HUMAN_CONFIRM_RESOLVED"
    CONTEXT_WARNING = "CONTEXT_WARNING"
    PLAN_UPDATED = "PLAN_UPDATED"
    MODEL_DELTA = "MODEL_DELTA"
    MODEL_FALLBACK = "MODEL_FALLBACK"
    MODEL_RETRY = "MODEL_RETRY"
    ASK_USER = "ASK_USER"
    #: A running tool says what it is doing (``note``), e.g. which agent took a delegation.
    TOOL_PROGRESS = "TOOL_PROGRESS"
    #: A tool produced a file for the person (``name``, ``mime_type``, ``bytes``, and
    #: ``path`` in the task's sandbox when it was kept), e.g. an MCP tool's image.
    TOOL_ATTACHMENT = "TOOL_ATTACHMENT"
    #: The files that came with the task's message were received (``files``: name, type,
    #: size, kind, note of each; ``notices``: what the person is told, such as a refusal
    #: naming its limit or what a voice note was heard to say).
    FILES_RECEIVED = "FILES_RECEIVED"


@dataclass(frozen=True, slots=True)
class Event:
    """Something that happened in a task."""

    type: EventType
    trace_id: str
    conversation_id: str
    round: int
    payload: dict[str, Any] = field(default_factory=dict)
    timestamp: float = field(default_factory=time.time)
    task_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "type": str(self.type), "trace_id": self.trace_id, "task_id": self.task_id,
            "conversation_id": self.conversation_id, "round": self.round,
            "timestamp": self.timestamp, "payload": self.payload,
        }


Handler = Callable[[Event], None] | Callable[[Event], Awaitable[None]]


class EventBus:
    """Publish/subscribe for Events, by type or for all."""

    def __init__(self) -> None:
        self._handlers: dict[EventType | None, list[Handler]] = {}
        self._pending: set[asyncio.Task[None]] = set()

    def subscribe(self, handler: Handler, *types: EventType) -> Callable[[], None]:
        """Call ``handler`` for events of ``types`` (all events when none are given).

        Returns a function that unsubscribes it.
        """
        keys: tuple[EventType | None, ...] = types or (None,)
        for key in keys:
            self._handlers.setdefault(key, []).append(handler)

        def unsubscribe() -> None:
            self.unsubscribe(handler, *types)

        return unsubscribe

    def unsubscribe(self, handler: Handler, *types: EventType) -> None:
        """Stop calling ``handler`` (for the given types, or the subscribe-to-all entry)."""
        for key in types or (None,):
            handlers = self._handlers.get(key, [])
            if handler in handlers:
                handlers.remove(handler)

    def emit(self, event: Event) -> None:
        """Deliver ``event`` to its subscribers. Never raises."""
        if event.payload:
            object.__setattr__(event, "payload", _scrub(event.payload))
        for handler in (*self._handlers.get(event.type, ()), *self._handlers.get(None, ())):
            try:
                outcome = handler(event)
                if outcome is not None and inspect.isawaitable(outcome):
                    task = asyncio.ensure_future(self._guard(outcome, handler))
                    self._pending.add(task)
                    task.add_done_callback(self._pending.discard)
            except Exception:
                log.exception("event handler %r failed on %s", handler, event.type)

    async def _guard(self, awaitable: Awaitable[None], handler: Handler) -> None:
        try:
            await awaitable
        except Exception:
            log.exception("async event handler %r failed", handler)

    async def drain(self) -> None:
        """Wait for async handlers still running (for shutdown and tests)."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)


#: Values that hold no text: copied as they are, without a call per value.
_PLAIN = frozenset({int, float, bool, type(None)})


def _scrub(value: Any) -> Any:
    """``value`` with every string in it redacted (dicts and lists copied)."""
    kind = type(value)
    if kind is dict:
        scrubbed = {}
        for key, item in value.items():
            inner = type(item)
            scrubbed[key] = item if inner in _PLAIN else redact(item) if inner is str \
                else _scrub(item)
        return scrubbed
    if kind in _PLAIN:
        return value
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v) for v in value]
    return value
