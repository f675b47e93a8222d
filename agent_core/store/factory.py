"""Opens the configured store: REDIS_URL when set, otherwise the embedded Valkey server."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from urllib.parse import urlsplit

from redis.asyncio import Redis

from ..models._http import ModelHTTP
from ..settings import Settings
from .client import connect, warm
from .embedded import EmbeddedValkey
from .embeddings import OpenAIEmbedder
from .redis import RedisConversationStore

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
    """Connect to REDIS_URL, or start/reuse the embedded server under HERMES_DATA_DIR.
    ``pooled``: connections opened at once for transactions (about one per concurrent
    task). ``embedded``: that server, launched by the caller (``EmbeddedValkey.launch``)."""
    if settings.redis_url is not None:
        if embedded is not None:
            raise ValueError("an embedded server was given, but REDIS_URL is set")
        url = settings.redis_url.get_secret_value()
        parts = urlsplit(url)
        location = f"{parts.scheme}://{parts.hostname or parts.path}:{parts.port or ''}"
    else:
        embedded = embedded or EmbeddedValkey(settings.hermes_data_dir)
        info = await embedded.start()
        url = info.url
        where = info.socket or f"127.0.0.1:{info.port}"
        location = f"embedded valkey {where} ({embedded.dir})"
    store = RedisConversationStore(
        connect(url), prefix=settings.redis_prefix,
        max_archive=settings.conversation_max_archive, task_retention=settings.task_retention,
        embedder=build_embedder(settings))
    blocking = connect(url, max_connections=_BLOCKING_CONNECTIONS, multiplex=False)
    try:
        await store.ping()
        await warm(store.redis, pooled)  # transactions' pool
    except Exception:
        await store.aclose()
        await blocking.aclose()
        if embedded is not None:
            await embedded.stop()
        raise
    log.info("conversation store: %s", location)
    return OpenStore(store, embedded, location, blocking)
