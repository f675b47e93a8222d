"""Message and ToolCall: the provider-neutral conversation record.

Model adapters translate these to each wire format; the store persists them as JSON.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

from .ids import new_id

Role = Literal["system", "user", "assistant", "tool"]

#: What a message is, which decides how the context window treats it.
Kind = Literal[
    "instruction",  # the user's request that started a task: never evicted during the task
    "user",  # any other user message (a reply to ask_user, a steer)
    "decision",  # the assistant's tool call(s)
    "answer",  # the assistant's final answer or question
    "observation",  # a tool's successful result: evicted first
    "error",  # a tool's failure: never evicted during the task
    "correction",  # the loop telling the model its output was invalid
    "note",  # anything else the loop injects
]


@dataclass(slots=True)
class ToolCall:
    """A tool call as the model asked for it."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(slots=True)
class Message:
    """One message of a conversation."""

    role: Role
    content: str = ""
    kind: Kind = "user"
    id: str = field(default_factory=lambda: new_id(16))
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    task_id: str | None = None
    round: int = 0
    tokens: int = 0
    ts: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (empty optional fields omitted to keep storage small)."""
        # Built by hand: dataclasses.asdict deep-copies and is slow on this hot path.
        data: dict[str, Any] = {"role": self.role, "kind": self.kind, "id": self.id,
                                "round": self.round, "tokens": self.tokens, "ts": self.ts}
        if self.content:
            data["content"] = self.content
        if self.tool_calls:
            data["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments}
                                  for c in self.tool_calls]
        for key in ("tool_call_id", "name", "task_id"):
            value = getattr(self, key)
            if value:
                data[key] = value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        """Inverse of to_dict."""
        calls = [ToolCall(**c) for c in data.get("tool_calls", ())]
        return cls(**{**data, "tool_calls": calls})
