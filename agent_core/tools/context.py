"""ToolContext: who is asking and where, passed to every tool that declares it."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

ALL_PERMISSIONS = "*"


class ConversationMemory(Protocol):
    """The caller's own conversation memory: it can only ever search that conversation."""

    async def recall(self, query: str, limit: int) -> list[Any]:
        """Archived messages matching ``query``, best first."""
        ...


@dataclass(frozen=True, slots=True)
class ToolContext:
    """The caller of a tool. There is no global session: this is all a tool knows."""

    user_id: str
    conversation_id: str
    trace_id: str
    created_at: float = field(default_factory=time.time)
    role: str = "user"
    permissions: frozenset[str] = frozenset({"read"})
    #: The task's sandbox directory; file tools resolve every path inside it.
    workdir: Path | None = None
    task_id: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: Search of this conversation's archive (the recall tool uses it); None outside a task.
    memory: ConversationMemory | None = None
    #: Live services of the deployment (e.g. "scheduler"); never persisted.
    services: Mapping[str, Any] = field(default_factory=dict)

    def allows(self, permission: str | None) -> bool:
        """Whether this caller holds ``permission`` (None means no permission is needed)."""
        return (
            permission is None
            or ALL_PERMISSIONS in self.permissions
            or permission in self.permissions
        )
