"""Following an A2A task after its first stream is gone: ``SubscribeToTask`` (the task, then
its events until it ends or needs input) and ``ListTasks`` (the caller's own tasks).

A task running in this process is followed through its events as they happen (progress
included); one running in another process, or whose process stopped, through the store
(its status and artifacts as they change there; a task no process follows is read from
where its outcome is kept, as GetTask reads it). A task that has ended cannot be followed
(UnsupportedOperation: GetTask reads it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from adapters import a2a

if TYPE_CHECKING:
    from .a2a import A2AEdge

#: Seconds between looks at a task that runs elsewhere.
POLL = 0.25


def _over(event: Any) -> bool:
    return event.HasField("status_update") and (
        event.status_update.status.state in a2a.TERMINAL | a2a.INTERRUPTED)


async def subscribe(edge: A2AEdge, agent_id: str, params: dict[str, Any], principal: str
                    ) -> AsyncIterator[dict[str, Any]]:
    """The task, then each of its events until it ends or waits for input."""
    request = a2a.parse(params, a2a.pb.SubscribeToTaskRequest())
    live = edge.live(request.id)
    queue: asyncio.Queue[Any] = asyncio.Queue()
    if live is not None:
        live.followers.append(queue)  # before the task is read: no event falls between
    try:
        record = await edge.tasks.of(agent_id, request.id, principal)
        if record.state in a2a.TERMINAL:
            raise a2a.RpcError(a2a.UNSUPPORTED, f"task {request.id} has ended "
                               f"({a2a.pb.TaskState.Name(record.state)}): read it with GetTask")
        yield {"task": a2a.task_json(record.task)}
        if live is None:
            async for event in _from_store(edge, agent_id, record):
                yield event
            return
        while True:
            waiting = asyncio.ensure_future(queue.get())
            finished = asyncio.ensure_future(live.done.wait())
            try:
                done, _ = await asyncio.wait([waiting, finished],
                                             return_when=asyncio.FIRST_COMPLETED)
            finally:
                finished.cancel()
                if not waiting.done():
                    waiting.cancel()
            events = [waiting.result()] if waiting in done else []
            while not queue.empty():
                events.append(queue.get_nowait())
            for event in events:
                yield a2a.event_json(event)
                if _over(event):
                    return
            if finished in done:
                return
    finally:
        if live is not None:
            with contextlib.suppress(ValueError):
                live.followers.remove(queue)


async def _from_store(edge: A2AEdge, agent_id: str, record: Any
                      ) -> AsyncIterator[dict[str, Any]]:
    """The events of a task another process runs, as its kept state changes."""
    task = record.task
    seen = (task.status.state, task.status.timestamp.ToNanoseconds(), len(task.artifacts))
    while True:
        await asyncio.sleep(POLL)
        current = await edge.tasks.load(task.id)
        if current is None:
            return
        if current.state == a2a.pb.TASK_STATE_WORKING and edge.live(task.id) is None:
            await edge.catch_up(current)
        status = current.task.status
        for artifact in list(current.task.artifacts)[seen[2]:]:
            yield a2a.event_json(a2a.pb.StreamResponse(artifact_update=a2a.pb.
                                 TaskArtifactUpdateEvent(task_id=task.id,
                                                         context_id=task.context_id,
                                                         artifact=artifact, last_chunk=True)))
        now = (status.state, status.timestamp.ToNanoseconds(), len(current.task.artifacts))
        if now[:2] != seen[:2]:
            event = a2a.pb.StreamResponse(status_update=a2a.pb.TaskStatusUpdateEvent(
                task_id=task.id, context_id=task.context_id, status=status))
            yield a2a.event_json(event)
            if _over(event):
                return
        seen = now


async def list_tasks(edge: A2AEdge, agent_id: str, params: dict[str, Any], principal: str
                     ) -> dict[str, Any]:
    """A page of the caller's own tasks of ``agent_id`` (another principal's never)."""
    return await edge.tasks.page(agent_id, principal, params)
