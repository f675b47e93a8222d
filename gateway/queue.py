"""The durable per-conversation work queue in Redis.

Per conversation: a FIFO list of work items and a lock with a lease. Ingest appends to the
list (atomically with its dedupe marker, so a message is never both "seen" and lost) and
wakes a worker, or, for a caller waiting for the answer when this process has a free
worker (its ``taker``) and nobody holds the conversation, takes the lock for that worker in
the same step. A worker that takes a conversation's lock handles its items in order, one at
a time, renewing the lease while it works; it removes an item only when done, and releases
the lock only when the list is empty, in the same atomic step. If a worker dies, its lease
expires and the item still at the head is delivered again, to any replica.

Keys: ``Keys.queue`` (agent_core/store/keys.py) and the dedupe markers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field
from redis.asyncio import Redis

from adapters.base import InboundMessage
from agent_core.ids import new_id
from agent_core.lifecycle import WorkKind
from agent_core.store import Keys, Snapshot, as_text, layout, store_boundary
from agent_core.task import TaskState

from .lease import Leases

#: "taken": queued, and started by this process's ``taker``.
IngestResult = Literal["queued", "taken", "duplicate", "steered"]


class WorkItem(BaseModel):
    """One unit of work for a conversation."""

    kind: WorkKind = "message"
    inbound: InboundMessage
    task_id: str
    #: For "approval": the decision to apply to a paused task.
    approval: dict[str, Any] | None = None
    #: For "scheduled": the job's id, name, identity, owner and pre-approved tools.
    schedule: dict[str, Any] | None = None
    id: str = Field(default_factory=new_id)
    enqueued_at: float = Field(default_factory=time.time)
    #: The span that queued it (W3C traceparent), when traces are exported.
    traceparent: str | None = None


# The head item, counted as started, with what a worker needs to start it: the item's task
# state, the state of a task of the conversation that waits for a reply, and the
# conversation's window and meta hash, which the task's first model call reads (one round
# trip, through the store's layout functions; the task keys are built from a prefix, so
# the queue works on one Redis, not a Cluster). Flags left by an earlier task are cleared.
_READ_HEAD = layout.LUA + """
local function read_head(queue, attempts, control, meta, window, task_prefix)
  local raw = redis.call('LINDEX', queue, 0)
  if not raw then
    return {false, 0, false, false, {}, {}}
  end
  local item = cjson.decode(raw)
  redis.call('DEL', control)
  local started = redis.call('HINCRBY', attempts, item['id'], 1)
  local conversation = hermes_read_conversation(window, meta)
  return {raw, started, hermes_read_task(task_prefix, item['task_id']),
          hermes_waiting_task(meta, task_prefix), conversation[1], conversation[2]}
end
"""

# Queue an item (or, in steer mode, hand it to the running task), unless its dedupe key was
# seen; in interrupt mode, flag the running task. Then, given a lease token (this process has
# a free worker), take the conversation's lock if it is free and read the head with it, as
# a claim does; otherwise wake a worker of any replica.
# KEYS: dedupe, queue, pending, wake, steer, lock, task, conv_tasks, attempts, control, meta,
#       window
# ARGV: item, cid, now, dedupe_ttl, mode, task_state, task_id, token, lease_ms, task prefix
# Returns {status} or {'taken', head...} when the lock was taken.
_INGEST = _READ_HEAD + """
if KEYS[1] ~= '' then
  if redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[4]) == false then
    return {'duplicate'}
  end
end
local busy = redis.call('EXISTS', KEYS[6]) == 1
if ARGV[5] == 'steer' and busy and redis.call('LLEN', KEYS[2]) > 0 then
  redis.call('RPUSH', KEYS[5], ARGV[1])
  return {'steered'}
end
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], 'NX', ARGV[3], ARGV[2])
if ARGV[6] ~= '' then
  hermes_save_task(KEYS[7], KEYS[8], ARGV[7], ARGV[6], 0, true)
end
if busy then
  if ARGV[5] == 'interrupt' then
    redis.call('HSET', KEYS[10], 'interrupt', '*')
    redis.call('EXPIRE', KEYS[10], 3600)
  end
