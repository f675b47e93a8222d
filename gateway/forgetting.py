"""Forgetting a conversation: what the store kept of it (window, archive, tasks) and the
files on this host (the inbox of what people sent, its tasks' sandboxes), at once."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from agent_core.store import RedisConversationStore
from agent_core.tools.sandbox import remove_conversation_files

log = logging.getLogger(__name__)


async def forget(store: RedisConversationStore, data_dir: Path, conversation_id: str) -> int:
    """Delete everything a conversation stored: how many keys went (its files go too)."""
    deleted = await store.forget(conversation_id)
    await forget_files(data_dir, conversation_id)
    return deleted


async def forget_files(data_dir: Path, conversation_id: str) -> None:
    """Delete a conversation's files on this host."""
    if await asyncio.to_thread(remove_conversation_files, data_dir, conversation_id):
        log.info("deleted the files of a forgotten conversation")
