"""MultiplexedRedis: the plain commands of every coroutine share one connection, pipelined
(``link.py``).

redis-py's asyncio client sends each command on a pooled connection of its own: take a
connection, check it for stray data, arm a timer, write, wait, read, disarm, give it back;
four turns of the event loop and ~175 µs of CPU per command here, against ~27 µs for the
same PING written and read on a bare asyncio stream. Under a burst that was most of the
cost of the store. So plain commands go on one shared connection instead: each is packed
(hiredis), queued for the write that ends the current loop turn (everything issued in the
turn goes in one write), and its future is resolved when its reply arrives; Redis answers
in order, so replies are matched first in, first out (``bench/memory.py``, second line).

Semantics stay those of separate commands: nothing is atomic across callers (no MULTI), a
server error fails only the command that caused it, and a lost connection fails every
command in flight, which is retried on a new one as redis-py's client does (as many times
as the client's ``Retry`` allows, backing off 50 ms, 100 ms, ... up to 500 ms; a command
that reached the server before the loss may run twice, as with redis-py). A refused
password is not retried. A caller cancelled after its command was written does not unsend
it: its reply is read and dropped. A reply that does not come within ``socket_timeout``
closes the connection (the server is stuck or gone), failing what was in flight with
TimeoutError.

A pipeline without a transaction (``pipeline(transaction=False)``) sends its commands the
same way: they go out in one write on the shared connection, and its results and errors
are those of redis-py's pipeline. What does not go on the shared connection, but through
redis-py's pool as before: blocking commands (they would hold up everyone's replies) and
commands that change the connection they run on (``_ALONE``), transactions and ``WATCH``,
and everything when the client decodes responses. Over TLS (``rediss://``) the shared
connection is made with the SSL context redis-py's own connections would use (the same
``ssl_*`` options from the URL or the client: CA, certificate checks, hostname check,
client certificate), so certificates are checked the same way on both paths.

The client also remembers the Lua scripts registered on it, so that a service can load
them all when it starts (``load_scripts``): otherwise the first burst after a start finds
none of them on the server and every caller pays NOSCRIPT, SCRIPT LOAD and a retry (200
concurrent first messages made 200 failed EVALSHA and 200 SCRIPT LOAD here).

Behind Sentinel (a pool of redis-py's ``SentinelConnectionPool``) the shared connection is
opened to the primary the sentinels name, asked again at every reconnection; a READONLY
reply (the primary was demoted: a failover happened) closes it, and the refused command is
sent again to the new primary within the retry budget, as redis-py's sentinel connections
do. With replica acknowledgements asked for (``require_replicas``), a turn's writes wait
for them (``link.py``) and so does each transaction (a WAIT after its EXEC).
"""

from __future__ import annotations

import asyncio
import inspect
import ssl
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.commands.core import AsyncScript
from redis.exceptions import AuthenticationError, NoScriptError, ReadOnlyError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.typing import ScriptTextT
from redis.utils import HIREDIS_AVAILABLE

from .link import Link, ReplicaAckError, is_write, open_link, pack_command

__all__ = ["MultiplexedRedis", "pack_command"]

#: Commands that wait on the server, or change the connection they run on.
_ALONE = frozenset({
    "BLPOP", "BRPOP", "BLMOVE", "BRPOPLPUSH", "BLMPOP", "BZPOPMIN", "BZPOPMAX", "BZMPOP",
    "XREAD", "XREADGROUP", "WAIT", "WAITAOF", "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE",
    "MONITOR", "MULTI", "EXEC", "WATCH", "UNWATCH", "SELECT", "AUTH", "HELLO", "RESET",
    "QUIT", "CLIENT SETNAME", "CLIENT SETINFO", "CLIENT TRACKING", "CLIENT REPLY",
    "READONLY",
})
_NEVER_DECODE = "NEVER_DECODE"
_EMPTY_RESPONSE = "EMPTY_RESPONSE"


