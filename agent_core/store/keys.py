"""Every Redis key hermes-gateway uses, built in one place from a configurable prefix.

Conversation keys carry the conversation id as a hash tag (``{...}``) so that all of one
conversation's keys live in one Redis Cluster slot and can be changed in one transaction.
Conversation ids are validated (``CONVERSATION_ID``) so they never contain glob or hash-tag
characters.
"""

from __future__ import annotations

import re

from ..errors import ConfigError

#: Ids look like ``slack:T1:C9:1712.33``, ``telegram:-100123:42``, ``webhook:crm:ticket-7``.
CONVERSATION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9:._@+=/-]{0,199}$")
_PREFIX = re.compile(r"^[A-Za-z0-9][A-Za-z0-9:._-]{0,63}$")


def check_conversation_id(conversation_id: str) -> str:
    """The id itself, or ValueError saying what a conversation id may contain."""
    if not CONVERSATION_ID.match(conversation_id):
        raise ValueError(
            f"conversation id {conversation_id[:80]!r} is invalid: use 1-200 letters, digits "
            "and : . _ @ + = / - (starting with a letter or digit)")
    return conversation_id


class Keys:
    """Key builder for one deployment's prefix."""

    def __init__(self, prefix: str = "hermes") -> None:
        if not _PREFIX.match(prefix):
            raise ConfigError(f"REDIS_PREFIX={prefix!r}: use letters, digits and : . _ -")
        self.prefix = prefix

    # --- conversations ---------------------------------------------------------------
    def conv(self, conversation_id: str, part: str) -> str:
        """A key of one conversation."""
        return f"{self.prefix}:conv:{{{conversation_id}}}:{part}"

    def conv_pattern(self, conversation_id: str) -> str:
        """A SCAN pattern for every key of one conversation."""
        return f"{self.prefix}:conv:{{{conversation_id}}}:*"

    def window(self, cid: str) -> str:
        """LIST of the window's messages (JSON)."""
        return self.conv(cid, "window")

    def meta(self, cid: str) -> str:
        """HASH: plan, summary, created_at, last_active, window_tokens, archived, terms."""
        return self.conv(cid, "meta")

    def archive(self, cid: str) -> str:
        """HASH: archive sequence number -> archived message (JSON)."""
        return self.conv(cid, "archive")

    def archive_ids(self, cid: str) -> str:
        """HASH: message id -> archive sequence number (archiving is idempotent)."""
        return self.conv(cid, "archive_ids")

    def archive_seq(self, cid: str) -> str:
        """STRING counter allocating archive sequence numbers."""
        return self.conv(cid, "archive_seq")

    def postings(self, cid: str, term: str) -> str:
        """STRING of packed (seq, tf, doclen) postings of one term (APPEND-only)."""
        return self.conv(cid, f"t:{term}")

    def vectors(self, cid: str) -> str:
        """HASH: archive sequence number -> packed unit embedding (with RECALL_EMBEDDINGS)."""
        return self.conv(cid, "vectors")

    def conv_tasks(self, cid: str) -> str:
        """SET of task ids of one conversation."""
        return self.conv(cid, "tasks")

    def conversations(self) -> str:
        """ZSET: conversation id -> last activity (for idle expiry)."""
        return f"{self.prefix}:conversations"

    # --- tasks -----------------------------------------------------------------------
    def task(self, task_id: str) -> str:
        """STRING: a task's state (JSON)."""
        return f"{self.prefix}:task:{task_id}"

    def task_events(self, task_id: str) -> str:
        """STREAM of a task's events (for SSE replay)."""
        return f"{self.prefix}:task:{task_id}:events"
