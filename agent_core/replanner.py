"""Replanner: asks the model for a short "goal / done / remaining" summary to pin."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from .messages import Message
from .models.base import ModelAdapter, ModelRequest, ModelResponse
from .prompt import REPLAN_PROMPT

_MAX_PLAN_CHARS = 800
_MAX_STEP_CHARS = 300


class Replanner:
    """Summarises a task's progress; the loop pins the result in the system message."""

    def __init__(self, model: ModelAdapter) -> None:
        self.model = model

    async def summarise(self, window: list[Message], instruction: str, *,
                        ask: Callable[[ModelRequest], Awaitable[ModelResponse]] | None = None
                        ) -> str:
        """Three lines: Goal, Done, Remaining. Empty when the model gives nothing usable.
        ``ask``: how the request is sent (the task's budgeted call; the model by default)."""
        steps = "\n".join(_render(m) for m in window[-30:])
        request = ModelRequest(
            messages=[
                Message(role="system", content=REPLAN_PROMPT),
                Message(role="user", content=f"Task: {instruction[:2000]}\n\nSteps so far:\n"
                                             f"{steps}"),
            ],
            temperature=0.0, max_tokens=300)
        response = await (ask or self.model.complete)(request)
        return response.text.strip()[:_MAX_PLAN_CHARS]


def _render(m: Message) -> str:
    if m.tool_calls:
        calls = "; ".join(f"{c.name}({json.dumps(c.arguments, ensure_ascii=False)})"
                          for c in m.tool_calls)
        return f"- called {calls}"[:_MAX_STEP_CHARS]
    label = {"tool": f"result of {m.name}", "user": "user", "assistant": "assistant"}.get(
        m.role, m.role)
    return f"- {label}: {m.content}"[:_MAX_STEP_CHARS]
