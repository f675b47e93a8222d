"""The A2A edge's tasks, kept in the store (``<prefix>:a2a:<task id>``) for as long as
tasks are: any gateway process answers GetTask and CancelTask."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from adapters import a2a


@dataclass
class Record:
    """An A2A task as the store keeps it."""

    task: Any
    agent: str
    correlation_id: str
    intent: str
    hmp_task_id: str
    round: int = 0

    def dump(self) -> str:
        """As the store keeps it (the task in ProtoJSON)."""
        return json.dumps({"task": a2a.task_json(self.task), "agent": self.agent,
                           "correlation_id": self.correlation_id, "intent": self.intent,
                           "hmp_task_id": self.hmp_task_id, "round": self.round})

    @classmethod
    def load(cls, raw: bytes | str) -> Record:
        """A kept task read back."""
        data = json.loads(raw)
        return cls(a2a.load_task(data["task"]), data["agent"], data["correlation_id"],
                   data["intent"], data["hmp_task_id"], int(data.get("round", 0)))

    @property
    def state(self) -> int:
        """Its A2A state (a ``TaskState`` value)."""
        return int(self.task.status.state)


class A2ATasks:
    """A2A tasks in the store."""

    def __init__(self, redis: Callable[[], Any], prefix: str, *, retention: float) -> None:
        self._redis = redis
        self.prefix = prefix
        self.retention = retention

    def _key(self, task_id: str) -> str:
        return f"{self.prefix}:a2a:{task_id}"

    async def load(self, task_id: str) -> Record | None:
        """The task, or None."""
        raw = await self._redis().get(self._key(task_id)) if _plain(task_id) else None
        return Record.load(raw) if raw else None

    async def of(self, agent_id: str, task_id: str) -> Record:
        """The task of ``agent_id``, or the A2A error TaskNotFound."""
        record = await self.load(task_id)
        if record is None or record.agent != agent_id:
            raise a2a.RpcError(a2a.TASK_NOT_FOUND, f"no task {task_id!r} of {agent_id!r}")
        return record

    async def save(self, record: Record) -> None:
        """Keep the task as it is now."""
        await self._redis().set(self._key(record.task.id), record.dump(),
                                ex=int(self.retention))


def _plain(task_id: str) -> bool:
    return 0 < len(task_id) <= 64 and all(c.isalnum() or c in "-_" for c in task_id)
