"""One pipelined connection to one Redis node: what ``MultiplexedRedis`` (one node) and
``MultiplexedCluster`` (one per primary) send their plain commands on.

Commands are packed (hiredis), queued for the write that ends the current loop turn
(everything issued in the turn goes in one write), and each one's future is resolved when
its reply arrives; Redis answers in order, so replies are matched first in, first out. A
lost connection fails every command in flight; a reply that does not come within the
socket timeout closes the connection (the server is stuck or gone).

**Replica acknowledgements.** With ``acks`` > 0 (HERMES_STORE_REPLICA_ACKS), a turn that
wrote anything ends with ``WAIT acks timeout``, and no reply of the turn (its reads
included, which may have read its writes) is handed out before the WAIT's: when fewer
replicas than ``acks`` have the turn's writes in time, every command of the turn fails
with ``ReplicaAckError``, which callers see as the store being unavailable. So nothing a
caller was told is stored (an acknowledged message, a finished task) is lost when a
primary dies and a replica takes its place. The writes themselves stay on the primary;
a caller that tries again finds them (a message's dedupe marker answers "duplicate").
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections import deque
from typing import Any, cast

import hiredis
import redis.utils
from redis._parsers.base import BaseParser
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, InvalidResponse, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

_NOT_ENOUGH_DATA = object()
#: RESP3 messages the server sends on its own (hiredis 3.2+); nothing here asks for them.
_PUSH: type | None = getattr(hiredis, "PushNotification", None)


class ReplicaAckError(RedisError):
    """Fewer replicas than HERMES_STORE_REPLICA_ACKS acknowledged a write in time."""


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


class _Gate:
    """The commands of one turn, when replica acknowledgements are asked for: their
    replies, held until the turn's WAIT answers (``wrote``: the turn wrote, so it ends
    with a WAIT; otherwise the replies pass as they come)."""

    __slots__ = ("held", "wrote")

    def __init__(self) -> None:
        self.wrote = False
        self.held: list[tuple[asyncio.Future[Any], Any]] = []


class Link(asyncio.Protocol):
    """One connection: requests written in order, replies handed out in the same order."""

    def __init__(self, timeout: float | None, *, acks: int = 0,
                 ack_timeout_ms: int = 1000) -> None:
        self.loop = asyncio.get_running_loop()
        self.timeout = timeout
        self.acks = acks
        self.ack_timeout_ms = ack_timeout_ms
        self.transport: Any = None  # asyncio's or uvloop's (not an asyncio.Transport)
        self.reader = hiredis.Reader(protocolError=InvalidResponse,
                                     replyError=BaseParser.parse_error,
                                     notEnoughData=_NOT_ENOUGH_DATA)
        #: Futures of the commands written or about to be, with when they were queued and
        #: their turn's gate (None: no acknowledgements asked; the gate itself: its WAIT).
        self.waiting: deque[tuple[asyncio.Future[Any] | None, float, Any]] = deque()
        self.outgoing: list[bytes] = []
        self.error: Exception | None = None
        self.writes = 0
        self._watchdog: asyncio.TimerHandle | None = None
        self._gate: _Gate | None = None
        self._gates: deque[_Gate] = deque()

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
            future, _, gate = self.waiting.popleft()
            if gate is not None:
                if future is None:  # the turn's WAIT
                    self._acknowledged(gate, reply)
                    continue
                if gate.wrote:
                    gate.held.append((future, reply))
                    continue
            if future is not None:
                _resolve(future, reply)

    def _acknowledged(self, gate: _Gate, reply: Any) -> None:
        """The WAIT of ``gate``'s turn answered: hand its replies out, or fail them."""
        self._gates.popleft()
        if isinstance(reply, int) and reply >= self.acks:
            for future, held in gate.held:
                _resolve(future, held)
            return
        failure = ReplicaAckError(
            f"{reply if isinstance(reply, int) else 0} of the {self.acks} replica(s) "
            f"HERMES_STORE_REPLICA_ACKS asks for acknowledged the write within "
            f"{self.ack_timeout_ms} ms")
        for future, _ in gate.held:
            if not future.done():
                future.set_exception(failure)

    def connection_lost(self, exc: Exception | None) -> None:
        self.close(RedisConnectionError(
            "the Redis server closed the connection" + (f": {exc}" if exc else "")))

    def send(self, packed: bytes, *, write: bool = False) -> asyncio.Future[Any]:
        """Queue a packed command for this turn's write; its future gets the reply.
        ``write``: it changes data (with acknowledgements asked for, the turn then ends
        with a WAIT)."""
        if self.error is not None:
            raise self.error
        future = self.loop.create_future()
        gate = None
        if self.acks:
            gate = self._gate
            if gate is None:
                gate = self._gate = _Gate()
            if write:
                gate.wrote = True
        self.waiting.append((future, self.loop.time(), gate))
        if not self.outgoing:
            self.loop.call_soon(self._flush)
        self.outgoing.append(packed)
        if self._watchdog is None and self.timeout:
            self._watchdog = self.loop.call_later(self.timeout, self._check)
        return future

    def _flush(self) -> None:
        gate, self._gate = self._gate, None
        if gate is not None and gate.wrote and self.error is None:
            self.outgoing.append(pack_command("WAIT", self.acks, self.ack_timeout_ms))
            self.waiting.append((cast(Any, None), self.loop.time(), gate))
            self._gates.append(gate)
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
        while self._gates:
            for future, _ in self._gates.popleft().held:
                if not future.done():
                    future.set_exception(self.error)
        while self.waiting:
            waiter, _, _ = self.waiting.popleft()
            if waiter is not None and not waiter.done():
                waiter.set_exception(self.error)
        self.outgoing.clear()
        if self.transport is not None:
            self.transport.abort()


