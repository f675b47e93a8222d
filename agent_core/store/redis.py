"""RedisConversationStore: conversations in any Redis-protocol server (redis-py asyncio).

Per conversation (all keys built by ``Keys``, hash-tagged by conversation id):

- ``window``: LIST of the messages in front of the model (bounded by the context window)
- ``meta``: HASH of plan, summary, created_at, last_active, window_tokens, archived counts
- ``archive``: HASH seq -> archived message with its summary; ``archive_ids`` makes
  archiving idempotent
- ``t:<term>``: APPEND-only packed postings (seq, tf, doc length) of the keyword index, so
  recall reads one key per query term and never scans the archive

Every read for a model call is one round trip (LRANGE window + HGETALL meta); appends and
window rewrites are transactions. Connection failures become StoreUnavailableError.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import json
import logging
import struct
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.backoff import ExponentialBackoff
from redis.exceptions import BusyLoadingError, NoScriptError, WatchError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry
from redis.utils import HIREDIS_AVAILABLE

from ..errors import StoreUnavailableError
from ..messages import Message
from ..task import TERMINAL, TaskState
from .base import ArchiveHit, ConversationStore, Snapshot, WindowSize
from .embeddings import Embedder, cosine, fuse, pack
from .keys import Keys, check_conversation_id
from .multiplex import MultiplexedRedis, pack_command
from .search import bm25, idf, query_terms, terms

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

_POSTING = struct.Struct("<IHH")
_MAX_QUERY_TERMS = 16
_SUMMARY_CHARS = 200
_CANDIDATES = 10  # keyword candidates per requested hit, for re-ranking by vector
_RECENT = 500  # most recent archived messages also compared by vector
_PARSED = 10_000  # window messages kept parsed

# One atomic step per append: the messages, the window's size, activity times, the task;
# and, when asked, the window and meta as they are now (what the next model call reads).
# KEYS: window, meta, conversations, task, conv_tasks
# ARGV: now, tokens, cid, task_json ("" for none), task_id, task_ttl (0: none),
#       read back ("1"/"0"), messages...
_APPEND = """
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
  if tonumber(ARGV[6]) > 0 then
    redis.call('SET', KEYS[4], ARGV[4], 'EX', ARGV[6])
  else
    redis.call('SET', KEYS[4], ARGV[4])
  end
  redis.call('SADD', KEYS[5], ARGV[5])
end
if ARGV[7] == '1' then
  return {length, tokens, redis.call('LRANGE', KEYS[1], 0, -1), redis.call('HGETALL', KEYS[2])}
end
return {length, tokens}
"""

# KEYS: archive, archive_ids, meta, postings...
# ARGV: n, (seq, id, doc) * n, total_terms, posting bytes for each postings key
_ARCHIVE = """
local n = tonumber(ARGV[1])
for i = 0, n - 1 do
  local seq, id, doc = ARGV[2 + 3 * i], ARGV[3 + 3 * i], ARGV[4 + 3 * i]
  redis.call('HSET', KEYS[1], seq, doc)
  redis.call('HSET', KEYS[2], id, seq)
end
local base = 3 * n + 2
for k = 4, #KEYS do
  redis.call('APPEND', KEYS[k], ARGV[base + k - 3])
end
redis.call('HINCRBY', KEYS[3], 'archived', n)
redis.call('HINCRBY', KEYS[3], 'archived_terms', ARGV[base])
return n
"""


#: redis-py's errors for a server that cannot be reached, or cannot answer yet.
_UNREACHABLE: tuple[type[Exception], ...] = (
    RedisConnectionError, RedisTimeoutError, BusyLoadingError)

#: What a store call raises when the server cannot be reached, or cannot answer yet: worth
#: retrying later (an HTTP caller gets a 503).
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (StoreUnavailableError, *_UNREACHABLE)
#: What ``_unavailable`` turns into StoreUnavailableError (a socket error too).
_UNREACHABLE_OR_OS: tuple[type[Exception], ...] = (*_UNREACHABLE, OSError)


def _unavailable(fn: Callable[P, Coroutine[Any, Any, R]]
                 ) -> Callable[P, Coroutine[Any, Any, R]]:
    """Map connection-level failures to StoreUnavailableError."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except _UNREACHABLE_OR_OS as exc:
            raise StoreUnavailableError(
                f"the conversation store is unreachable: {type(exc).__name__}: {exc}") from exc

    return wrapper


