"""Conversation stores: Redis-protocol (embedded Valkey by default) and in-memory.

The Redis-bound names (the client, the store, opening the configured one) are imported
when first used, so that ``import agent_core`` does not load redis-py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..exports import lazy_exports
from .base import ArchiveHit, BoundMemory, ConversationStore, Snapshot, WindowSize
from .keys import CONVERSATION_ID, Keys, check_conversation_id
from .memory import MemoryConversationStore

if TYPE_CHECKING:
    from .client import as_text, connect, store_boundary, unavailable, warm
    from .embedded import EmbeddedValkey
    from .factory import OpenStore, open_store
    from .multiplex import MultiplexedRedis
    from .redis import RedisConversationStore

_LAZY = {
    "as_text": "client", "connect": "client", "store_boundary": "client",
    "unavailable": "client", "warm": "client", "EmbeddedValkey": "embedded",
    "OpenStore": "factory", "open_store": "factory", "MultiplexedRedis": "multiplex",
    "RedisConversationStore": "redis",
}

__all__ = [
    "CONVERSATION_ID",
    "ArchiveHit",
    "BoundMemory",
    "ConversationStore",
    "EmbeddedValkey",
    "Keys",
    "MemoryConversationStore",
    "MultiplexedRedis",
    "OpenStore",
    "RedisConversationStore",
    "Snapshot",
    "WindowSize",
    "as_text",
    "check_conversation_id",
    "connect",
    "open_store",
    "store_boundary",
    "unavailable",
    "warm",
]


__getattr__ = lazy_exports(__name__, _LAZY)
