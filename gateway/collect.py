"""The ``collect`` busy mode: messages a person sends in a burst become one task.

A message is queued as in ``queue`` mode. When a worker takes a conversation whose head is
a message not started yet, it waits until HERMES_COLLECT_WINDOW_MS have passed since the
last message of the burst (the messages right behind the head, from the same person, each
within the window of the one before; a burst is never held longer than ten windows), then
merges the burst into the head item, in one script that also checks that the worker still
holds the conversation and that the queue is as it read it. The other messages' tasks are
marked as continued in the head's, as a reply to a question is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any

from redis.asyncio import Redis

from agent_core import TaskState
from agent_core.store import ConversationStore, store_boundary

from .queue import Head, WorkItem, WorkQueue

log = logging.getLogger(__name__)

#: A burst is held at most this many windows.
MOST = 10

# Merge the burst behind the head into it, if the caller still holds the conversation and
# the queue starts as it read it. KEYS: queue, lock
# ARGV: token, head, merged head, burst item 1, ..., burst item n. Returns 1, 0 (the queue
# changed: read it again) or -1 (the lease was lost).
COLLECT = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return -1
end
if redis.call('LINDEX', KEYS[1], 0) ~= ARGV[2] then
  return 0
end
for i = 4, #ARGV do
  if redis.call('LINDEX', KEYS[1], i - 3) ~= ARGV[i] then
    return 0
  end
end
for i = 4, #ARGV do
  redis.call('LREM', KEYS[1], 1, ARGV[i])
end
redis.call('LSET', KEYS[1], 0, ARGV[3])
return 1
"""


@store_boundary
class Collector:
    """Merges bursts of messages into the task of their first (HERMES_BUSY_MODE=collect)."""

    def __init__(self, *, redis: Redis, queue: WorkQueue, store: ConversationStore,
                 window_ms: int) -> None:
        self.redis = redis
        self.queue = queue
        self.store = store
        self.window = window_ms / 1000
        self._collect = redis.register_script(COLLECT)

    async def collect(self, cid: str, token: str, head: Head) -> Head:
        """``head`` with the burst behind it merged in, once the burst is over."""
        first = head.item
        if first.kind != "message" or head.task is None or head.task.status != "queued":
            return head
        deadline = time.time() + MOST * self.window
        keys = [self.queue.keys.queue(cid), self.queue.keys.lock(cid)]
        while True:
            raws: list[Any] = await self.redis.lrange(keys[0], 0, 50)
            burst = self._burst(first, raws)
            if burst is None:
                return head  # the head moved (the lease was lost): the caller finds out
            quiet = burst[-1][1].enqueued_at + self.window
            if quiet > time.time() and time.time() < deadline:
                await self.queue.renew(cid, token)
                await asyncio.sleep(min(quiet, deadline) - time.time())
                continue
            if len(burst) == 1:
                return head
            merged = first.model_copy(update={"inbound": first.inbound.model_copy(update={
                "text": "\n".join(item.inbound.text for _, item in burst)})})
            done = await self._collect(keys=keys, args=[
                token, raws[0], merged.model_dump_json(), *(raw for raw, _ in burst[1:])])
            if done == 1:
                await self._continued([item for _, item in burst[1:]], first)
                log.info("collected %d messages into task %s", len(burst), first.task_id)
                return dataclasses.replace(head, item=merged)
            if done == -1:
                return head

    def _burst(self, first: WorkItem, raws: list[Any]) -> list[tuple[Any, WorkItem]] | None:
        """The head and the messages right behind it that belong to its burst."""
        if not raws:
            return None
        head = WorkItem.model_validate_json(raws[0])
        if head.id != first.id:
            return None
        burst = [(raws[0], head)]
        for raw in raws[1:]:
            item = WorkItem.model_validate_json(raw)
            if item.kind != "message" or item.inbound.user_id != first.inbound.user_id or \
                    item.enqueued_at - burst[-1][1].enqueued_at > self.window:
                break
            burst.append((raw, item))
        return burst

    async def _continued(self, items: list[WorkItem], into: WorkItem) -> None:
        """The merged messages' tasks point to the task that answers them."""
        for item in items:
            msg = item.inbound
            await self.store.save_task(TaskState(
                task_id=item.task_id, trace_id=item.task_id,
                conversation_id=msg.conversation_id, user_id=msg.user_id, role="user",
                permissions=[], instruction=msg.text, status="answered",
                answer=f"continued task {into.task_id}",
                extra={"continued": into.task_id}))