class MultiplexedRedis(aioredis.Redis):
    """A ``redis.asyncio.Redis`` whose plain commands share one pipelined connection."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        pool = self.connection_pool
        self._options: dict[str, Any] = dict(pool.connection_kwargs)
        self._multiplexed = HIREDIS_AVAILABLE and not self._options.get("decode_responses")
        self._unix = issubclass(pool.connection_class, UnixDomainSocketConnection)
        self._tls = issubclass(pool.connection_class, SSLConnection)
        #: Behind Sentinel: the pool asks the sentinels where the primary is.
        self._sentinel = hasattr(pool, "get_master_address")
        self._ssl_context: ssl.SSLContext | None = None
        self._link: Link | None = None
        self._opening: asyncio.Task[Link] | None = None
        self._retry = self._options.get("retry")
        self._scripts: dict[str, AsyncScript] = {}
        self.replica_acks = 0
        self.replica_ack_timeout_ms = 1000

    def require_replicas(self, acks: int, timeout_ms: int) -> None:
        """Hand out no write's reply before ``acks`` replicas have it (``link.py``), within
        ``timeout_ms`` (then ReplicaAckError); 0: no waiting."""
        self.replica_acks, self.replica_ack_timeout_ms = acks, timeout_ms

    @property
    def writes(self) -> int:
        """Writes made on the current shared connection (for tests and benchmarks)."""
        return self._link.writes if self._link is not None else 0

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        if not self._multiplexed or self.single_connection_client or \
                str(args[0]).upper() in _ALONE:
            return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        try:
            reply = await self._send(pack_command(*args),
                                     write=bool(self.replica_acks) and is_write(args[0]))
        except ResponseError:
            if _EMPTY_RESPONSE in options:
                return options[_EMPTY_RESPONSE]
            raise
        return await self._respond(args[0], reply, options)

    async def _send(self, packed: bytes, *, write: bool = False) -> Any:
        """The reply to a packed command on the shared connection, sent again on a new one
        when the connection fails (or, behind Sentinel, the primary was demoted), as many
        times as the client's ``Retry`` allows."""
        attempts = 1 + (self._retry.get_retries() if self._retry is not None else 0)
        for attempt in range(attempts):
            try:
                link = self._link if self._link is not None and self._link.usable \
                    else await self._open()
                try:
                    return await link.send(packed, write=write)
                except ReadOnlyError as exc:
                    if not self._sentinel:
                        raise
                    # Refused (so not run): the primary is a replica now; ask again.
                    link.close(RedisConnectionError(f"the primary was demoted: {exc}"))
                    raise link.error from exc  # type: ignore[misc]
            except AuthenticationError:
                raise
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                if attempt + 1 == attempts:
                    if isinstance(exc, OSError):
                        raise RedisConnectionError(f"cannot reach Redis: {exc}") from exc
                    raise
                await asyncio.sleep(min(0.5, 0.05 * 2 ** attempt))
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _respond(self, command: Any, reply: Any, options: dict[str, Any]) -> Any:
        """The reply as redis-py's client would return it (its response callbacks)."""
        for option in (_NEVER_DECODE, _EMPTY_RESPONSE, "keys"):
            options.pop(option, None)
        callback = self.response_callbacks.get(command)
        if callback is None:
            return reply
        value = callback(reply, **options)
        return await value if inspect.isawaitable(value) else value

    async def _open(self) -> Link:
        """The shared connection, opened (once, whoever asks first) if it is not."""
        if self._opening is None or self._opening.done():
            self._opening = asyncio.ensure_future(self._connect())
        return await asyncio.shield(self._opening)

    async def _connect(self) -> Link:
        options = self._options
        where: dict[str, Any]
        if self._unix:
            where = {"path": options["path"]}
        elif self._sentinel:
            host, port = await self.connection_pool.get_master_address()  # type: ignore[attr-defined]
            where = {"host": host, "port": port}
        else:
            where = {"host": options.get("host", "localhost"),
                     "port": int(options.get("port", 6379))}
        self._link = await open_link(
            options, **where, tls=self._tls_context() if self._tls else None,
            acks=self.replica_acks, ack_timeout_ms=self.replica_ack_timeout_ms)
        return self._link

    def _tls_context(self) -> ssl.SSLContext:
        """The SSL context of the pool's connections (built as redis-py builds it)."""
        if self._ssl_context is None:
            options = {k: v for k, v in self._options.items()
                       if k not in ("connection_pool",)}
            connection = SSLConnection(**options)
            self._ssl_context = connection.ssl_context.get()
        return self._ssl_context

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Pipeline:
        if transaction and self.replica_acks:
            return _AcknowledgedPipeline(self.connection_pool, self.response_callbacks,
                                         transaction, shard_hint, self)
        if transaction or not self._multiplexed:
            return super().pipeline(transaction, shard_hint)
        return _SharedPipeline(self, shard_hint)

    def register_script(self, script: ScriptTextT) -> AsyncScript:  # type: ignore[override]
        registered = _SharedScript(self, script) if self._multiplexed \
            else super().register_script(script)
        self._scripts.setdefault(registered.sha, registered)
        return registered

    async def load_scripts(self) -> int:
        """Load every script registered on this client (one round trip); how many."""
        pipe = self.pipeline(transaction=False)
        for script in self._scripts.values():
            pipe.script_load(script.script)
        await pipe.execute()
        return len(self._scripts)

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        """Wait (up to the socket timeout) for the replies in flight, then close."""
        link, self._link = self._link, None
        if link is not None:
            await drain(link)
        await super().aclose(close_connection_pool)


