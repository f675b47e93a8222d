"""MultiplexedCluster: a Redis Cluster client whose plain commands share one pipelined
connection per primary, as ``MultiplexedRedis`` does on one node.

redis-py's ``RedisCluster`` finds each command's slot and node, takes a connection from
that node's pool, writes, reads and gives it back; on top of the per-command cost the
multiplexer removes on one node (``multiplex.py``) it resolves a command policy and
records metrics for every call. Here a command whose keys are known to be in one slot (a
script's keys, the first argument of the plain commands the gateway sends) goes straight
to the ``Link`` of the primary serving that slot, opened on first use; everything else
(commands sent to several nodes, SCAN, blocking commands, transactions, commands of
several slots) and every command that meets a redirection or a failure takes redis-py's
own path: MOVED (the slot map is patched), ASK, TRYAGAIN, CLUSTERDOWN while a replica is
promoted (the slot map is read again) and lost nodes are handled there, with its retries.
What still fails after them reaches the caller as it would from ``RedisCluster``
(``client.unavailable`` turns it into StoreUnavailableError).

``mget`` with keys of several slots reads each slot's keys apart (not atomically), so
that callers reading tasks of several conversations need not know how keys are spread.
"""

from __future__ import annotations

import asyncio
import inspect
import ssl
from collections.abc import Sequence
from typing import Any

