"""The store's Redis client: how it connects, and how its failures look to the rest.

``connect`` builds the client every part of a process shares (short timeouts, a small retry
budget, a pool that makes a burst wait instead of failing, plain commands multiplexed on one
connection). ``unavailable`` and ``store_boundary`` turn a server that cannot be reached into
``StoreUnavailableError`` at the edge of every module that talks to the store (this store,
the gateway's queue, approvals, scheduler, audit log), so callers above (the HTTP app, the
channels) know one error, whatever client library is underneath.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.backoff import ExponentialBackoff
from redis.exceptions import (
    AskError,
    BusyLoadingError,
    ClusterDownError,
    ClusterError,
    ReadOnlyError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry
from redis.utils import HIREDIS_AVAILABLE

from ..errors import StoreUnavailableError
from .link import ReplicaAckError
from .multiplex import MultiplexedRedis, pack_command

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C", bound=type)

#: redis-py's errors for a server that cannot be reached or cannot answer yet, or refuses
#: writes (a demoted primary's READONLY, too few replicas to acknowledge them), a cluster
#: failing over (CLUSTERDOWN, TRYAGAIN, a redirection or a slot still unserved after the
#: retries), and socket errors: what ``unavailable`` turns into StoreUnavailableError.
_UNREACHABLE: tuple[type[Exception], ...] = (
    RedisConnectionError, RedisTimeoutError, BusyLoadingError, OSError, ReadOnlyError,
    ReplicaAckError, ClusterDownError, ClusterError, TryAgainError, AskError,
    SlotNotCoveredError)


def outage(exc: BaseException) -> bool:
    """Whether a client's error means the store is unavailable (for now), not a mistake."""
    return isinstance(exc, _UNREACHABLE) or (
        isinstance(exc, ResponseError) and str(exc).startswith("NOREPLICAS"))


def unavailable(fn: Callable[P, Coroutine[Any, Any, R]]
                ) -> Callable[P, Coroutine[Any, Any, R]]:
    """Map connection-level failures of ``fn`` to StoreUnavailableError."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except Exception as exc:
            if not outage(exc):
                raise
            raise StoreUnavailableError(
                f"the conversation store is unavailable: {type(exc).__name__}: {exc}") from exc

    return wrapper


def store_boundary(cls: C) -> C:
    """A class whose public coroutine methods (those it defines) raise
    StoreUnavailableError, never a client library's own errors, when the store cannot be
    reached: ``unavailable`` around each of them."""
    for name, member in list(vars(cls).items()):
        if not name.startswith("_") and inspect.iscoroutinefunction(member):
            setattr(cls, name, unavailable(member))
    return cls


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


def as_text(value: Any) -> str:
    """A reply value as str (the clients return bytes)."""
    return value.decode() if isinstance(value, bytes) else str(value)