async def drain(link: Link) -> None:
    """Wait (up to its socket timeout) for the replies in flight on ``link``, then close it."""
    if link.waiting and link.usable:
        last = next((f for f, _, _ in reversed(link.waiting) if f is not None), None)
        if last is not None:
            await asyncio.wait([last], timeout=link.timeout or 5.0)
    link.close(RedisConnectionError("the client was closed"))


class _AcknowledgedPipeline(Pipeline):
    """A transaction followed by ``WAIT`` on its connection: its result is handed out once
    the replicas a client requires have its writes (ReplicaAckError otherwise)."""

    def __init__(self, pool: Any, callbacks: Any, transaction: bool, shard_hint: Any,
                 client: MultiplexedRedis) -> None:
        super().__init__(pool, callbacks, transaction, shard_hint)
        self._acks = client.replica_acks
        self._ack_timeout_ms = client.replica_ack_timeout_ms

    async def _execute_transaction(self, connection: Connection, commands: Any,
                                   raise_on_error: Any) -> Any:
        result = await super()._execute_transaction(connection, commands, raise_on_error)
        if any(is_write(args[0]) for args, _ in commands):
            await acknowledged(connection, self._acks, self._ack_timeout_ms)
        return result


async def acknowledged(connection: Any, acks: int, timeout_ms: int) -> None:
    """WAIT on a pooled connection for ``acks`` replicas to have its writes."""
    await connection.send_command("WAIT", acks, timeout_ms)
    count = await connection.read_response()
    if not isinstance(count, int) or count < acks:
        raise ReplicaAckError(f"{count} of the {acks} replica(s) HERMES_STORE_REPLICA_ACKS "
                              f"asks for acknowledged the transaction within {timeout_ms} ms")


class _SharedScript(AsyncScript):
    """A script called straight onto the shared connection, without redis-py's layers
    (~5 of a ~12 us call here). NOSCRIPT: loaded and called again, as ``AsyncScript`` does;
    in a pipeline, or called on another client, it is ``AsyncScript``."""

    registered_client: MultiplexedRedis

    async def __call__(self, keys: Any = None, args: Any = None,
                       client: Any = None) -> Any:
        redis = self.registered_client
        if client is not None and client is not redis:
            return await super().__call__(keys, args, client)
        keys, args = keys or (), args or ()
        try:
            return await redis._send(pack_command("EVALSHA", self.sha, len(keys), *keys, *args),
                                     write=bool(redis.replica_acks))
        except NoScriptError:
            self.sha = await redis.script_load(self.script)
            return await redis._send(pack_command("EVALSHA", self.sha, len(keys), *keys, *args),
                                     write=bool(redis.replica_acks))


class _SharedPipeline(Pipeline):
    """A pipeline without MULTI whose commands go on the shared connection, in one write."""

    def __init__(self, client: MultiplexedRedis, shard_hint: Any) -> None:
        super().__init__(client.connection_pool, client.response_callbacks, False, shard_hint)
        self._client = client

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        if self.watching or getattr(self, "explicit_transaction", False):
            return await super().execute(raise_on_error)
        stack = self.command_stack
        try:
            if self.scripts:
                await self.load_scripts()  # type: ignore[no-untyped-call]
            replies = await asyncio.gather(*(self._client.execute_command(*args, **options)
                                             for args, options in stack),
                                           return_exceptions=True)
        finally:
            await self.reset()  # type: ignore[no-untyped-call]
        for number, reply in enumerate(replies, 1):
            if isinstance(reply, ResponseError):
                if raise_on_error:
                    self.annotate_exception(reply, number, stack[number - 1][0])
                    raise reply
            elif isinstance(reply, BaseException):
                raise reply  # the connection failed: as redis-py's pipeline raises
        return replies
