"""The A2A edge's tasks, kept in the store (``agent_core.store.section_keys.A2AKeys``)
for as long as tasks are: any gateway process answers GetTask, CancelTask, SubscribeToTask and
ListTasks. A task belongs to the principal whose key started it: only that principal reads,
lists, follows or cancels it (another's is "not found", as a task that does not exist)."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from adapters import a2a
from agent_core import PAUSED
from agent_core.store.keys import Keys

#: ListTasks' page size when the request names none, and the most it may ask; the newest
#: tasks of a principal it looks through.
PAGE, MAX_PAGE, MAX_LISTED = 50, 100, 1000


@dataclass
class Record:
    """An A2A task as the store keeps it."""

    task: Any
    agent: str
    correlation_id: str
    intent: str
    hmp_task_id: str
    round: int = 0
    #: The principal of the key that started it (None: kept before tasks had one, and
    #: nobody's).
    principal: str | None = None
    created: float = 0.0

    def dump(self) -> str:
        """As the store keeps it (the task in ProtoJSON)."""
        return json.dumps({"task": a2a.task_json(self.task), "agent": self.agent,
                           "correlation_id": self.correlation_id, "intent": self.intent,
                           "hmp_task_id": self.hmp_task_id, "round": self.round,
                           "principal": self.principal, "created": self.created})

    @classmethod
    def load(cls, raw: bytes | str) -> Record:
        """A kept task read back."""
        data = json.loads(raw)
        return cls(a2a.load_task(data["task"]), data["agent"], data["correlation_id"],
                   data["intent"], data["hmp_task_id"], int(data.get("round", 0)),
                   data.get("principal"), float(data.get("created") or 0.0))

    @property
    def state(self) -> int:
        """Its A2A state (a ``TaskState`` value)."""
        return int(self.task.status.state)


class A2ATasks:
    """A2A tasks in the store."""

    def __init__(self, redis: Callable[[], Any], prefix: str, *, retention: float) -> None:
        self._redis = redis
        self.prefix = prefix
        self.keys = Keys(prefix).a2a
        self.retention = retention

    async def load(self, task_id: str) -> Record | None:
        """The task, or None."""
        raw = await self._redis().get(self.keys.task(task_id)) if _plain(task_id) else None
        return Record.load(raw) if raw else None

    async def of(self, agent_id: str, task_id: str, principal: str) -> Record:
        """The task of ``agent_id`` that ``principal`` started, or the A2A error
        TaskNotFound (for another's too: whether it exists is not the caller's to learn)."""
        record = await self.load(task_id)
        if record is None or record.agent != agent_id or record.principal != principal:
            raise a2a.RpcError(a2a.TASK_NOT_FOUND, f"no task {task_id!r} of {agent_id!r}")
        return record

    async def save(self, record: Record) -> None:
        """Keep the task as it is now (the first time also in its principal's list)."""
        first = record.principal is not None and not record.created
        if first:
            record.created = time.time()
        redis = self._redis()
        await redis.set(self.keys.task(record.task.id), record.dump(), ex=int(self.retention))
        if first and record.principal is not None:
            listed = self.keys.listed(record.agent, record.principal)  # one key: one slot
            pipe = redis.pipeline(transaction=False)
            pipe.zadd(listed, {record.task.id: record.created})
            pipe.zremrangebyscore(listed, "-inf", record.created - self.retention)
            pipe.expire(listed, int(self.retention))
            await pipe.execute()

    async def listed(self, agent_id: str, principal: str) -> list[Record]:
        """Every kept task ``principal`` started on ``agent_id``, newest first."""
        redis = self._redis()
        ids = [i.decode() if isinstance(i, bytes) else str(i) for i in await redis.zrevrange(
            self.keys.listed(agent_id, principal), 0, MAX_LISTED - 1)]
        if not ids:
            return []
        pipe = redis.pipeline(transaction=False)  # GETs: each task's key has its own slot
        for task_id in ids:
            pipe.get(self.keys.task(task_id))
        records = [Record.load(raw) for raw in await pipe.execute() if raw]
        return [r for r in records if r.principal == principal and r.agent == agent_id]

    async def page(self, agent_id: str, principal: str, params: dict[str, Any]
                   ) -> dict[str, Any]:
        """A ListTasks answer: the principal's tasks of ``agent_id`` that ``params``
        select, newest first, one page of them (``pageToken``: where the page starts)."""
        request = a2a.parse(params, a2a.pb.ListTasksRequest())
        size = request.page_size if request.HasField("page_size") else PAGE
        if not 1 <= size <= MAX_PAGE:
            raise a2a.RpcError(a2a.INVALID_PARAMS, f"pageSize must be 1 to {MAX_PAGE}")
        try:
            start = int(request.page_token or 0)
        except ValueError:
            raise a2a.RpcError(a2a.INVALID_PARAMS, "pageToken is not one this server gave"
                               ) from None
        after = request.status_timestamp_after.ToDatetime().timestamp() \
            if request.HasField("status_timestamp_after") else None
        chosen = [r for r in await self.listed(agent_id, principal)
                  if (not request.context_id or r.task.context_id == request.context_id)
                  and (not request.status or r.state == request.status)
                  and (after is None or r.task.status.timestamp.ToDatetime().timestamp()
                       > after)]
        length = request.history_length if request.HasField("history_length") else None
        tasks = []
        for record in chosen[start:start + size]:
            shown = a2a.task_json(record.task, length)
            if not request.include_artifacts:
                shown.pop("artifacts", None)
            tasks.append(shown)
        more = start + size < len(chosen)
        return {"tasks": tasks, "nextPageToken": str(start + size) if more else "",
                "pageSize": size, "totalSize": len(chosen)}


def _plain(task_id: str) -> bool:
    return 0 < len(task_id) <= 64 and all(c.isalnum() or c in "-_" for c in task_id)


def gateway_events(record: Record, state: Any) -> list[Any]:
    """A gateway task's outcome put into its A2A task: the events it makes."""
    if state.status == "answered":
        return list(a2a.finish(record.task, "success",
                               {"answer": state.answer or state.result_text or ""}, None))
    if state.status in PAUSED:
        question = state.result_text or (state.question.text if state.question else "")
        return list(a2a.finish(record.task, "partial", {
            "question": question, "next_steps": [{"intent": "chat", "ask": question}],
            **({"approval": state.approval.model_dump(mode="json")}
               if state.approval else {})}, None))
    if state.status == "cancelled":
        return [a2a.set_state(record.task, a2a.pb.TASK_STATE_CANCELED,
                              state.result_text or "Cancelled.")]
    return list(a2a.finish(record.task, "failed",
                           {"error": state.error or state.result_text or ""},
                           state.status.upper()))


def correlation_of(context_id: str) -> str:
    """A context id as an HMP correlation id (as it is when it fits, else a hash of it)."""
    if 0 < len(context_id) <= 128 and all(c.isalnum() or c in "_.:@-" for c in context_id) \
            and context_id[0].isalnum():
        return context_id
    return "ctx-" + hashlib.sha256(context_id.encode()).hexdigest()[:32]