def _lean_handshake() -> dict[str, Any]:
    """Options that keep a new connection to one round trip after connecting: no CLIENT
    SETINFO (library name and version, for CLIENT LIST) and no CLIENT MAINT_NOTIFICATIONS
    (Redis Enterprise maintenance pushes, which Valkey refuses anyway). With them, opening
    200 connections at once took ~1.6x the CPU here (first line of ``bench/memory.py``)."""
    options: dict[str, Any] = {}
    try:
        from redis.driver_info import DriverInfo
    except ImportError:  # redis-py before 7.2 names them directly
        options.update(lib_name=None, lib_version=None)
    else:
        options["driver_info"] = DriverInfo(name=None, lib_version=None)
    try:
        from redis.maint_notifications import MaintNotificationsConfig
    except ImportError:  # redis-py before 7 has no such handshake step
        return options
    options["maint_notifications_config"] = MaintNotificationsConfig(enabled=False)
    return options


def connect(url: str, *, max_connections: int = 512, multiplex: bool = True,
            **options: Any) -> aioredis.Redis:
    """A client with short timeouts, a small retry budget for transient blips, and a pool
    that makes a burst wait for a free connection instead of failing. ``multiplex``: plain
    commands share one pipelined connection (see ``MultiplexedRedis``); the pool serves
    the rest."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=20, decode_responses=False,
        socket_timeout=5.0, socket_connect_timeout=2.0,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 2),
        retry_on_error=[RedisConnectionError, RedisTimeoutError], health_check_interval=30,
        **{**_lean_handshake(), **options})
    pool.connection_class = hiredis_packing(pool.connection_class)
    return (MultiplexedRedis if multiplex else aioredis.Redis).from_pool(pool)


def hiredis_packing(cls: type[AbstractConnection]) -> type[AbstractConnection]:
    """``cls`` packing commands with hiredis (``multiplex.pack_command``) when it is installed, as
    redis-py's synchronous client does by default (its asyncio one packs in Python: ~14 µs
    against ~2 µs for the ingest script's 18 arguments here). Same bytes, same DataError."""
    if not HIREDIS_AVAILABLE:
        return cls
    if cls not in _HIREDIS_PACKING:
        def packed(self: AbstractConnection, *args: Any) -> list[bytes]:
            return [pack_command(*args)]

        _HIREDIS_PACKING[cls] = type(cls.__name__, (cls,), {
            "pack_command": packed, "__module__": __name__, "__doc__": cls.__doc__})
    return _HIREDIS_PACKING[cls]


_HIREDIS_PACKING: dict[type[AbstractConnection], type[AbstractConnection]] = {}


async def warm(client: aioredis.Redis, connections: int) -> None:
    """Open ``connections`` pooled connections now, so that the first burst of traffic
    after a start does not also pay for connecting."""
    pool = client.connection_pool
    opened = await asyncio.gather(*(pool.get_connection()  # type: ignore[no-untyped-call]
                                   for _ in range(connections)))
    for connection in opened:
        await pool.release(connection)


