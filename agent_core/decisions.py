"""AgentDecision: what the model decided to do next. Exactly four types."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

DecisionType = Literal["final_answer", "tool_call", "ask_user", "invalid"]
DECISION_TYPES: tuple[DecisionType, ...] = ("final_answer", "tool_call", "ask_user", "invalid")


class AgentDecision(BaseModel):
    """One decision parsed from a model turn."""

    model_config = ConfigDict(defer_build=True)

    type: DecisionType
    tool_name: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    content: str = ""
    reason: str = ""
    #: The provider's id for a native tool call, echoed back with its result.
    call_id: str | None = None
    #: Options offered with an ask_user question (rendered as buttons where possible).
    choices: list[str] = Field(default_factory=list)
    #: Which parser rule produced this decision, for logs and events.
    rule: str = ""

    @classmethod
    def invalid(cls, reason: str, *, rule: str, content: str = "") -> AgentDecision:
        """An unusable model output, with the reason the model will be told."""
        return cls(type="invalid", reason=reason, rule=rule, content=content)