elseif ARGV[8] ~= '' and redis.call('SET', KEYS[6], ARGV[8], 'NX', 'PX', ARGV[9]) then
  return {'taken', unpack(read_head(KEYS[2], KEYS[9], KEYS[10], KEYS[11], KEYS[12],
                                     ARGV[10]))}
end
redis.call('RPUSH', KEYS[4], ARGV[2])
return {'queued'}
"""

# Take the conversation's lock if it is free, and read the head with it.
# KEYS: lock, queue, attempts, control, meta, window   ARGV: token, lease_ms, task prefix.
# Returns nil if someone else holds the lock.
_CLAIM = _READ_HEAD + """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return false
end
return read_head(KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[3])
"""

# Remove the finished head item; move leftover steer messages into the queue; release the
# lock (and leave `pending`) only if nothing is left, else read the next head.
# KEYS: lock, queue, pending, steer, attempts, control, meta, window   ARGV: token, item_id,
# cid, task key prefix, now.  Returns {items left (-1: lease lost), head...}
_COMPLETE = _READ_HEAD + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {-1}
end
local head = redis.call('LINDEX', KEYS[2], 0)
if head and cjson.decode(head)['id'] == ARGV[2] then
  redis.call('LPOP', KEYS[2])
end
redis.call('HDEL', KEYS[5], ARGV[2])
local steered = redis.call('LRANGE', KEYS[4], 0, -1)
if #steered > 0 then
  redis.call('DEL', KEYS[4])
  redis.call('RPUSH', KEYS[2], unpack(steered))
  redis.call('ZADD', KEYS[3], 'NX', ARGV[5], ARGV[3])
end
local left = redis.call('LLEN', KEYS[2])
if left == 0 then
  redis.call('ZREM', KEYS[3], ARGV[3])
  redis.call('DEL', KEYS[1])
  return {0}
end
local following = read_head(KEYS[2], KEYS[5], KEYS[6], KEYS[7], KEYS[8], ARGV[4])
return {left, unpack(following)}
"""

# Give the lock back without completing, if it is still ours: the head item stays queued
# and is woken ahead of newer work; a head read but not started is uncounted. A holder
# whose lease expired changes nothing (another worker may have started the item since).
# KEYS: lock, wake, attempts   ARGV: token, cid, unstarted item id or ''.  Returns 1/0.
_RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if ARGV[3] ~= '' then
  redis.call('HINCRBY', KEYS[3], ARGV[3], -1)
end
redis.call('LPUSH', KEYS[2], ARGV[2])
return 1
"""


@dataclass(frozen=True, slots=True)
class Head:
    """The item at the head of a conversation's queue, ready to start."""

    item: WorkItem
    #: How many times it was started, this time included.
    attempts: int
    #: Its task's state (the "queued" placeholder written at ingest, or where it got to).
    task: TaskState | None
    #: A task of the conversation waiting for the user's reply, if any.
    waiting: TaskState | None
    #: The conversation's window and metadata as they were read with the item (None when
    #: the queue has no reader for them).
    conversation: Snapshot | None = None


@dataclass(frozen=True, slots=True)
class Claim:
    """A conversation taken by a worker: its lease token and its head item (None if its
    queue turned out empty)."""

    token: str
    head: Head | None


class Taker(Protocol):
    """Workers that can start a conversation at once, as its message is queued."""

    async def reserve(self, cid: str) -> bool:
        """Hold a free worker for ``cid``; False if none is free (or it is already served
        here)."""

    def unreserve(self) -> None:
        """Give back a worker held by ``reserve`` (the conversation was not taken)."""

    def adopt(self, cid: str, claim: Claim) -> None:
        """Serve a conversation taken for the worker held by ``reserve``."""


#: Makes a Snapshot of a conversation from its window's items and its meta hash's flat
#: field/value list (``RedisConversationStore.parse_snapshot``).
SnapshotReader = Callable[[list[bytes], list[bytes]], Snapshot]


def _head(reply: Any, read: SnapshotReader | None) -> Head | None:
    raw, attempts, task, waiting, window, meta = reply
    if raw is None:
        return None
    return Head(WorkItem.model_validate_json(raw), int(attempts),
                TaskState.model_validate_json(task) if task else None,
                TaskState.model_validate_json(waiting) if waiting else None,
                read(window, meta) if read is not None else None)


