"""ConversationStore: where each conversation's window, archive, plan and task state live.

Two backends: ``RedisConversationStore`` (the real one: Redis 7+, Valkey, or the embedded
Valkey server) and ``MemoryConversationStore`` (one process, nothing persisted; for the CLI's
one-shot runs and the runtime benchmark).
"""

from __future__ import annotations

import abc
import contextlib
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ..messages import Message
from ..task import TaskState
from .search import query_terms


@dataclass(slots=True)
class Snapshot:
    """A conversation as the context window needs it: bounded, whatever the archive size.

    Its messages may be shared with other snapshots of the conversation: read them, and use
    ``dataclasses.replace`` for a changed copy."""

    window: list[Message] = field(default_factory=list)
    plan: str = ""
    summary: str = ""
    archived: int = 0
    #: A task of this conversation waiting for the user's reply (ask_user), if any.
    waiting_task: str = ""
    created_at: float = field(default_factory=time.time)
    last_active: float = field(default_factory=time.time)

    @property
    def tokens(self) -> int:
        """Tokens of the window's messages."""
        return sum(m.tokens for m in self.window)


@dataclass(slots=True)
class ArchiveHit:
    """One archived message found by recall."""

    message_id: str
    role: str
    kind: str
    content: str
    summary: str
    ts: float
    round: int
    score: float

    def excerpt(self, query: str, size: int = 320) -> str:
        """The part of the message around the first query term, about ``size``
        characters (all of it when shorter)."""
        flat = " ".join(self.content.split())
        if len(flat) <= size:
            return flat
        lowered = flat.lower()
        positions = [lowered.find(t) for t in query_terms(query)]
        found = [p for p in positions if p >= 0]
        centre = min(found) if found else 0
        start = max(0, min(centre - size // 3, len(flat) - size))
        piece = flat[start:start + size]
        piece = re.sub(r"^\S*\s", "", piece) if start else piece
        return ("…" if start else "") + piece + ("…" if start + size < len(flat) else "")


@dataclass(slots=True)
class WindowSize:
    """How big the window is after an append."""

    messages: int
    tokens: int


class BoundMemory:
    """A store seen through one conversation: what a tool gets as ``ctx.memory``."""

    def __init__(self, store: ConversationStore, conversation_id: str) -> None:
        self._store = store
        self.conversation_id = conversation_id

    async def recall(self, query: str, limit: int) -> list[ArchiveHit]:
        """Search this conversation's archive, and only this one."""
        return await self._store.recall(self.conversation_id, query, limit)


class ConversationStore(abc.ABC):
    """Per-conversation memory. One conversation never sees another's data."""

    @abc.abstractmethod
    async def snapshot(self, conversation_id: str) -> Snapshot:
        """The window and metadata of a conversation (empty when it is new)."""

    @abc.abstractmethod
    async def append(self, conversation_id: str, messages: list[Message], *,
                     task: TaskState | None = None) -> WindowSize:
        """Append messages to the window (and save ``task`` in the same atomic step)."""

    async def append_and_read(self, conversation_id: str, messages: list[Message], *,
                              task: TaskState | None = None) -> tuple[WindowSize, Snapshot]:
        """``append``, then the conversation as the next model call reads it (one round trip
        where the backend can)."""
        size = await self.append(conversation_id, messages, task=task)
        return size, await self.snapshot(conversation_id)

    @abc.abstractmethod
    async def rewrite_window(self, conversation_id: str, keep: list[Message],
                             archive: list[Message], *, base: list[str] | None = None
                             ) -> bool:
        """Atomically replace the window with ``keep`` and archive ``archive``.

        ``base`` is the ids of the window the caller computed from; messages appended since
        are kept after ``keep``. Returns False (changing nothing) when the window no longer
        starts with ``base``.
        """

    @abc.abstractmethod
    async def set_plan(self, conversation_id: str, plan: str) -> None:
        """Pin a plan ("goal / done / remaining") at the top of the system message."""

    @abc.abstractmethod
    async def set_waiting(self, conversation_id: str, task_id: str | None) -> None:
        """Record (or clear) the task that waits for this conversation's next message."""

    @abc.abstractmethod
    async def save_task(self, state: TaskState) -> None:
        """Persist a task's state."""

    @abc.abstractmethod
    async def load_task(self, task_id: str) -> TaskState | None:
        """A task's state, or None when unknown."""

    @contextlib.contextmanager
    def watch_task(self, task_id: str) -> Iterator[Callable[[], TaskState | None]]:
        """Until the block ends, a call giving the task's state as this process last wrote
        it (None before it has, or from a store that does not keep it): what a caller
        waiting for a task that runs here reads instead of ``load_task``'s round trip."""
        yield lambda: None

    @abc.abstractmethod
    async def recent_tasks(self, conversation_id: str, limit: int) -> list[TaskState]:
        """The conversation's last ``limit`` tasks still kept, oldest first."""

    @abc.abstractmethod
    async def recall(self, conversation_id: str, query: str, limit: int = 5
                     ) -> list[ArchiveHit]:
        """Search this conversation's archive; best matches first."""

    @abc.abstractmethod
    async def reset(self, conversation_id: str) -> None:
        """Start a fresh session: the window moves to the archive, the plan is cleared."""

    @abc.abstractmethod
    async def forget(self, conversation_id: str) -> int:
        """Delete everything stored for a conversation; returns how many keys/items went."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""
