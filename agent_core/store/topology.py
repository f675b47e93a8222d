"""Which Redis the store is, and the clients for it: one node (REDIS_URL), a primary found
through Sentinel (REDIS_SENTINELS + REDIS_SENTINEL_MASTER) or a Redis Cluster
(REDIS_CLUSTER_NODES). Nothing above the store knows which: each gives a client with the
same commands (``MultiplexedRedis`` or ``MultiplexedCluster``) and ``Keys.of`` reads the
layout of the keys from it.

With Sentinel or a cluster, REDIS_URL (when set) gives the data nodes' credentials and TLS
as it does for one node (``rediss://user:password@/?ssl_ca_certs=...``); its host, if
any, is a seed node too on a cluster and is refused with Sentinel (the sentinels say
where the primary is). HERMES_STORE_REPLICA_ACKS (default 1 with Sentinel or a cluster, 0
otherwise) is how many replicas must have a write before the store acknowledges it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import BlockingConnectionPool, SSLConnection, parse_url
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool, SentinelManagedConnection
from redis.backoff import ExponentialBackoff
from redis.exceptions import ClusterDownError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from ..errors import ConfigError
from ..settings import Settings
from .client import _lean_handshake, connect, hiredis_packing
from .cluster import MultiplexedCluster, OutagesNamed
from .multiplex import MultiplexedRedis
from .slots import key_slot

Kind = Literal["single", "sentinel", "cluster"]

#: What every client of the store is built with (as ``client.connect``).
_TIMEOUTS: dict[str, Any] = {"socket_timeout": 5.0, "socket_connect_timeout": 2.0,
                             "health_check_interval": 30}


def _retry() -> Retry:
    return Retry(ExponentialBackoff(cap=0.5, base=0.05), 2)


def _address(entry: str, setting: str) -> tuple[str, int]:
    host, sep, port = entry.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"{setting}: {entry!r} is not host:port")
    return host.strip("[]"), int(port)


@dataclass(frozen=True)
class Topology:
    """An external store: where it is and how its clients connect."""

    kind: Kind
    #: One node: its URL. Sentinel: the sentinels. Cluster: the seed nodes.
    url: str | None = None
    nodes: tuple[tuple[str, int], ...] = ()
    master: str | None = None
    #: The data nodes' credentials and TLS (from REDIS_URL).
    options: dict[str, Any] = field(default_factory=dict)
    #: The sentinels' own credentials.
    sentinel_options: dict[str, Any] = field(default_factory=dict)
    shards: int = 16
    acks: int = 0
    ack_timeout_ms: int = 1000

    @property
    def location(self) -> str:
        """Where the store is, without credentials (for logs and the admin's status)."""
        nodes = ",".join(f"{h}:{p}" for h, p in self.nodes)
        tls = "rediss" if self.options.get("ssl") else "redis"
        if self.kind == "cluster":
            return f"redis cluster {tls}://{nodes} ({self.shards} shards)"
        if self.kind == "sentinel":
            return f"redis sentinel {self.master!r} via {nodes} ({tls})"
        parts = parse_url(self.url or "")
        return f"{self.url.partition(':')[0] if self.url else 'redis'}://" \
               f"{parts.get('host') or parts.get('path') or ''}:{parts.get('port') or ''}"

    def connect(self, *, multiplex: bool = True, max_connections: int = 512) -> Any:
        """A client of the store (``multiplex``: plain commands share a connection per
        node; otherwise each takes a pooled one, as blocking commands need)."""
        client: Any
        if self.kind == "single":
            assert self.url is not None
            client = connect(self.url, max_connections=max_connections, multiplex=multiplex)
        elif self.kind == "sentinel":
            client = self._sentinel(multiplex, max_connections)
        else:
            client = self._cluster(multiplex, max_connections)
        if multiplex and self.acks:
            client.require_replicas(self.acks, self.ack_timeout_ms)
        return client

    def _sentinel(self, multiplex: bool, max_connections: int) -> aioredis.Redis:
        options = dict(self.options)
        tls = options.pop("ssl", False)
        base = _SentinelSSLConnection if tls else SentinelManagedConnection
        # The sentinels asked with a short retry of their own: redis-py's default (three
        # tries, backing off up to 10 s) made each look-up with every sentinel down take
        # ~20 s, and a gateway stopping in an outage ~50 s.
        sentinel = Sentinel(list(self.nodes), sentinel_kwargs={  # type: ignore[no-untyped-call]
            **_TIMEOUTS, "retry": Retry(ExponentialBackoff(cap=0.2, base=0.05), 1),
            **self.sentinel_options}, **_TIMEOUTS, **_lean_handshake())
        assert self.master is not None
        return sentinel.master_for(  # type: ignore[no-any-return]
            self.master, redis_class=MultiplexedRedis if multiplex else aioredis.Redis,
            connection_pool_class=_SentinelBlockingPool, max_connections=max_connections,
            timeout=20, connection_class=hiredis_packing(base), retry=_retry(),
            retry_on_error=[RedisConnectionError, RedisTimeoutError], **options)

    def _cluster(self, multiplex: bool, max_connections: int) -> Any:
        options = {k: v for k, v in self.options.items() if k != "db"}
        cls = MultiplexedCluster if multiplex else _Cluster
        return cls(startup_nodes=[ClusterNode(h, p) for h, p in self.nodes],
                   shards=self.shards, max_connections=max_connections, retry=_retry(),
                   **_TIMEOUTS, **_lean_handshake(), **options)


class _Cluster(OutagesNamed):
    """redis-py's cluster client (the blocking reads' own), saying how many shards the
    store's keys have as ``MultiplexedCluster`` does."""

    def __init__(self, *args: Any, shards: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.store_shards = shards


class _SentinelSSLConnection(SentinelManagedConnection, SSLConnection):
    """A connection to the primary Sentinel names, over TLS."""


class _SentinelBlockingPool(SentinelConnectionPool, BlockingConnectionPool):
    """The primary's connections, found through Sentinel; a burst waits for a free one
    instead of failing (as ``client.connect``'s pool). Its ``Sentinel`` is its own
    (``Topology._sentinel``): closed with it."""

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)
        await self.sentinel_manager.aclose()


def _template(settings: Settings, kind: Kind) -> tuple[dict[str, Any], list[tuple[str, int]]]:
    """REDIS_URL's credentials and TLS options, and its host as a node, if any."""
    if settings.redis_url is None:
        return {}, []
    url = settings.redis_url.get_secret_value()
    parsed: dict[str, Any] = dict(parse_url(url))
    if parsed.pop("path", None):
        raise ConfigError("REDIS_URL: a unix:// socket cannot go with REDIS_CLUSTER_NODES "
                          "or REDIS_SENTINELS")
    host, port = parsed.pop("host", None), parsed.pop("port", None)
    if parsed.pop("connection_class", None) is not None:
        parsed["ssl"] = True
    if host and kind == "sentinel":
        raise ConfigError("REDIS_URL names a host, but with REDIS_SENTINELS the sentinels "
                          "say where the primary is: give REDIS_URL without one "
                          "(rediss://user:password@/0) for the credentials and TLS only")
    return parsed, [(host, int(port or 6379))] if host else []


def topology(settings: Settings) -> Topology | None:
    """The external store the settings name (None: the embedded Valkey); ConfigError when
    they name it in two ways or by halves."""
    cluster, sentinels = settings.redis_cluster_nodes, settings.redis_sentinels
    if cluster and sentinels:
        raise ConfigError("REDIS_CLUSTER_NODES and REDIS_SENTINELS are both set: a store is "
                          "a cluster or a primary behind Sentinel, not both")
    if sentinels and not settings.redis_sentinel_master:
        raise ConfigError("REDIS_SENTINELS is set: also set REDIS_SENTINEL_MASTER, the name "
                          "the sentinels monitor the primary under")
    if settings.redis_sentinel_master and not sentinels:
        raise ConfigError("REDIS_SENTINEL_MASTER is set without REDIS_SENTINELS")
    acks = settings.hermes_store_replica_acks
    timeout = settings.hermes_store_replica_timeout_ms
    if cluster or sentinels:
        kind: Kind = "cluster" if cluster else "sentinel"
        options, extra = _template(settings, kind)
        nodes = [_address(n, "REDIS_CLUSTER_NODES" if cluster else "REDIS_SENTINELS")
                 for n in cluster or sentinels] + extra
        sentinel_options: dict[str, Any] = {}
        if settings.redis_sentinel_password is not None and \
                settings.redis_sentinel_password.get_secret_value():
            sentinel_options = {"username": settings.redis_sentinel_username,
                                "password": settings.redis_sentinel_password.get_secret_value()}
        return Topology(kind, nodes=tuple(dict.fromkeys(nodes)),
                        master=settings.redis_sentinel_master, options=options,
                        sentinel_options=sentinel_options, shards=settings.hermes_store_shards,
                        acks=1 if acks is None else acks, ack_timeout_ms=timeout)
    if settings.redis_url is not None:
        return Topology("single", url=settings.redis_url.get_secret_value(),
                        acks=acks or 0, ack_timeout_ms=timeout)
    return None


def slot_group(client: object, key: str) -> int | None:
    """What keys a multi-key command of ``client`` may read together must share: their
    slot on a cluster (None on one node: any keys go together)."""
    return key_slot(key) if isinstance(client, aioredis.RedisCluster) else None


async def pinned(client: Any, key: str, control: Any) -> tuple[aioredis.Redis, Any]:
    """A client holding one connection of its own to the node serving ``key`` (for a
    blocking read that ``CLIENT UNBLOCK`` may wake), and one to send that unblock to the
    same node: ``control`` itself on one node."""
    if not isinstance(client, aioredis.RedisCluster):
        return aioredis.Redis(connection_pool=client.connection_pool,
                              single_connection_client=True), control
    await client.initialize()
    node = client.get_node_from_key(key)
    if node is None:
        raise ClusterDownError(f"no node serves {key!r}")

    def own(connections: int) -> aioredis.Redis:
        pool = BlockingConnectionPool(connection_class=node.connection_class,
                                      max_connections=connections, timeout=5,
                                      **node.connection_kwargs)
        return aioredis.Redis.from_pool(pool)

    reader = own(1)
    reader.single_connection_client = True
    return reader, own(2)
