"""MemoryConversationStore: everything in this process's memory, nothing persisted."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..messages import Message
from ..task import TaskState
from .base import ArchiveHit, ConversationStore, Snapshot, WindowSize
from .search import rank


@dataclass
class _Conversation:
    window: list[Message] = field(default_factory=list)
    archive: dict[str, Message] = field(default_factory=dict)
    plan: str = ""
    waiting_task: str = ""
    created_at: float = field(default_factory=time.time)
    last_active: float = field(default_factory=time.time)


class MemoryConversationStore(ConversationStore):
    """For one-shot CLI runs and benchmarks of the runtime itself."""

    def __init__(self) -> None:
        self._conversations: dict[str, _Conversation] = {}
        self._tasks: dict[str, str] = {}

    def _get(self, cid: str) -> _Conversation:
        return self._conversations.setdefault(cid, _Conversation())

    async def snapshot(self, conversation_id: str) -> Snapshot:
        conv = self._get(conversation_id)
        return Snapshot(window=list(conv.window), plan=conv.plan, archived=len(conv.archive),
                        waiting_task=conv.waiting_task, created_at=conv.created_at,
                        last_active=conv.last_active)

    async def append(self, conversation_id: str, messages: list[Message], *,
                     task: TaskState | None = None) -> WindowSize:
        conv = self._get(conversation_id)
        conv.window.extend(messages)
        conv.last_active = time.time()
        if task is not None:
            await self.save_task(task)
        return WindowSize(len(conv.window), sum(m.tokens for m in conv.window))

    async def rewrite_window(self, conversation_id: str, keep: list[Message],
                             archive: list[Message], *, base: list[str] | None = None
                             ) -> bool:
        conv = self._get(conversation_id)
        expected = base if base is not None else [m.id for m in conv.window]
        if [m.id for m in conv.window[: len(expected)]] != expected:
            return False
        conv.window = [*keep, *conv.window[len(expected):]]
        for m in archive:
            conv.archive.setdefault(m.id, m)
        return True

    async def set_plan(self, conversation_id: str, plan: str) -> None:
        self._get(conversation_id).plan = plan

    async def set_waiting(self, conversation_id: str, task_id: str | None) -> None:
        self._get(conversation_id).waiting_task = task_id or ""

    async def save_task(self, state: TaskState) -> None:
        self._tasks[state.task_id] = state.model_dump_json()

    async def load_task(self, task_id: str) -> TaskState | None:
        raw = self._tasks.get(task_id)
        return TaskState.model_validate_json(raw) if raw else None

    async def recent_tasks(self, conversation_id: str, limit: int) -> list[TaskState]:
        states = [TaskState.model_validate_json(raw) for raw in self._tasks.values()]
        mine = sorted((s for s in states if s.conversation_id == conversation_id),
                      key=lambda s: s.created_at)
        return mine[-limit:] if limit > 0 else []

    async def recall(self, conversation_id: str, query: str, limit: int = 5
                     ) -> list[ArchiveHit]:
        archive = self._get(conversation_id).archive
        hits = rank(query, ((m.id, m.text) for m in archive.values()), limit)
        return [ArchiveHit(mid, archive[mid].role, archive[mid].kind, archive[mid].text,
                           archive[mid].text[:160], archive[mid].ts, archive[mid].round,
                           score) for mid, score in hits]

    async def reset(self, conversation_id: str) -> None:
        conv = self._get(conversation_id)
        await self.rewrite_window(conversation_id, [], conv.window)
        conv.plan = ""
        conv.waiting_task = ""

    async def forget(self, conversation_id: str) -> int:
        gone = self._conversations.pop(conversation_id, None)
        tasks = [t for t, raw in self._tasks.items()
                 if TaskState.model_validate_json(raw).conversation_id == conversation_id]
        for t in tasks:
            del self._tasks[t]
        return (1 if gone else 0) + len(tasks)