@store_boundary
class WorkQueue:
    """Ingest, claim, renew, complete: the queue's whole protocol. A store it cannot reach
    is a StoreUnavailableError from every method."""

    def __init__(self, redis: Redis, prefix: str, *, lease: float = 30.0,
                 dedupe_ttl: int = 86400, blocking: Redis | None = None,
                 conversations: SnapshotReader | None = None) -> None:
        self.redis = redis
        #: Parses the conversation read with each head item (see ``Head.conversation``).
        self.conversations = conversations
        #: The client for BLMPOP (its own pool; see ``OpenStore.blocking``).
        self.blocking = blocking or redis
        self.store_keys = Keys(prefix)
        self.keys = self.store_keys.queue
        self.lease_ms = int(lease * 1000)
        self.dedupe_ttl = dedupe_ttl
        self._ingest = redis.register_script(_INGEST)
        self._complete = redis.register_script(_COMPLETE)
        self._claim = redis.register_script(_CLAIM)
        self._release = redis.register_script(_RELEASE)
        self.leases = Leases(redis)
        #: This process's workers (``WorkerPool.start``), or None: every item is woken.
        self.taker: Taker | None = None

    async def ingest(self, item: WorkItem, *, dedupe_key: str | None, mode: str = "queue",
                     placeholder: TaskState | None = None, start_here: bool = False
                     ) -> IngestResult:
        """Queue an item unless its dedupe key was seen, with a "queued" task state so the
        task API can answer at once; in steer mode, hand it to the running task instead
        when the conversation is busy; in interrupt mode, flag the running task. One atomic
        step. ``start_here`` (a caller waiting for the answer in this process): the same
        step also starts the conversation on this process's ``taker`` when it has a free
        worker and nobody holds the conversation (no wake, no claim round trip). Others
        are woken: the workers take a burst in batches, after its acknowledgements."""
        cid = item.inbound.conversation_id
        keys = [self.store_keys.dedupe(dedupe_key) if dedupe_key else "", self.keys.queue(cid),
                self.keys.pending(), self.keys.wake(), self.keys.steer(cid), self.keys.lock(cid),
                self.store_keys.task(item.task_id), self.store_keys.conv_tasks(cid),
                self.keys.attempts(), self.keys.control(cid), self.store_keys.meta(cid),
                self.store_keys.window(cid)]
        args: list[Any] = [item.model_dump_json(), cid, repr(time.time()), self.dedupe_ttl, mode,
                           placeholder.model_dump_json() if placeholder else "", item.task_id]
        taker = self.taker
        if not start_here or taker is None or not await taker.reserve(cid):
            reply = await self._ingest(keys=keys, args=[*args, "", 0, ""])
            return as_text(reply[0])  # type: ignore[return-value]
        token = new_id()
        # Shielded: once the script may have taken the lock, the claim reaches the taker
        # even if this request is cancelled.
        return await asyncio.shield(self._ingest_taking(
            taker, cid, token, keys, [*args, token, self.lease_ms, self.store_keys.task("")]))

    async def _ingest_taking(self, taker: Taker, cid: str, token: str, keys: list[str],
                             args: list[Any]) -> IngestResult:
        try:
            reply = await self._ingest(keys=keys, args=args)
            claim = Claim(token, _head(reply[1:], self.conversations)) \
                if len(reply) > 1 else None
        except BaseException:
            taker.unreserve()
            raise
        if claim is None:
            taker.unreserve()
        else:
            taker.adopt(cid, claim)
        return as_text(reply[0])  # type: ignore[return-value]

    async def first_time(self, dedupe_key: str) -> bool:
        """Mark a key as seen: True the first time, False if it already was (for events
        that queue nothing)."""
        return bool(await self.redis.set(self.store_keys.dedupe(dedupe_key), "1", nx=True,
                                         ex=self.dedupe_ttl))

    async def wait_for_work(self, wait: float, batch: int = 100) -> list[str]:
        """Conversations someone woke (waiting up to ``wait`` seconds for the first), in
        wake order, without duplicates."""
        found: Any = await self.blocking.blmpop(wait, 1, self.keys.wake(), direction="LEFT",
                                                count=batch)
        if not found:
            return []
        return list(dict.fromkeys(as_text(c) for c in found[1]))

    async def stale_candidates(self, limit: int = 200) -> list[str]:
        """Conversations with queued work, oldest first (for missed wakes and dead workers)."""
        return [as_text(c) for c in await self.redis.zrange(self.keys.pending(), 0, limit - 1)]

    async def claim(self, cids: list[str]) -> dict[str, Claim]:
        """Take the locks of those conversations that are free, each with its head item
        counted as started (one round trip on a multiplexed client: the scripts go out in
        one write); returns the ones taken."""
        async def take(cid: str) -> Claim | None:
            token = new_id()
            reply = await self._claim(
                keys=[self.keys.lock(cid), self.keys.queue(cid), self.keys.attempts(),
                      self.keys.control(cid), self.store_keys.meta(cid),
                      self.store_keys.window(cid)],
                args=[token, self.lease_ms, self.store_keys.task("")])
            return None if reply is None else Claim(token, _head(reply, self.conversations))

        taken = await asyncio.gather(*(take(cid) for cid in cids))
        return {cid: claim for cid, claim in zip(cids, taken, strict=True) if claim is not None}

    async def renew(self, cid: str, token: str) -> bool:
        """Extend the lease; False if it was lost (expired and taken by someone else)."""
        return await self.leases.renew(self.keys.lock(cid), token, self.lease_ms)

    async def complete(self, cid: str, token: str, item_id: str) -> tuple[int, Head | None]:
        """Remove a finished head item. Returns how many items are left (0: the lock was
        released; -1: the lease was lost) and, when some are, the next head, counted as
        started (one round trip)."""
        keys = [self.keys.lock(cid), self.keys.queue(cid), self.keys.pending(),
                self.keys.steer(cid), self.keys.attempts(), self.keys.control(cid),
                self.store_keys.meta(cid), self.store_keys.window(cid)]
        reply = await self._complete(keys=keys, args=[token, item_id, cid,
                                                      self.store_keys.task(""),
                                                      repr(time.time())])
        left = int(reply[0])
        return left, _head(reply[1:], self.conversations) if left > 0 else None

    async def wake(self, cid: str) -> None:
        """Ask a worker (of any replica) to look at a conversation, after those already
        waiting (wakes are first in, first out)."""
        await self.redis.rpush(self.keys.wake(), cid)

    async def release(self, cid: str, token: str, *, unstarted: str | None = None) -> bool:
        """Give the lock back without completing (shutdown); the item stays queued and is
        woken ahead of newer work. ``unstarted``: a head item read but not started, whose
        start is not counted after all. False (and nothing done) if the lease was lost."""
        released = await self._release(
            keys=[self.keys.lock(cid), self.keys.wake(), self.keys.attempts()],
            args=[token, cid, unstarted or ""])
        return bool(released)

    async def take_steering(self, cid: str) -> list[WorkItem]:
        """Messages steered into the running task since the last call."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.lrange(self.keys.steer(cid), 0, -1)
        pipe.delete(self.keys.steer(cid))
        raw, _ = await pipe.execute()
        return [WorkItem.model_validate_json(r) for r in raw]

    async def length(self, cid: str) -> int:
        """Items waiting for a conversation (the running one included)."""
        return int(await self.redis.llen(self.keys.queue(cid)))

    async def is_busy(self, cid: str) -> bool:
        """Whether a worker holds the conversation now."""
        return bool(await self.redis.exists(self.keys.lock(cid)))

    # --- control flags for a running task (interrupt, stop) --------------------------------
    async def signal(self, cid: str, flag: Literal["interrupt", "stop"],
                     task_id: str = "*") -> None:
        """Ask the conversation's running task (or only task ``task_id``) to interrupt or
        stop."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(self.keys.control(cid), flag, task_id)
        pipe.expire(self.keys.control(cid), 3600)
        await pipe.execute()

    async def flags(self, cid: str, task_id: str) -> set[str]:
        """Flags that apply to the conversation's running task ``task_id``."""
        found = await self.redis.hgetall(self.keys.control(cid))
        return {as_text(k) for k, v in found.items() if as_text(v) in ("*", task_id)}

    async def clear_flags(self, cid: str) -> None:
        """Forget flags (a new task starts)."""
        await self.redis.delete(self.keys.control(cid))

    async def waiting(self) -> int:
        """Conversations with queued work (for /readyz and metrics)."""
        return int(await self.redis.zcard(self.keys.pending()))


