"""The fields of a decision written as JSON, whatever a model calls them: the tool's name
(``tool_name``, ``name``, ``function``, ``action``…), its arguments (``arguments``,
``parameters``, ``action_input``…), the decision's type and its text."""

from __future__ import annotations

import json
from typing import Any

_NAME_KEYS = ("tool_name", "name", "tool", "function", "function_name", "action")
_ARG_KEYS = ("arguments", "parameters", "args", "input", "tool_input", "action_input", "params")
_CONTENT_KEYS = ("content", "answer", "final_answer", "response", "text", "message", "output",
                 "result", "question")
_TYPE_KEYS = ("type", "decision", "kind", "action_type")
_TYPE_ALIASES = {
    "final_answer": "final_answer", "final": "final_answer", "answer": "final_answer",
    "finish": "final_answer", "respond": "final_answer", "response": "final_answer",
    "reply": "final_answer", "final answer": "final_answer", "done": "final_answer",
    "tool_call": "tool_call", "tool": "tool_call", "call_tool": "tool_call",
    "function_call": "tool_call", "function": "tool_call", "tool_use": "tool_call",
    "call": "tool_call", "use_tool": "tool_call",
    "ask_user": "ask_user", "ask": "ask_user", "question": "ask_user", "clarify": "ask_user",
    "ask_human": "ask_user", "clarification": "ask_user",
}


def str_of(value: Any) -> str:
    """``value`` as text: itself when it is text, JSON otherwise."""
    return value if isinstance(value, str) else "" if value is None else json.dumps(value)


def type_of(obj: dict[str, Any]) -> str | None:
    """The decision type ``obj`` names (an alias of one), if any."""
    for key in _TYPE_KEYS:
        value = obj.get(key)
        if isinstance(value, str):
            alias = _TYPE_ALIASES.get(value.strip().lower())
            if alias:
                return alias
    if "action" in obj and isinstance(obj["action"], str):
        alias = _TYPE_ALIASES.get(obj["action"].strip().lower())
        if alias in ("final_answer", "ask_user"):
            return alias
    return None


def name_of(obj: dict[str, Any]) -> str | None:
    """The tool's name in ``obj``, if any."""
    for key in _NAME_KEYS:
        value = obj.get(key)
        if isinstance(value, str) and value.strip():
            if key == "action" and _TYPE_ALIASES.get(value.strip().lower()) in (
                    "final_answer", "ask_user", "tool_call"):
                continue
            return value.strip()
        if isinstance(value, dict) and isinstance(value.get("name"), str):
            return str(value["name"]).strip()
    return None


def args_of(obj: dict[str, Any]) -> Any:
    """The tool's arguments in ``obj`` ({} when none)."""
    for key in _ARG_KEYS:
        if key in obj:
            return obj[key]
    func = obj.get("function")
    if isinstance(func, dict):
        return args_of(func)
    return {}


def content_of(obj: dict[str, Any]) -> str | None:
    """The text of an answer or a question in ``obj``, if any."""
    for key in _CONTENT_KEYS:
        value = obj.get(key)
        if isinstance(value, str):
            return value
        if value is not None and key != "result":
            return json.dumps(value, ensure_ascii=False)
    for key in _ARG_KEYS:  # {"action": "Final Answer", "action_input": "..."}
        value = obj.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, dict):
            inner = content_of(value)
            if inner is not None:
                return inner
    return None


def choices_of(obj: dict[str, Any]) -> list[str]:
    """The short answers a question offers (at most ten)."""
    for key in ("choices", "options"):
        value = obj.get(key)
        if isinstance(value, list):
            return [str(v) for v in value if v is not None][:10]
    return []


def looks_like_decision(value: Any) -> bool:
    """Whether ``value`` (JSON inside prose) is a decision, not data the prose shows."""
    if isinstance(value, list):
        return any(looks_like_decision(v) for v in value)
    if not isinstance(value, dict):
        return False
    if type_of(value) is not None or isinstance(value.get("tool_calls"), list):
        return True
    function = value.get("function")
    if isinstance(function, dict) and isinstance(function.get("_name"), str):
        return True  # TGI's grammar
    return name_of(value) is not None and any(k in value for k in _ARG_KEYS)
