"""Conversation stores: Redis-protocol (embedded Valkey by default) and in-memory."""

from .base import ArchiveHit, ConversationStore, Snapshot, WindowSize
from .memory import MemoryConversationStore

__all__ = ["ArchiveHit", "ConversationStore", "MemoryConversationStore", "Snapshot",
           "WindowSize"]
