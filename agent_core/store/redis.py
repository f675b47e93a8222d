"""RedisConversationStore: conversations in any Redis-protocol server (redis-py asyncio).

Per conversation (all keys built by ``Keys``, hash-tagged by conversation id):

- ``window``: LIST of the messages in front of the model (bounded by the context window)
- ``meta``: HASH of plan, summary, created_at, last_active, window_tokens, archived counts
- the archive and its keyword index (``archive.py``), written when the window is rewritten

Every read for a model call is one round trip (LRANGE window + HGETALL meta); appends and
window rewrites are transactions. Connection failures become StoreUnavailableError
(``client.unavailable``). The layout other modules' scripts may rely on is ``layout.py``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError, WatchError

from .. import _json
from ..messages import Message
from ..task import TERMINAL, TaskState
from . import layout
from .archive import Archive
from .base import ArchiveHit, ConversationStore, Snapshot, WindowSize
from .client import as_text, unavailable
from .embeddings import Embedder
from .keys import Keys, check_conversation_id

log = logging.getLogger(__name__)

_PARSED = 10_000  # window messages kept parsed

# One atomic step per append: the messages, the window's size, activity times, the task;
# and, when asked, the window and meta as they are now (what the next model call reads).
# KEYS: window, meta, conversations, task, conv_tasks
# ARGV: now, tokens, cid, task_json ("" for none), task_id, task_ttl (0: none),
#       read back ("1"/"0"), messages...
_APPEND = layout.LUA + """
local length
if #ARGV > 7 then
  length = redis.call('RPUSH', KEYS[1], unpack(ARGV, 8))
else
  length = redis.call('LLEN', KEYS[1])
end
local tokens = redis.call('HINCRBY', KEYS[2], 'window_tokens', ARGV[2])
redis.call('HSET', KEYS[2], 'last_active', ARGV[1])
redis.call('HSETNX', KEYS[2], 'created_at', ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[1], ARGV[3])
if ARGV[4] ~= '' then
  hermes_save_task(KEYS[4], KEYS[5], ARGV[5], ARGV[4], ARGV[6], false)
end
if ARGV[7] == '1' then
  local conversation = hermes_read_conversation(KEYS[1], KEYS[2])
  return {length, tokens, conversation[1], conversation[2]}
