"""The durable per-conversation work queue in Redis.

Per conversation: a FIFO list of work items and a lock with a lease. Ingest appends to the
list (atomically with its dedupe marker, so a message is never both "seen" and lost) and,
when nobody holds the conversation, wakes a worker, or, for a caller waiting for the answer
when this process has a free worker (its ``taker``), takes the lock for that worker in the
same step; a held conversation's holder takes the item when it completes the one before. A
worker that takes a conversation's lock handles its items in order, one at a time,
renewing the lease while it works; it removes an item only when done, and releases the
lock only when the list is empty, in the same atomic step. If a worker dies, its lease
expires and the item still at the head is delivered again, to any replica (the
dispatchers rescan the conversations with queued work).

Keys: ``Keys.queue`` (agent_core/store/keys.py) and the dedupe markers; on a Redis Cluster
every key a step touches is in its conversation's shard, and the dispatchers wait on and
rescan every shard (``wakes.py``). Each step is one Lua script (``gateway.queue_scripts``).
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
from agent_core.store import Keys, Snapshot, as_text, store_boundary
from agent_core.task import TaskState

from . import queue_scripts as scripts
from .lease import Leases
from .wakes import Wakes

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
    """A conversation taken by a worker: its lease token and its head item (a claim takes
    no conversation whose queue is empty)."""

    token: str
    head: Head


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


@dataclass(frozen=True, slots=True)
class _Written:
    """An item and its task state as this process just sent them to the store (JSON)."""

    item_json: bytes
    item: WorkItem
    state_json: bytes
    state: TaskState | None


def _head(reply: Any, read: SnapshotReader | None, written: _Written | None = None) -> Head:
    """The head item a script read with the lock it took or kept (it takes or keeps none
    for an empty queue)."""
    raw, attempts, task, waiting, window, meta = reply
    if written is not None and raw == written.item_json:
        # The item this process has just queued, read back: its own objects, not a second
        # validation of the same JSON (an older item, a dead worker's, is parsed).
        item = written.item
        state = written.state if written.state is not None and task == written.state_json \
            else _task(task)
    else:
        item, state = WorkItem.model_validate_json(raw), _task(task)
    return Head(item, int(attempts), state, _task(waiting),
                read(window, meta) if read is not None else None)


def _task(raw: bytes | None) -> TaskState | None:
    return TaskState.model_validate_json(raw) if raw else None


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
        self.store_keys = Keys.of(redis, prefix)
        self.keys = self.store_keys.queue
        self._wakes = Wakes(self.blocking, self.keys.wakes())
        self.lease_ms = int(lease * 1000)
        self.dedupe_ttl = dedupe_ttl
        self._ingest = redis.register_script(scripts.INGEST)
        self._complete = redis.register_script(scripts.COMPLETE)
        self._claim = redis.register_script(scripts.CLAIM)
        self._release = redis.register_script(scripts.RELEASE)
        self.leases = Leases(redis)
        #: This process's workers (``WorkerPool.start``), or None: every item is woken.
        self.taker: Taker | None = None
        #: Ingests of this process waiting for their script's reply, and a future set when
        #: there are none left (``quiet``).
        self._ingesting = 0
        self._quiet: asyncio.Future[None] | None = None

    async def ingest(self, item: WorkItem, *, dedupe_key: str | None, mode: str = "queue",
                     placeholder: TaskState | bytes | None = None, start_here: bool = False,
                     message_key: str | None = None) -> IngestResult:
        """Queue an item unless its dedupe key was seen, with a "queued" task state so the
        task API can answer at once; in steer mode, hand it to the running task instead
        when the conversation is busy and the message is from the person who asked for that
        task (anyone else's is queued behind it); in interrupt mode, flag the running task.
        One atomic step. ``placeholder``: that state, or its JSON (``queued_json``).
        ``start_here`` (a caller waiting for the answer in this process): the same step also
        starts the conversation on this process's ``taker`` when it has a free worker and
        nobody holds the conversation (no wake, no claim round trip). Others
        are woken, unless held (the holder takes them next): the workers take a burst in
        batches, after its acknowledgements. ``message_key``: the message's own identity,
        when it is not the dedupe key's (its marker names the task too, for its edits)."""
        self._ingesting += 1
        try:
            cid = item.inbound.conversation_id
            queue = self.keys.queue(cid)  # also where a marker is not (the script sees it)
            keys = [self.store_keys.dedupe(dedupe_key, cid) if dedupe_key else queue,
                    queue, self.keys.pending(cid), self.keys.wake(cid),
                    self.keys.steer(cid), self.keys.lock(cid), self.store_keys.task(item.task_id),
                    self.store_keys.conv_tasks(cid), self.keys.attempts(cid),
                    self.keys.control(cid), self.store_keys.meta(cid),
                    self.store_keys.window(cid),
                    self.store_keys.dedupe(message_key, cid) if message_key else queue]
            state = placeholder if isinstance(placeholder, bytes) or placeholder is None \
                else placeholder.model_dump_json().encode()
            written = _Written(item.model_dump_json().encode(), item, state or b"",
                               placeholder if isinstance(placeholder, TaskState) else None)
            args: list[Any] = [written.item_json, cid, repr(time.time()), self.dedupe_ttl,
                               mode, written.state_json, item.task_id]
            taker = self.taker
            if not start_here or taker is None or not await taker.reserve(cid):
                reply = await self._ingest(keys=keys, args=[*args, "", 0, ""])
                return as_text(reply[0])  # type: ignore[return-value]
            token = new_id()
            # Shielded: once the script may have taken the lock, the claim reaches the taker
            # even if this request is cancelled.
            return await asyncio.shield(self._ingest_taking(
                taker, cid, token, keys,
                [*args, token, self.lease_ms, self.store_keys.task_prefix(cid)],
                written=written))
        finally:
            self._ingesting -= 1
            if not self._ingesting and self._quiet is not None:
                self._quiet.set_result(None)
                self._quiet = None

    async def _ingest_taking(self, taker: Taker, cid: str, token: str, keys: list[str],
                             args: list[Any], *, written: _Written) -> IngestResult:
        try:
            reply = await self._ingest(keys=keys, args=args)
            claim = Claim(token, _head(reply[1:], self.conversations, written)) \
                if len(reply) > 1 else None
        except BaseException:
            taker.unreserve()
            raise
        if claim is None:
            taker.unreserve()
        else:
            taker.adopt(cid, claim)
        return as_text(reply[0])  # type: ignore[return-value]

    async def quiet(self, limit: float) -> None:
        """Return once no ingest of this process waits for the store, or after ``limit``
        seconds: what the workers wait for before they claim, so that the tasks a burst
        of messages wakes start after the burst is acknowledged, not in the middle of it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        while self._ingesting and (left := deadline - loop.time()) > 0:
            if self._quiet is None:
                self._quiet = loop.create_future()
            await asyncio.wait((self._quiet,), timeout=left)

    def new_task_id(self, cid: str) -> str:
        """A new task id for a message of conversation ``cid`` (``Keys.new_task_id``)."""
        return self.store_keys.new_task_id(cid)

    async def first_time(self, dedupe_key: str, cid: str | None = None) -> bool:
        """Mark a key as seen: True the first time, False if it already was (for events
        that queue nothing); ``cid``: the conversation the event belongs to, if any."""
        return bool(await self.redis.set(self.store_keys.dedupe(dedupe_key, cid), "1",
                                         nx=True, ex=self.dedupe_ttl))

    async def wait_for_work(self, wait: float, batch: int = 100) -> list[str]:
        """Conversations someone woke (waiting up to ``wait`` seconds for the first), in
        wake order, without duplicates."""
        return await self._wakes.wait(wait, batch)

    async def stop_waiting(self) -> None:
        """End the reads ``wait_for_work`` left waiting on other shards."""
        await self._wakes.aclose()

    async def stale_candidates(self, limit: int = 200) -> list[str]:
        """Conversations with queued work, oldest first (for missed wakes and dead workers)."""
        pendings = self.keys.pendings()
        if len(pendings) == 1:
            return [as_text(c) for c in await self.redis.zrange(pendings[0], 0, limit - 1)]
        pipe = self.redis.pipeline(transaction=False)
        for key in pendings:
            pipe.zrange(key, 0, limit - 1, withscores=True)
        found = [(float(at), as_text(c)) for rows in await pipe.execute() for c, at in rows]
        return [cid for _, cid in sorted(found)[:limit]]

    async def claim(self, cids: list[str]) -> dict[str, Claim]:
        """Take the locks of those conversations that are free, each with its head item
        counted as started (one round trip on a multiplexed client: the scripts go out in
        one write); returns the ones taken."""
        async def take(cid: str) -> Claim | None:
            token = new_id()
            reply = await self._claim(
                keys=[self.keys.lock(cid), self.keys.queue(cid), self.keys.attempts(cid),
                      self.keys.control(cid), self.store_keys.meta(cid),
                      self.store_keys.window(cid)],
                args=[token, self.lease_ms, self.store_keys.task_prefix(cid)])
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
        keys = [self.keys.lock(cid), self.keys.queue(cid), self.keys.pending(cid),
                self.keys.steer(cid), self.keys.attempts(cid), self.keys.control(cid),
                self.store_keys.meta(cid), self.store_keys.window(cid)]
        reply = await self._complete(keys=keys, args=[token, item_id, cid,
                                                      self.store_keys.task_prefix(cid),
                                                      repr(time.time())])
        left = int(reply[0])
        return left, _head(reply[1:], self.conversations) if left > 0 else None

    async def wake(self, cid: str) -> None:
        """Ask a worker (of any replica) to look at a conversation, after those already
        waiting (wakes are first in, first out)."""
        await self.redis.rpush(self.keys.wake(cid), cid)

    async def release(self, cid: str, token: str, *, unstarted: str | None = None) -> bool:
        """Give the lock back without completing (shutdown); the item stays queued and is
        woken ahead of newer work. ``unstarted``: a head item read but not started, whose
        start is not counted after all. False (and nothing done) if the lease was lost."""
        released = await self._release(
            keys=[self.keys.lock(cid), self.keys.wake(cid), self.keys.attempts(cid)],
            args=[token, cid, unstarted or ""])
        return bool(released)

    async def take_steering(self, cid: str) -> list[WorkItem]:
        """Messages steered into the running task since the last call."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.lrange(self.keys.steer(cid), 0, -1)
        pipe.delete(self.keys.steer(cid))
        raw, _ = await pipe.execute()
        return [WorkItem.model_validate_json(r) for r in raw]

    async def running(self, cid: str) -> WorkItem | None:
        """The item whose task runs in the conversation now (held, at the queue's head)."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.exists(self.keys.lock(cid))
        pipe.lindex(self.keys.queue(cid), 0)
        held, head = await pipe.execute()
        return WorkItem.model_validate_json(head) if held and head else None

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
        return (await backlog(self.redis, self.store_keys))[0]

    async def oldest(self) -> tuple[str, float] | None:
        """The conversation that has had unfinished work the longest, and since when
        (None: no work queued)."""
        return (await backlog(self.redis, self.store_keys))[1]


async def backlog(redis: Redis, keys: Keys) -> tuple[int, tuple[str, float] | None]:
    """How many conversations have queued work, and the one that has had it the longest
    with since when (every shard's ``pending``, one round trip)."""
    pipe = redis.pipeline(transaction=False)
    for key in keys.queue.pendings():
        pipe.zcard(key)
        pipe.zrange(key, 0, 0, withscores=True)
    replies: list[Any] = await pipe.execute()
    firsts = [(float(rows[0][1]), as_text(rows[0][0])) for rows in replies[1::2] if rows]
    oldest = min(firsts) if firsts else None
    return sum(int(n) for n in replies[::2]), (oldest[1], oldest[0]) if oldest else None


