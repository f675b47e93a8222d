"""MultiplexedRedis: the plain commands of every coroutine share one connection, pipelined.

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
"""

from __future__ import annotations

import asyncio
import inspect
import socket
import ssl
from collections import deque
from typing import Any, cast

import hiredis
import redis.asyncio as aioredis
import redis.utils
from redis._parsers.base import BaseParser
from redis.asyncio.client import Pipeline
from redis.asyncio.connection import SSLConnection, UnixDomainSocketConnection
from redis.commands.core import AsyncScript
from redis.exceptions import (
    AuthenticationError,
    DataError,
    InvalidResponse,
    NoScriptError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.typing import ScriptTextT
from redis.utils import HIREDIS_AVAILABLE

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
_NOT_ENOUGH_DATA = object()
#: RESP3 messages the server sends on its own (hiredis 3.2+); nothing here asks for them.
_PUSH: type | None = getattr(hiredis, "PushNotification", None)


def pack_command(*args: Any) -> bytes:
    """One command in the Redis protocol, packed by hiredis as redis-py's synchronous
    client does: a first argument like "CONFIG GET" is split; str, bytes, int and float
    are accepted, anything else is a DataError."""
    first = args[0]
    if isinstance(first, str):
        if " " in first:  # most names are one word: no new tuple for them
            args = (*first.encode().split(), *args[1:])
    elif b" " in first:
        args = (*first.split(), *args[1:])
    try:
        packed: bytes = hiredis.pack_command(cast(Any, args))
    except TypeError:
        if not any(isinstance(arg, bytearray) for arg in args):
            raise DataError(f"cannot send {args!r} to Redis: values must be str, bytes, "
                            "int or float") from None
        args = tuple(bytes(arg) if isinstance(arg, bytearray) else arg for arg in args)
        packed = hiredis.pack_command(cast(Any, args))
    return packed


def keep_alive(sock: Any) -> None:
    """TCP keepalive probes after a minute of silence: a connection a NAT or firewall
    dropped without telling anyone is found dead within ~90 s of idleness, instead of by
    the socket timeout of the next command sent on it."""
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (("TCP_KEEPIDLE", 60), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, option):  # Linux; macOS has TCP_KEEPALIVE instead of KEEPIDLE
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


class _Link(asyncio.Protocol):
    """One connection: requests written in order, replies handed out in the same order."""

    def __init__(self, timeout: float | None) -> None:
        self.loop = asyncio.get_running_loop()
        self.timeout = timeout
        self.transport: Any = None  # asyncio's or uvloop's (not an asyncio.Transport)
        self.reader = hiredis.Reader(protocolError=InvalidResponse,
                                     replyError=BaseParser.parse_error,
                                     notEnoughData=_NOT_ENOUGH_DATA)
        #: Futures of the commands written or about to be, with when they were queued.
        self.waiting: deque[tuple[asyncio.Future[Any], float]] = deque()
        self.outgoing: list[bytes] = []
        self.error: Exception | None = None
        self.writes = 0
        self._watchdog: asyncio.TimerHandle | None = None

    @property
    def usable(self) -> bool:
        return self.error is None and self.transport is not None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        keep_alive(transport.get_extra_info("socket"))

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while self.waiting:
            try:
                reply = self.reader.gets()
            except InvalidResponse as exc:
                self.close(RedisConnectionError(f"protocol error from the server: {exc}"))
                return
            if reply is _NOT_ENOUGH_DATA:
                return
            if _PUSH is not None and isinstance(reply, _PUSH):
                continue  # not a reply to anything
            future, _ = self.waiting.popleft()
            if future.done():  # its caller was cancelled
                continue
            if isinstance(reply, Exception):  # an error reply, as redis-py's exception
                future.set_exception(reply)
            else:
                future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.close(RedisConnectionError(
            "the Redis server closed the connection" + (f": {exc}" if exc else "")))

    def send(self, packed: bytes) -> asyncio.Future[Any]:
        """Queue a packed command for this turn's write; its future gets the reply."""
        if self.error is not None:
            raise self.error
        future = self.loop.create_future()
        self.waiting.append((future, self.loop.time()))
        if not self.outgoing:
            self.loop.call_soon(self._flush)
        self.outgoing.append(packed)
        if self._watchdog is None and self.timeout:
            self._watchdog = self.loop.call_later(self.timeout, self._check)
        return future

    def _flush(self) -> None:
        if self.transport is not None and self.error is None and self.outgoing:
            self.transport.write(b"".join(self.outgoing))
            self.writes += 1
        self.outgoing.clear()

    def _check(self) -> None:
        """Close the connection if the oldest command waited for its reply too long."""
        self._watchdog = None
        if not self.waiting or self.error is not None or not self.timeout:
            return
        overdue = self.loop.time() - self.waiting[0][1] - self.timeout
        if overdue >= 0:
            self.close(RedisTimeoutError(f"no reply from Redis within {self.timeout:g} s"))
        else:
            self._watchdog = self.loop.call_later(-overdue, self._check)

    def close(self, error: Exception) -> None:
        """Fail everything in flight with ``error`` and drop the connection."""
        if self.error is None:
            self.error = error
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        while self.waiting:
            future, _ = self.waiting.popleft()
            if not future.done():
                future.set_exception(self.error)
        self.outgoing.clear()
        if self.transport is not None:
            self.transport.abort()


class MultiplexedRedis(aioredis.Redis):
    """A ``redis.asyncio.Redis`` whose plain commands share one pipelined connection."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        pool = self.connection_pool
        self._options: dict[str, Any] = dict(pool.connection_kwargs)
        self._multiplexed = HIREDIS_AVAILABLE and not self._options.get("decode_responses")
        self._unix = issubclass(pool.connection_class, UnixDomainSocketConnection)
        self._tls = issubclass(pool.connection_class, SSLConnection)
        self._ssl_context: ssl.SSLContext | None = None
        self._link: _Link | None = None
        self._opening: asyncio.Task[_Link] | None = None
        self._retry = self._options.get("retry")
        self._scripts: dict[str, AsyncScript] = {}

    @property
    def writes(self) -> int:
        """Writes made on the current shared connection (for tests and benchmarks)."""
        return self._link.writes if self._link is not None else 0

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        if not self._multiplexed or self.single_connection_client or \
                str(args[0]).upper() in _ALONE:
            return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        try:
            reply = await self._send(pack_command(*args))
        except ResponseError:
            if _EMPTY_RESPONSE in options:
                return options[_EMPTY_RESPONSE]
            raise
        return await self._respond(args[0], reply, options)

    async def _send(self, packed: bytes) -> Any:
        """The reply to a packed command on the shared connection, sent again on a new one
        when the connection fails, as many times as the client's ``Retry`` allows."""
        attempts = 1 + (self._retry.get_retries() if self._retry is not None else 0)
        for attempt in range(attempts):
            try:
                link = self._link if self._link is not None and self._link.usable \
                    else await self._open()
                return await link.send(packed)
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

    async def _open(self) -> _Link:
        """The shared connection, opened (once, whoever asks first) if it is not."""
        if self._opening is None or self._opening.done():
            self._opening = asyncio.ensure_future(self._connect())
        return await asyncio.shield(self._opening)

    async def _connect(self) -> _Link:
        options = self._options
        loop = asyncio.get_running_loop()
        timeout = options.get("socket_timeout")

        def link() -> _Link:
            return _Link(timeout)

        connecting: Any
        if self._unix:
            connecting = loop.create_unix_connection(link, options["path"])
        else:
            connecting = loop.create_connection(link, options.get("host", "localhost"),
                                                int(options.get("port", 6379)),
                                                ssl=self._tls_context() if self._tls else None)
        opened: _Link
        _, opened = await asyncio.wait_for(connecting, options.get("socket_connect_timeout"))
        # The wire protocol of the pool's connections, so that redis-py's response
        # callbacks (chosen for it) fit the replies: RESP3 since redis-py 8, else RESP2.
        handshake = []
        password = options.get("password")
        credentials = [options.get("username") or "default", password] if password else []
        protocol = options.get("protocol") or getattr(redis.utils, "DEFAULT_RESP_VERSION", 2)
        if int(str(protocol)) == 3:
            hello = ["HELLO", 3, *(["AUTH", *credentials] if credentials else [])]
            handshake.append(opened.send(pack_command(*hello)))
        elif credentials:
            handshake.append(opened.send(pack_command("AUTH", *credentials)))
        if int(options.get("db") or 0):
            handshake.append(opened.send(pack_command("SELECT", options["db"])))
        try:
            await asyncio.gather(*handshake)
        except BaseException:
            opened.close(RedisConnectionError("the connection's set-up failed"))
            raise
        self._link = opened
        return opened

    def _tls_context(self) -> ssl.SSLContext:
        """The SSL context of the pool's connections (built as redis-py builds it)."""
        if self._ssl_context is None:
            connection = cast(SSLConnection, self.connection_pool.connection_class(
                **self._options))
            self._ssl_context = connection.ssl_context.get()
        return self._ssl_context

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Pipeline:
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
            if link.waiting and link.usable:
                last = link.waiting[-1][0]
                await asyncio.wait([last], timeout=link.timeout or 5.0)
            link.close(RedisConnectionError("the client was closed"))
        await super().aclose(close_connection_pool)


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
            return await redis._send(pack_command("EVALSHA", self.sha, len(keys), *keys, *args))
        except NoScriptError:
            self.sha = await redis.script_load(self.script)
            return await redis._send(pack_command("EVALSHA", self.sha, len(keys), *keys, *args))


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