def brief(text: str, limit: int = _SUMMARY_CHARS) -> str:
    """A one-line summary: the first sentence, or the start of the text."""
    flat = " ".join(text.split())
    for end in (". ", "。", "! ", "? ", "\n"):
        cut = flat.find(end)
        if 20 <= cut < limit:
            return flat[: cut + len(end)].strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class RedisConversationStore(ConversationStore):
    """The production store. One client, shared by every task of the process."""

    def __init__(self, client: aioredis.Redis, *, prefix: str = "hermes",
                 max_archive: int = 100_000, task_retention: float = 7 * 86400,
                 embedder: Embedder | None = None) -> None:
        self.redis = client
        self.keys = Keys(prefix)
        self.embedder = embedder
        self._archive = client.register_script(_ARCHIVE)
        self._append = client.register_script(_APPEND)
        self._scripts_loaded = False
        self.max_archive = max_archive
        self.task_retention = task_retention
        # A window is read before every model call and changes by a message or two between
        # reads: parsing only the new ones saves ~0.4 ms per call on a full window. The
        # Messages are shared between snapshots, which treat them as read-only.
        self._parse = functools.lru_cache(maxsize=_PARSED)(_parse)

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

    @_unavailable
    async def ping(self) -> bool:
        """True when the server answers."""
        return bool(await self.redis.ping())

    # --- window ------------------------------------------------------------------------
    @_unavailable
    async def snapshot(self, conversation_id: str) -> Snapshot:
        cid = check_conversation_id(conversation_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.lrange(self.keys.window(cid), 0, -1)
        pipe.hgetall(self.keys.meta(cid))
        raw, meta = await pipe.execute()
        return self._snapshot(raw, meta.items())

    @_unavailable
    async def append(self, conversation_id: str, messages: list[Message], *,
                     task: TaskState | None = None) -> WindowSize:
        result = await self._run_append(conversation_id, messages, task, read=False)
        return WindowSize(int(result[0]), int(result[1]))

    @_unavailable
    async def append_and_read(self, conversation_id: str, messages: list[Message], *,
                              task: TaskState | None = None) -> tuple[WindowSize, Snapshot]:
        """One round trip for the append and the read of the next model call."""
        result = await self._run_append(conversation_id, messages, task, read=True)
        return WindowSize(int(result[0]), int(result[1])), self.parse_snapshot(result[2],
                                                                               result[3])

    async def _run_append(self, conversation_id: str, messages: list[Message],
                          task: TaskState | None, *, read: bool) -> Any:
        cid = check_conversation_id(conversation_id)
        task_key = self.keys.task(task.task_id) if task is not None else self.keys.task("-")
        ttl = int(self.task_retention) if task is not None and task.status in TERMINAL else 0
        return await self._append(
            keys=[self.keys.window(cid), self.keys.meta(cid), self.keys.conversations(),
                  task_key, self.keys.conv_tasks(cid)],
            args=[repr(time.time()), sum(m.tokens for m in messages), cid,
                  task.model_dump_json() if task is not None else "",
                  task.task_id if task is not None else "", ttl, "1" if read else "0",
                  *(_dump(m) for m in messages)])

    @_unavailable
    async def rewrite_window(self, conversation_id: str, keep: list[Message],
                             archive: list[Message], *, base: list[str] | None = None
                             ) -> bool:
        cid = check_conversation_id(conversation_id)
        window_key = self.keys.window(cid)
        async with self.redis.pipeline(transaction=True) as pipe:
            for _ in range(5):
                if not self._scripts_loaded:
                    # EVALSHA inside MULTI needs the script on the server already.
                    await self.redis.script_load(_ARCHIVE)
                    self._scripts_loaded = True
                try:
                    await pipe.watch(window_key, self.keys.archive_ids(cid))
                    current = [self._parse(x) for x in await pipe.lrange(window_key, 0, -1)]
                    expected = base if base is not None else [m.id for m in current]
                    if [m.id for m in current[: len(expected)]] != expected:
                        await pipe.reset()  # type: ignore[no-untyped-call]
                        return False  # another writer rewrote the window; evict next time
                    new_window = [*keep, *current[len(expected):]]
                    fresh = await self._not_yet_archived(pipe, cid, archive)
                    vectors = await self._vectors(fresh)
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
                    self._queue_archive(pipe, cid, fresh, first_seq)
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
        if fresh and first_seq + len(fresh) - 1 > self.max_archive:
            await self._trim_archive(cid, first_seq + len(fresh) - 1)
        return True

    async def _not_yet_archived(self, pipe: Any, cid: str, messages: list[Message]
                                ) -> list[Message]:
        if not messages:
            return []
        seen = await pipe.hmget(self.keys.archive_ids(cid), [m.id for m in messages])
        unique: dict[str, Message] = {}
        for m, known in zip(messages, seen, strict=True):
            if known is None:
                unique.setdefault(m.id, m)
        return list(unique.values())

    async def _vectors(self, messages: list[Message]) -> list[bytes]:
        """Packed embeddings of messages about to be archived (none without an embedder)."""
        if self.embedder is None or not messages:
            return []
        try:
            found = await self.embedder.embed([f"{m.name or ''} {m.content}".strip()
                                               for m in messages])
        except Exception as exc:  # keyword recall still works without the vectors
            log.warning("could not embed %d archived messages: %s", len(messages), exc)
            return []
        return [pack(v) for v in found]

    def _queue_archive(self, pipe: Any, cid: str, messages: list[Message], first_seq: int
                       ) -> None:
        """Queue the archiving of ``messages`` as one script call: documents, id map and
        every posting (a command per term would cost far more on the client)."""
        if not messages:
            return
        docs: list[str | int] = []
        postings: dict[str, bytearray] = {}
        total_terms = 0
        for offset, m in enumerate(messages):
            seq = first_seq + offset
            doc = {**m.to_dict(), "summary": brief(m.content), "seq": seq}
            docs += [seq, m.id, json.dumps(doc, ensure_ascii=False)]
            words = terms(f"{m.name or ''} {m.content}")
            total_terms += len(words)
            length = min(len(words), 65_535)
            for term, tf in Counter(words).items():
                postings.setdefault(term, bytearray()).extend(
                    _POSTING.pack(seq, min(tf, 65_535), length))
        keys = [self.keys.archive(cid), self.keys.archive_ids(cid), self.keys.meta(cid),
                *(self.keys.postings(cid, t) for t in postings)]
        args = [len(messages), *docs, total_terms, *(bytes(p) for p in postings.values())]
        pipe.evalsha(self._archive.sha, len(keys), *keys, *args)

    async def _trim_archive(self, cid: str, last_seq: int) -> None:
        """Keep the newest ``max_archive`` archived messages; older postings are skipped."""
        low = last_seq - self.max_archive
        meta = self.keys.meta(cid)
        floor = int(await self.redis.hget(meta, "archive_floor") or 0)
        if low <= floor:
            return
        doomed = [str(s) for s in range(floor + 1, low + 1)]
        docs = await self.redis.hmget(self.keys.archive(cid), doomed)
        ids = [json.loads(d)["id"] for d in docs if d]
        pipe = self.redis.pipeline(transaction=True)
        pipe.hdel(self.keys.archive(cid), *doomed)
        pipe.hdel(self.keys.vectors(cid), *doomed)
        if ids:
            pipe.hdel(self.keys.archive_ids(cid), *ids)
        pipe.hset(meta, "archive_floor", low)
        pipe.hincrby(meta, "archived", -len(ids))
        await pipe.execute()

    @_unavailable
    async def set_plan(self, conversation_id: str, plan: str) -> None:
        cid = check_conversation_id(conversation_id)
        await self.redis.hset(self.keys.meta(cid), "plan", plan)

    @_unavailable
    async def set_waiting(self, conversation_id: str, task_id: str | None) -> None:
        cid = check_conversation_id(conversation_id)
        if task_id:
            await self.redis.hset(self.keys.meta(cid), "waiting_task", task_id)
        else:
            await self.redis.hdel(self.keys.meta(cid), "waiting_task")

    # --- tasks -------------------------------------------------------------------------
    def _queue_task(self, pipe: Any, state: TaskState) -> None:
        ttl = int(self.task_retention) if state.status in TERMINAL else None
        pipe.set(self.keys.task(state.task_id), state.model_dump_json(), ex=ttl)
        pipe.sadd(self.keys.conv_tasks(state.conversation_id), state.task_id)

    @_unavailable
    async def save_task(self, state: TaskState) -> None:
        check_conversation_id(state.conversation_id)
        pipe = self.redis.pipeline(transaction=True)
        self._queue_task(pipe, state)
        await pipe.execute()

    @_unavailable
    async def load_task(self, task_id: str) -> TaskState | None:
        raw = await self.redis.get(self.keys.task(task_id))
        return TaskState.model_validate_json(raw) if raw else None

    # --- recall ------------------------------------------------------------------------
    @_unavailable
    async def recall(self, conversation_id: str, query: str, limit: int = 5
                     ) -> list[ArchiveHit]:
        cid = check_conversation_id(conversation_id)
        wanted = query_terms(query)[:_MAX_QUERY_TERMS]
        if limit <= 0 or not (wanted or self.embedder):
            return []
        pipe = self.redis.pipeline(transaction=False)
        pipe.hmget(self.keys.meta(cid), ["archived", "archived_terms", "archive_floor"])
        pipe.get(self.keys.archive_seq(cid))
        for term in wanted:
            pipe.get(self.keys.postings(cid, term))
        (count, total_terms, floor), last_seq, *postings = await pipe.execute()
        docs = int(count or 0)
        if docs == 0:
            return []
        avg = int(total_terms or 0) / max(1, docs)
        floor_seq = int(floor or 0)
        scores: dict[int, float] = {}
        lists = [(len(p) // _POSTING.size, p) for p in postings if p]
        # Terms found in most documents say little and cost the most to score: skip them
        # when rarer terms are there to rank by.
        rare = [(df, p) for df, p in lists if df * 2 <= docs]
        for df, raw in rare or lists:
            weight = idf(docs, df)
            for seq, tf, length in _POSTING.iter_unpack(raw):
                if seq > floor_seq:
                    scores[seq] = scores.get(seq, 0.0) + bm25(tf, length, avg, weight)
        if self.embedder is not None:
            best = await self._rerank(cid, query, scores, limit=limit,
                                      last_seq=int(last_seq or 0), floor_seq=floor_seq)
        else:
            best = heapq.nlargest(limit, scores.items(), key=lambda kv: kv[1])
        if not best:
            return []
        found = await self.redis.hmget(self.keys.archive(cid), [str(s) for s, _ in best])
        hits = []
        for (_, score), raw_doc in zip(best, found, strict=True):
            if raw_doc is None:
                continue
            doc = json.loads(raw_doc)
            hits.append(ArchiveHit(doc["id"], doc["role"], doc.get("kind", ""),
                                   doc.get("content", ""), doc.get("summary", ""),
                                   float(doc.get("ts", 0)), int(doc.get("round", 0)), score))
        return hits

    async def _rerank(self, cid: str, query: str, scores: dict[int, float], *, limit: int,
                      last_seq: int, floor_seq: int) -> list[tuple[int, float]]:
        """Keyword candidates and the most recent archived messages, ranked by keywords and
        by cosine similarity, fused."""
        assert self.embedder is not None
        keyword = [s for s, _ in heapq.nlargest(limit * _CANDIDATES, scores.items(),
                                                key=lambda kv: kv[1])]
        recent = list(range(last_seq, max(floor_seq, last_seq - _RECENT), -1))
        candidates = list(dict.fromkeys(keyword + recent))
        try:
            [query_vector] = await self.embedder.embed([query])
        except Exception as exc:
            log.warning("recall falls back to keywords: cannot embed the query: %s", exc)
            return [(s, scores[s]) for s in keyword[:limit]]
        packed: list[Any] = await self.redis.hmget(self.keys.vectors(cid),
                                                   [str(s) for s in candidates])
        similar = sorted(((cosine(query_vector, v), s) for s, v in zip(candidates, packed,
                                                                       strict=True) if v),
                         reverse=True)
        by_vector = [s for sim, s in similar if sim > 0]
        fused = fuse(keyword, by_vector)[:limit]
        return [(s, scores.get(s, 0.0)) for s in fused]

    # --- lifecycle ---------------------------------------------------------------------
    @_unavailable
    async def reset(self, conversation_id: str) -> None:
        cid = check_conversation_id(conversation_id)
        snap = await self.snapshot(cid)
        await self.rewrite_window(cid, [], snap.window, base=[m.id for m in snap.window])
        await self.redis.hdel(self.keys.meta(cid), "plan", "summary", "waiting_task")

    @_unavailable
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
        await self.redis.zrem(self.keys.conversations(), cid)
        return deleted

    @_unavailable
    async def sweep_idle(self, idle_seconds: float) -> list[str]:
        """Forget every conversation idle for longer than ``idle_seconds``."""
        cutoff = time.time() - idle_seconds
        stale = [as_text(c) for c in await self.redis.zrangebyscore(
            self.keys.conversations(), "-inf", cutoff)]
        for cid in stale:
            await self.forget(cid)
        if stale:
            log.info("expired %d idle conversations", len(stale))
        return stale



def _dump(m: Message) -> str:
    return json.dumps(m.to_dict(), ensure_ascii=False)


def as_text(value: Any) -> str:
    """A reply value as str (the clients return bytes)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _parse(raw: bytes) -> Message:
    return Message.from_dict(json.loads(raw))
