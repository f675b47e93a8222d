"""Opens the configured store: REDIS_URL, a primary behind Sentinel or a Redis Cluster when
set (``topology.py``), otherwise the embedded Valkey server."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from ..errors import ConfigError
from ..models._http import ModelHTTP
from ..settings import Settings
from .client import as_text, connect, warm
from .embedded import EmbeddedValkey
from .embeddings import OpenAIEmbedder
from .redis import RedisConversationStore
from .topology import topology

log = logging.getLogger(__name__)

#: Concurrent blocking reads (one per SSE follower and one per dispatcher) per process.
_BLOCKING_CONNECTIONS = 2048


@dataclass
class OpenStore:
    """A connected store and, when embedded, the server behind it."""

    store: RedisConversationStore
    embedded: EmbeddedValkey | None
    #: Where the store is, without credentials (for logs and /readyz).
    location: str
    #: A second client for blocking reads (XREAD BLOCK, BLMPOP), so that many idle
    #: followers can never take every connection of the store's own pool.
    blocking: Redis

    async def close(self) -> None:
        """Close the clients, and stop the embedded server if this process started it."""
        if self.store.embedder is not None:
            await self.store.embedder.aclose()
        await self.store.aclose()
        await self.blocking.aclose()
        if self.embedded is not None:
            await self.embedded.stop()


def build_embedder(settings: Settings) -> OpenAIEmbedder | None:
    """The recall embedder named by RECALL_EMBEDDINGS, if any."""
    spec = settings.recall_embeddings
    if spec is None:
        return None
    key = spec.resolved_key()
    headers = {"Authorization": f"Bearer {key.get_secret_value()}"} if key else {}
    http = ModelHTTP(provider=spec.provider, base_url=spec.url(), headers=headers,
                     timeout=settings.llm_timeout, max_retries=settings.llm_max_retries,
                     key_setting=spec.api_key_env or "RECALL_EMBEDDINGS")
    return OpenAIEmbedder(http, spec.model_name)


async def open_store(settings: Settings, *, pooled: int = 40,
                     embedded: EmbeddedValkey | None = None) -> OpenStore:
    """Connect to the external store the settings name (``topology``), or start/reuse the
    embedded server under HERMES_DATA_DIR. ``pooled``: connections opened at once for
    transactions (about one per concurrent task; on one node). ``embedded``: that server,
    launched by the caller (``EmbeddedValkey.launch``)."""
    plan = topology(settings)
    client: Any
    if plan is not None:
        if embedded is not None:
            raise ValueError("an embedded server was given, but the store is external")
        client = plan.connect()
        blocking = plan.connect(multiplex=False, max_connections=_BLOCKING_CONNECTIONS)
        location = plan.location
    else:
        embedded = embedded or EmbeddedValkey(settings.hermes_data_dir)
        info = await embedded.start()
        client = connect(info.url)
        blocking = connect(info.url, max_connections=_BLOCKING_CONNECTIONS, multiplex=False)
        where = info.socket or f"127.0.0.1:{info.port}"
        location = f"embedded valkey {where} ({embedded.dir})"
    store = RedisConversationStore(
        client, prefix=settings.redis_prefix,
        max_archive=settings.conversation_max_archive, task_retention=settings.task_retention,
        embedder=build_embedder(settings))
    try:
        await store.ping()
        await _check_layout(store)
        if hasattr(client, "connection_pool"):
            await warm(client, pooled)  # transactions' pool (a cluster's are per node)
        else:
            # The slot map read before the first burst: redis-py's cluster client, reading
            # it under many first commands at once, failed some of them on connections
            # closed under them (16 blocking reads at once here).
            await blocking.initialize()
    except Exception:
        await store.aclose()
        await blocking.aclose()
        if embedded is not None:
            await embedded.stop()
        raise
    log.info("conversation store: %s", location)
    return OpenStore(store, embedded, location, blocking)


async def _check_layout(store: RedisConversationStore) -> None:
    """On a cluster, record the number of shards the keys are written with, or refuse
    another: it names every key, so a process configured otherwise would not find them."""
    keys = store.keys
    if keys.shards is None:
        return
    marker = f"shards={keys.shards}"
    await store.redis.set(keys.layout_marker(), marker, nx=True)
    found = as_text(await store.redis.get(keys.layout_marker()))
    if found != marker:
        raise ConfigError(
            f"HERMES_STORE_SHARDS={keys.shards}, but this store's keys (REDIS_PREFIX="
            f"{keys.prefix!r}) were written with {found}: set HERMES_STORE_SHARDS to that, or "
            "use another REDIS_PREFIX")
