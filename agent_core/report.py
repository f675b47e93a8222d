"""TaskReport: what one task cost and how it ended."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .task import TaskStatus


@dataclass(slots=True)
class ToolStats:
    """Calls and time of one tool within a task."""

    calls: int = 0
    errors: int = 0
    seconds: float = 0.0


@dataclass(slots=True)
class TaskReport:
    """Rounds, time, tokens and tools of one task."""

    rounds: int = 0
    wall_time: float = 0.0
    model_time: float = 0.0
    model_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tools: dict[str, ToolStats] = field(default_factory=dict)
    invalid_decisions: int = 0
    outcome: TaskStatus = "running"
    error: str | None = None
    #: Set when the answer is not the model's own: "refusal" (the model refused; its
    #: refusal is the answer) or "content_filter" (the provider's filter withheld it).
    refusal: str | None = None

    @property
    def tool_calls(self) -> int:
        """Total tool calls."""
        return sum(s.calls for s in self.tools.values())

    @property
    def tool_time(self) -> float:
        """Total seconds spent in tools."""
        return sum(s.seconds for s in self.tools.values())

    def record_tool(self, name: str, seconds: float, *, ok: bool) -> None:
        """Count one tool call."""
        stats = self.tools.setdefault(name, ToolStats())
        stats.calls += 1
        stats.seconds += seconds
        stats.errors += 0 if ok else 1

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, with totals."""
        # Built by hand: dataclasses.asdict deep-copies and runs on every step.
        data: dict[str, Any] = {
            "rounds": self.rounds, "wall_time": self.wall_time, "model_time": self.model_time,
            "model_calls": self.model_calls, "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "tools": {name: {"calls": s.calls, "errors": s.errors, "seconds": s.seconds}
                      for name, s in self.tools.items()},
            "invalid_decisions": self.invalid_decisions, "outcome": self.outcome,
            "error": self.error, "refusal": self.refusal,
        }
        data["tool_calls"] = self.tool_calls
        data["tool_time"] = round(self.tool_time, 6)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskReport:
        """Inverse of to_dict (totals are recomputed)."""
        fields = {k: v for k, v in data.items() if k not in ("tool_calls", "tool_time")}
        fields["tools"] = {k: ToolStats(**v) for k, v in data.get("tools", {}).items()}
        return cls(**fields)