def _resolve(future: asyncio.Future[Any], reply: Any) -> None:
    if future.done():  # its caller was cancelled
        return
    if isinstance(reply, Exception):  # an error reply, as redis-py's exception
        future.set_exception(reply)
    else:
        future.set_result(reply)


async def open_link(options: dict[str, Any], *, host: str | None = None,
                    port: int | None = None, path: str | None = None,
                    tls: ssl.SSLContext | None = None, acks: int = 0,
                    ack_timeout_ms: int = 1000) -> Link:
    """A connected, authenticated Link to ``host:port`` (or the Unix socket ``path``)
    with a redis-py connection's ``options`` (timeouts, credentials, protocol, db)."""
    loop = asyncio.get_running_loop()

    def link() -> Link:
        return Link(options.get("socket_timeout"), acks=acks, ack_timeout_ms=ack_timeout_ms)

    connecting: Any
    if path is not None:
        connecting = loop.create_unix_connection(link, path)
    else:
        connecting = loop.create_connection(link, host or "localhost", int(port or 6379),
                                            ssl=tls)
    opened: Link
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
    return opened


#: Commands that change no data (besides redis-py's read commands): no WAIT for them.
_NOT_WRITES = frozenset({
    "PING", "INFO", "ROLE", "SCRIPT", "CLIENT", "CLUSTER", "CONFIG", "COMMAND", "TIME",
    "ECHO", "MEMORY", "OBJECT", "SLOWLOG", "LATENCY", "HELLO", "AUTH", "SELECT", "WAIT",
    "LASTSAVE", "SENTINEL", "READONLY", "READWRITE", "ASKING", "FUNCTION", "QUIT",
})
_WRITES: dict[Any, bool] = {}


def is_write(command: Any) -> bool:
    """Whether a command (its first argument) may change data."""
    known = _WRITES.get(command)
    if known is None:
        from redis.commands import READ_COMMANDS

        name = (command.decode() if isinstance(command, bytes) else str(command)).upper()
        known = _WRITES[command] = not (name in READ_COMMANDS
                                        or name.split(" ")[0] in _NOT_WRITES)
    return known