end
return {length, tokens}
"""


class RedisConversationStore(ConversationStore):
    """The production store. One client, shared by every task of the process."""

    def __init__(self, client: aioredis.Redis, *, prefix: str = "hermes",
                 max_archive: int = 100_000, task_retention: float = 7 * 86400,
                 embedder: Embedder | None = None) -> None:
        self.redis = client
        self.keys = Keys.of(client, prefix)
        self.embedder = embedder
        self.archive = Archive(client, self.keys, max_archive=max_archive, embedder=embedder)
        self._append = client.register_script(_APPEND)
        self._scripts_loaded = False
        self.task_retention = task_retention
        # A window is read before every model call and changes by a message or two between
        # reads: parsing only the new ones saves ~0.4 ms per call on a full window. The
        # Messages are shared between snapshots, which treat them as read-only.
        self._parse = functools.lru_cache(maxsize=_PARSED)(_parse)
        #: Watched tasks (watch_task): the state this process last wrote for each.
        self._watched: dict[str, str | None] = {}

    def parse_snapshot(self, window: list[bytes], meta: list[bytes]) -> Snapshot:
        """A Snapshot from a window read elsewhere (its LRANGE, the meta hash's HGETALL as
        a flat field/value list), parsed through this store's cache."""
        return self._snapshot(window, zip(meta[::2], meta[1::2], strict=True))

    def _snapshot(self, raw: list[bytes], meta_items: Any) -> Snapshot:
        """A Snapshot from the window's LRANGE and the meta hash's field/value pairs."""
        meta = {as_text(k): as_text(v) for k, v in meta_items}
        now = time.time()
        return Snapshot(
            window=[self._parse(item) for item in raw],
            plan=meta.get("plan", ""), summary=meta.get("summary", ""),
            archived=int(meta.get("archived", 0)),
            waiting_task=meta.get("waiting_task", ""),
            created_at=float(meta.get("created_at", now)),
            last_active=float(meta.get("last_active", now)))

    async def aclose(self) -> None:
        await self.redis.aclose()

    @unavailable
    async def ping(self) -> bool:
        """True when the server answers."""
        return bool(await self.redis.ping())

    @unavailable
    async def writable(self) -> None:
        """Return when the store takes writes (every shard's primary, on a cluster, with
        the replica acknowledgements the client asks for); StoreUnavailableError when it
        refuses them (a demoted primary's READONLY, no replica to acknowledge) or cannot
        be reached."""
        pipe = self.redis.pipeline(transaction=False)
        for key in self.keys.probes():
            pipe.set(key, "1", px=60_000)
        await pipe.execute()

    # --- window ------------------------------------------------------------------------
    @unavailable
    async def snapshot(self, conversation_id: str) -> Snapshot:
        cid = check_conversation_id(conversation_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.lrange(self.keys.window(cid), 0, -1)
        pipe.hgetall(self.keys.meta(cid))
        raw, meta = await pipe.execute()
        return self._snapshot(raw, meta.items())

    @unavailable
    async def append(self, conversation_id: str, messages: list[Message], *,
                     task: TaskState | None = None) -> WindowSize:
        result = await self._run_append(conversation_id, messages, task, read=False)
        return WindowSize(int(result[0]), int(result[1]))

    @unavailable
    async def append_and_read(self, conversation_id: str, messages: list[Message], *,
                              task: TaskState | None = None) -> tuple[WindowSize, Snapshot]:
        """One round trip for the append and the read of the next model call."""
        result = await self._run_append(conversation_id, messages, task, read=True)
        return WindowSize(int(result[0]), int(result[1])), self.parse_snapshot(result[2],
                                                                               result[3])

    async def _run_append(self, conversation_id: str, messages: list[Message],
                          task: TaskState | None, *, read: bool) -> Any:
        cid = check_conversation_id(conversation_id)
        # Without a task, any key of the conversation's slot stands in (the script skips it).
        task_key = self.keys.task(task.task_id) if task is not None \
            else self.keys.conv_tasks(cid)
        ttl = int(self.task_retention) if task is not None and task.status in TERMINAL else 0
        raw = task.model_dump_json() if task is not None else ""
        result = await self._append(
            keys=[self.keys.window(cid), self.keys.meta(cid), self.keys.conversations(cid),
                  task_key, self.keys.conv_tasks(cid)],
            args=[repr(time.time()), sum(m.tokens for m in messages), cid, raw,
                  task.task_id if task is not None else "", ttl, "1" if read else "0",
                  *(_dump(m) for m in messages)])
        if task is not None:
            self._wrote(task.task_id, raw)
        return result

    @unavailable
    async def rewrite_window(self, conversation_id: str, keep: list[Message],
                             archive: list[Message], *, base: list[str] | None = None
                             ) -> bool:
        cid = check_conversation_id(conversation_id)
        window_key = self.keys.window(cid)
        async with self.redis.pipeline(transaction=True) as pipe:
            for _ in range(5):
                if not self._scripts_loaded:
                    # EVALSHA inside MULTI needs the script on the server already.
                    await self.redis.script_load(self.archive.script.script)
                    self._scripts_loaded = True
                try:
                    await pipe.watch(window_key, self.keys.archive_ids(cid))
                    current = [self._parse(x) for x in await pipe.lrange(window_key, 0, -1)]
                    expected = base if base is not None else [m.id for m in current]
                    if [m.id for m in current[: len(expected)]] != expected:
                        await pipe.reset()  # type: ignore[no-untyped-call]
                        return False  # another writer rewrote the window; evict next time
                    new_window = [*keep, *current[len(expected):]]
                    fresh = await self.archive.not_yet_archived(pipe, cid, archive)
                    vectors = await self.archive.vectors(fresh)
                    first_seq = 0
                    if fresh:
                        first_seq = int(await pipe.incrby(self.keys.archive_seq(cid),
                                                          len(fresh))) - len(fresh) + 1
                    pipe.multi()  # type: ignore[no-untyped-call]
                    pipe.delete(window_key)
                    if new_window:
                        pipe.rpush(window_key, *[_dump(m) for m in new_window])
                    pipe.hset(self.keys.meta(cid), "window_tokens",
                              sum(m.tokens for m in new_window))
                    self.archive.queue(pipe, cid, fresh, first_seq)
                    for offset, vector in enumerate(vectors):
                        pipe.hset(self.keys.vectors(cid), str(first_seq + offset), vector)
                    await pipe.execute()
                    break
                except WatchError:
                    continue
                except NoScriptError:
                    self._scripts_loaded = False  # the server restarted and lost it
                    continue
            else:
                return False
        if fresh and first_seq + len(fresh) - 1 > self.archive.max_archive:
            await self.archive.trim(cid, first_seq + len(fresh) - 1)
        return True

    @unavailable
    async def set_plan(self, conversation_id: str, plan: str) -> None:
        cid = check_conversation_id(conversation_id)
        await self.redis.hset(self.keys.meta(cid), "plan", plan)

    @unavailable
    async def set_waiting(self, conversation_id: str, task_id: str | None) -> None:
        cid = check_conversation_id(conversation_id)
        if task_id:
            await self.redis.hset(self.keys.meta(cid), "waiting_task", task_id)
        else:
            await self.redis.hdel(self.keys.meta(cid), "waiting_task")

    # --- tasks -------------------------------------------------------------------------
    def _queue_task(self, pipe: Any, state: TaskState) -> str:
        ttl = int(self.task_retention) if state.status in TERMINAL else None
        raw = state.model_dump_json()
        pipe.set(self.keys.task(state.task_id), raw, ex=ttl)
        pipe.sadd(self.keys.conv_tasks(state.conversation_id), state.task_id)
        return raw

    @unavailable
    async def save_task(self, state: TaskState) -> None:
        check_conversation_id(state.conversation_id)
        pipe = self.redis.pipeline(transaction=True)
        raw = self._queue_task(pipe, state)
        await pipe.execute()
        self._wrote(state.task_id, raw)

    @contextlib.contextmanager
    def watch_task(self, task_id: str) -> Iterator[Callable[[], TaskState | None]]:
        self._watched[task_id] = None
        try:
            yield lambda: (TaskState.model_validate_json(raw)
                           if (raw := self._watched.get(task_id)) else None)
        finally:
            self._watched.pop(task_id, None)

    def _wrote(self, task_id: str, raw: str) -> None:
        if task_id in self._watched:  # written, so what load_task would now read
            self._watched[task_id] = raw

    @unavailable
    async def load_task(self, task_id: str) -> TaskState | None:
        raw = await self.redis.get(self.keys.task(task_id))
        return TaskState.model_validate_json(raw) if raw else None

    @unavailable
    async def recent_tasks(self, conversation_id: str, limit: int) -> list[TaskState]:
        cid = check_conversation_id(conversation_id)
        ids = sorted(as_text(t) for t in await self.redis.smembers(self.keys.conv_tasks(cid)))
        states: list[TaskState] = []
        gone: list[str] = []
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            for task_id, raw in zip(chunk, await self.redis.mget(
                    [self.keys.task(t) for t in chunk]), strict=True):
                if raw:
                    states.append(TaskState.model_validate_json(raw))
                else:
                    gone.append(task_id)
        if gone:  # finished tasks past their retention: their ids need not be kept
            await self.redis.srem(self.keys.conv_tasks(cid), *gone)
        states.sort(key=lambda s: s.created_at)
        return states[-limit:] if limit > 0 else []

    # --- recall ------------------------------------------------------------------------
    @unavailable
    async def recall(self, conversation_id: str, query: str, limit: int = 5
                     ) -> list[ArchiveHit]:
        return await self.archive.recall(check_conversation_id(conversation_id), query, limit)

    # --- lifecycle ---------------------------------------------------------------------
    @unavailable
    async def reset(self, conversation_id: str) -> None:
        cid = check_conversation_id(conversation_id)
        snap = await self.snapshot(cid)
        await self.rewrite_window(cid, [], snap.window, base=[m.id for m in snap.window])
        await self.redis.hdel(self.keys.meta(cid), "plan", "summary", "waiting_task")

    @unavailable
    async def forget(self, conversation_id: str) -> int:
        cid = check_conversation_id(conversation_id)
        task_ids = [as_text(t) for t in await self.redis.smembers(self.keys.conv_tasks(cid))]
        deleted = 0
        batch: list[bytes | str] = []
        async for key in self.redis.scan_iter(match=self.keys.conv_pattern(cid), count=500):
            batch.append(key)
            if len(batch) >= 500:
                deleted += int(await self.redis.unlink(*batch))
                batch = []
        extra = [self.keys.task(t) for t in task_ids] + [self.keys.task_events(t)
                                                          for t in task_ids]
        batch.extend(extra)
        if batch:
            deleted += int(await self.redis.unlink(*batch))
        await self.redis.zrem(self.keys.conversations(cid), cid)
        return deleted

    @unavailable
    async def sweep_idle(self, idle_seconds: float) -> list[str]:
        """Forget every conversation idle for longer than ``idle_seconds``."""
        cutoff = time.time() - idle_seconds
        stale = [as_text(c) for key in self.keys.all_conversations()
                 for c in await self.redis.zrangebyscore(key, "-inf", cutoff)]
        for cid in stale:
            await self.forget(cid)
        if stale:
            log.info("expired %d idle conversations", len(stale))
        return stale


def _dump(m: Message) -> bytes:
    # orjson (~10x the standard library here), which writes NaN as null, as the model's
    # request body already had it; windows written before are read by _json's fallback.
    return _json.dumps(m.to_dict())


def _parse(raw: bytes) -> Message:
    return Message.from_dict(_json.loads(raw))