from redis.asyncio.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.asyncio.connection import SSLConnection
from redis.commands.core import AsyncScript
from redis.exceptions import (
    AskError,
    ClusterDownError,
    NoScriptError,
    RedisClusterException,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.typing import ScriptTextT

from .link import Link, is_write, open_link, pack_command
from .multiplex import _ALONE, _EMPTY_RESPONSE, _NEVER_DECODE, acknowledged, drain
from .slots import key_slot

#: Commands whose only key is their first argument.
_ONE_KEY_NAMES = """
GET SET SETNX SETEX PSETEX GETDEL GETEX GETSET INCR INCRBY INCRBYFLOAT DECR DECRBY APPEND
STRLEN GETRANGE SETRANGE EXPIRE PEXPIRE EXPIREAT PEXPIREAT TTL PTTL PERSIST TYPE
HSET HSETNX HGET HMGET HMSET HDEL HGETALL HKEYS HVALS HLEN HEXISTS HINCRBY HINCRBYFLOAT
HSTRLEN LPUSH RPUSH LPUSHX RPUSHX LPOP RPOP LRANGE LLEN LINDEX LSET LREM LTRIM LINSERT LPOS
SADD SREM SMEMBERS SCARD SISMEMBER SMISMEMBER SPOP SRANDMEMBER
ZADD ZREM ZRANGE ZREVRANGE ZRANGEBYSCORE ZREVRANGEBYSCORE ZREMRANGEBYSCORE ZREMRANGEBYRANK
ZCARD ZSCORE ZMSCORE ZINCRBY ZRANK ZREVRANK ZCOUNT ZPOPMIN ZPOPMAX
XADD XRANGE XREVRANGE XLEN XTRIM XDEL
"""
_ONE_KEY = frozenset(name.encode() for name in _ONE_KEY_NAMES.split())
_SCRIPTS = frozenset({b"EVALSHA", b"EVAL", b"EVALSHA_RO", b"EVAL_RO", b"FCALL", b"FCALL_RO"})
_ONE_KEY_ANY = frozenset({b"DEL", b"UNLINK", b"EXISTS", b"TOUCH"})
#: Failures after which a command takes redis-py's path (redirections, failovers).
_DETOUR = (AskError, TryAgainError, ClusterDownError, SlotNotCoveredError,
           RedisConnectionError, RedisTimeoutError, OSError)


def command_slot(args: Sequence[Any]) -> int | None:
    """The one slot a command's keys are in, when that is known here; None otherwise."""
    name = args[0]
    name = (name.encode() if isinstance(name, str) else name).upper()
    if name in _SCRIPTS:
        count = int(args[2])
        keys = args[3:3 + count]
    elif name in _ONE_KEY or (name in _ONE_KEY_ANY and len(args) == 2):
        keys = args[1:2]
    else:
        return None
    if not keys:
        return None
    slot = key_slot(keys[0])
    return slot if all(key_slot(k) == slot for k in keys[1:]) else None


class OutagesNamed(RedisCluster):
    """A cluster client whose failure to read the slot map (no seed node reachable, the
    nodes disagreeing or some slots unserved while a failover runs) is a ClusterDownError,
    as the failover itself is, not redis-py's RedisClusterException, which it also raises
    for mistakes in a call."""

    async def initialize(self, *args: Any, **kwargs: Any) -> RedisCluster:
        try:
            return await super().initialize(*args, **kwargs)
        except RedisClusterException as exc:
            raise ClusterDownError(f"cannot read the cluster's slots: {exc}") from exc

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().execute_command(*args, **kwargs)
        except AttributeError as exc:
            # redis-py 8: a node's connection closed under a command while the slot map is
            # read again (a failover) has no writer any more, and the command fails with
            # AttributeError before anything is written: the store is away, not a mistake.
            if "'NoneType' object has no attribute" not in str(exc):
                raise
            raise RedisConnectionError(f"a connection closed under the command: {exc}") \
                from exc

    async def aclose(self) -> None:
        """Close every node's connections, also while the slot map is to be read again
        (redis-py's own ``aclose`` then closes none: they would be left to the GC)."""
        await super().aclose()
        await self.nodes_manager.aclose()
        await self.nodes_manager.aclose("startup_nodes")


class MultiplexedCluster(OutagesNamed):
    """A ``RedisCluster`` whose single-slot plain commands share one connection per
    primary; ``store_shards``: the shards of the store's keys on it (``keys.py``)."""

    def __init__(self, *args: Any, shards: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.store_shards = shards
        self._links: dict[str, Link] = {}
        self._opening: dict[str, asyncio.Task[Link]] = {}
        self._tls: ssl.SSLContext | None = None
        self._scripts: dict[str, AsyncScript] = {}
        self.replica_acks = 0
        self.replica_ack_timeout_ms = 1000

    def require_replicas(self, acks: int, timeout_ms: int) -> None:
        """As ``MultiplexedRedis.require_replicas``, on each primary."""
        self.replica_acks, self.replica_ack_timeout_ms = acks, timeout_ms

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        if self._initialize or "target_nodes" in kwargs or str(args[0]).upper() in _ALONE:
            return await super().execute_command(*args, **kwargs)
        slot = command_slot(args)
        if slot is None:
            return await super().execute_command(*args, **kwargs)
        try:
            node = self.nodes_manager.get_node_from_slot(slot)
            reply = await self._send(node, pack_command(*args),
                                     write=bool(self.replica_acks) and is_write(args[0]))
        except _DETOUR as exc:
            if isinstance(exc, RedisConnectionError | RedisTimeoutError | OSError):
                self._initialize = True  # read the slot map again before the next command
            return await super().execute_command(*args, **kwargs)
        except ResponseError:
            if _EMPTY_RESPONSE in kwargs:
                return kwargs[_EMPTY_RESPONSE]
            raise
        for option in (_NEVER_DECODE, _EMPTY_RESPONSE, "keys"):
            kwargs.pop(option, None)
        callback = self.response_callbacks.get(args[0])
        if callback is None:
            return reply
        value = callback(reply, **kwargs)
        return await value if inspect.isawaitable(value) else value

    async def _send(self, node: ClusterNode, packed: bytes, *, write: bool) -> Any:
        link = self._links.get(node.name)
        if link is None or not link.usable:
            link = await self._open(node)
        return await link.send(packed, write=write)

    async def _open(self, node: ClusterNode) -> Link:
        """The link to ``node``, opened (once, whoever asks first) if it is not."""
        opening = self._opening.get(node.name)
        if opening is None or opening.done():
            opening = self._opening[node.name] = asyncio.ensure_future(self._connect(node))
        return await asyncio.shield(opening)

    async def _connect(self, node: ClusterNode) -> Link:
        options = node.connection_kwargs
        tls = None
        if issubclass(node.connection_class, SSLConnection):
            if self._tls is None:
                self._tls = SSLConnection(**{k: v for k, v in options.items()
                                             if k != "himport_registry"}).ssl_context.get()
            tls = self._tls
        link = await open_link(options, host=node.host, port=int(node.port), tls=tls,
                               acks=self.replica_acks,
                               ack_timeout_ms=self.replica_ack_timeout_ms)
        self._links[node.name] = link
        return link

    async def mget(self, keys: Any, *args: Any) -> list[Any]:
        """The values of ``keys`` (read slot by slot, not atomically, when they are in
        several)."""
        names: list[Any] = [*keys, *args] if isinstance(keys, list | tuple) \
            else [keys, *args]
        by_slot: dict[int, list[int]] = {}
        for index, key in enumerate(names):
            by_slot.setdefault(key_slot(key), []).append(index)
        if len(by_slot) <= 1:
            return await super().mget(names)
        values: list[Any] = [None] * len(names)
        read = await asyncio.gather(*(self.execute_command("MGET", *(names[i] for i in where))
                                      for where in by_slot.values()))
        for where, found in zip(by_slot.values(), read, strict=True):
            for index, value in zip(where, found, strict=True):
                values[index] = value
        return values

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> ClusterPipeline:
        if transaction:
            pipe = _Transaction(self, True)  # type: ignore[abstract]
            if self.replica_acks:
                _acknowledge_transactions(pipe, self.replica_acks, self.replica_ack_timeout_ms)
            return pipe
        return _SharedClusterPipeline(self)  # type: ignore[abstract]

    def register_script(self, script: ScriptTextT) -> AsyncScript:  # type: ignore[override]
        registered = _ClusterScript(self, script)
        self._scripts.setdefault(registered.sha, registered)
        return registered

    async def load_scripts(self) -> int:
        """Load every script registered on this client on every primary; how many."""
        for script in self._scripts.values():
            await self.script_load(script.script)
        return len(self._scripts)

    async def aclose(self) -> None:
        """Close the links (after the replies in flight), then redis-py's connections."""
        links, self._links = list(self._links.values()), {}
        await asyncio.gather(*(drain(link) for link in links))
        await super().aclose()


def _acknowledge_transactions(pipe: ClusterPipeline, acks: int, timeout_ms: int) -> None:
    """Have ``pipe``'s transaction followed by WAIT on its connection."""
    strategy: Any = pipe._execution_strategy  # redis-py's TransactionStrategy
    run = strategy._execute_transaction

    async def execute(stack: Any, raise_on_error: bool) -> Any:
        result = await run(stack, raise_on_error)
        connection = strategy._transaction_connection
        if connection is not None and any(is_write(c.args[0]) for c in stack):
            await acknowledged(connection, acks, timeout_ms)
        return result

    strategy._execute_transaction = execute


class _Transaction(ClusterPipeline):
    """redis-py's cluster transaction, which may also call scripts: its keys are of one
    slot, as a script's must be (redis-py refuses EVALSHA in any cluster pipeline)."""

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        return self.execute_command("EVALSHA", sha, numkeys, *keys_and_args)


class _ClusterScript(AsyncScript):
    """A script sent through the cluster client's own path (its keys' primary's link);
    NOSCRIPT (a primary that never saw it, or a replica just promoted): loaded on every
    primary and called again."""

    registered_client: MultiplexedCluster

    async def __call__(self, keys: Any = None, args: Any = None,
                       client: Any = None) -> Any:
        redis = self.registered_client
        if client is not None and client is not redis:
            return await super().__call__(keys, args, client)
        keys, args = keys or (), args or ()
        try:
            return await redis.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)
        except NoScriptError:
            self.sha = await redis.script_load(self.script)
            return await redis.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)


class _SharedClusterPipeline(_Transaction):
    """A pipeline without a transaction whose commands each go their own way at once
    (to their primary's link, in one write per primary); scripts included."""

    def __init__(self, client: MultiplexedCluster) -> None:
        super().__init__(client, False)
        self._client = client

    async def execute(self, raise_on_error: bool = True,
                      allow_redirections: bool = True) -> list[Any]:
        stack = list(self._execution_strategy._command_queue)  # type: ignore[attr-defined]
        try:
            replies = await asyncio.gather(
                *(self._client.execute_command(*c.args, **c.kwargs) for c in stack),
                return_exceptions=True)
        finally:
            await self.reset()  # type: ignore[no-untyped-call]
        for reply in replies:
            if isinstance(reply, ResponseError):
                if raise_on_error:
                    raise reply
            elif isinstance(reply, BaseException):
                raise reply
        return replies
