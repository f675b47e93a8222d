"""Tool specs and tool-call turns in each provider's wire format."""

from __future__ import annotations

import json
from typing import Any

from .messages import Message

ASK_USER_SPEC: dict[str, Any] = {
    "name": "ask_user",
    "description": "Ask the user a question when you cannot continue without their answer. "
                   "The task pauses until they reply.",
    "parameters": {
        "type": "object",
        "properties": {
            "question": {"type": "string", "description": "The question to ask."},
            "choices": {"type": "array", "items": {"type": "string"},
                        "description": "Optional short answers to offer as buttons."},
        },
        "required": ["question"],
        "additionalProperties": False,
    },
}


def to_openai(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI ``tools`` entries from neutral specs."""
    return [{"type": "function", "function": {"name": s["name"],
                                              "description": s["description"],
                                              "parameters": s["parameters"]}}
            for s in specs]


def to_anthropic(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic ``tools`` entries from neutral specs."""
    return [{"name": s["name"], "description": s["description"],
             "input_schema": s["parameters"]} for s in specs]


def tool_call_as_text(message: Message) -> str:
    """An assistant tool-call turn written as the JSON protocol, for text-only models."""
    calls = [{"type": "tool_call", "tool_name": c.name, "arguments": c.arguments}
             for c in message.tool_calls]
    body = calls[0] if len(calls) == 1 else calls
    prefix = f"{message.content}\n" if message.content else ""
    return prefix + json.dumps(body, ensure_ascii=False)


def tool_result_as_text(message: Message) -> str:
    """A tool result written as a user-visible observation, for text-only models."""
    return f"Observation from {message.name or 'tool'} (call {message.tool_call_id}):\n" \
           f"{message.content}"
