"""What a reader of one tool-call format finds in a model's text."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Protocol

from .. import _jsonscan
from .._lazyre import Pattern, lazy

#: The most calls one output is read for (more is not a turn: the output is invalid).
MAX_CALLS = 64
_NAME_KEYS = ("name", "tool_name", "function", "tool", "function_name")
_ID_KEYS = ("id", "tool_call_id", "call_id")
_ARG_KEYS = ("arguments", "parameters", "args", "input", "params")


@dataclass(slots=True)
class Call:
    """One tool call as the model wrote it."""

    name: str
    #: None when they could not be read (``problem`` says why): never made up.
    arguments: dict[str, Any] | None
    problem: str = ""
    #: False when every value is the text the model wrote, to be typed by the tool's
    #: schema (the XML-style formats); True when the format carried JSON types.
    typed: bool = True
    call_id: str | None = None


@dataclass(slots=True)
class Found:
    """The calls one reader read (``rule`` names it), or why it could read none."""

    rule: str
    calls: list[Call] = field(default_factory=list)
    repaired: bool = False
    #: Set when the format was recognised but nothing in it could be read.
    problem: str = ""
    #: The answer the format marks as such (harmony's final channel), when no call.
    answer: str | None = None


class Reader(Protocol):
    """A reader of one format. ``markers``: a text holds one of them whenever the format
    can be in it (a cheap test before any parsing); ``read``: what is there, or None when
    the text is not this format after all."""

    @property
    def name(self) -> str: ...

    @property
    def markers(self) -> tuple[str, ...]: ...

    def read(self, text: str) -> Found | None: ...


def unreadable(rule: str, problem: str) -> Found:
    """The format was recognised and nothing in it could be read."""
    return Found(rule, problem=problem)


def arguments_of(raw: Any, name: str) -> tuple[dict[str, Any] | None, str, bool]:
    """A call's arguments from what the model wrote (an object, JSON text, nothing): the
    arguments (None when unreadable), the problem, and whether they needed repair."""
    if raw is None:
        return {}, "", False
    if isinstance(raw, dict):
        return raw, "", False
    if isinstance(raw, str):
        if not raw.strip():
            return {}, "", False
        loaded = _jsonscan.loads_arguments(raw)
        if loaded is None:
            return None, f"the arguments of {name!r} are not readable JSON: {raw[:120]}", False
        value, repaired = loaded
        if isinstance(value, dict):
            return value, "", repaired
    return None, f"the arguments of {name!r} are not a JSON object: {str(raw)[:120]}", False


def call_from_object(obj: Any, rule: str) -> Call:
    """A call from a JSON object such as {"name": ..., "arguments": {...}}."""
    if not isinstance(obj, dict):
        return Call("", None, f"{rule}: expected a JSON object with the tool's name")
    inner = obj.get("function")
    if isinstance(inner, dict):  # OpenAI-shaped {"function": {"name", "arguments"}}
        merged = {**obj, **inner}
        merged.pop("function", None)
        obj = merged
    name = next((obj[k].strip() for k in _NAME_KEYS
                 if isinstance(obj.get(k), str) and obj[k].strip()), "")
    if not name:
        return Call("", None, f"{rule}: the call has no tool name")
    raw = next((obj[k] for k in _ARG_KEYS if k in obj), None)
    arguments, problem, _ = arguments_of(raw, name)
    call_id = next((obj[k] for k in _ID_KEYS if isinstance(obj.get(k), str)), None)
    return Call(name, arguments, problem, call_id=call_id)


def calls_from_json(body: str, rule: str, marker: str = "") -> Found:
    """The calls in a JSON object or array of them (``body`` may be cut short at the
    end, or hold prose after the JSON); ``marker`` (the format's tag) names it in errors."""
    found = _jsonscan.first_value(body)
    if found is None:
        where = f"{marker} is not followed by" if marker else f"{rule}: not"
        return unreadable(rule, f"{where} a readable JSON call: {body.strip()[:120]!r}")
    value, repaired = found
    items = value if isinstance(value, list) else [value]
    calls = [call_from_object(item, rule) for item in items]
    if not calls:
        return unreadable(rule, f"{rule}: the list of calls is empty")
    return Found(rule, calls, repaired)


def each_block(pattern: Pattern, text: str, rule: str,
               read_body: Callable[[str], Found]) -> Found | None:
    """The calls of every block ``pattern`` finds (its first group is the body, read by
    ``read_body``); the first block that cannot be read decides; None when no block."""
    calls: list[Call] = []
    repaired, seen = False, False
    for m in islice(pattern.finditer(text), MAX_CALLS + 1):
        seen = True
        found = read_body(m.group(1))
        if found.problem:
            return found
        calls += found.calls
        repaired = repaired or found.repaired
    return Found(rule, calls, repaired) if seen else None


#: One attribute of a tag, its value quoted or bare: a quoted value is consumed whole, so
#: what it holds (``note='name="x"'``) is never taken for another attribute.
_ATTRIBUTE = lazy(r"([^\s=\"'\u0120]+)\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s\"'>]+))")


def attribute(attrs: str, key: str) -> str | None:
    """The value of attribute ``key`` in a tag's attributes (``name="x" id="1"``), quoted or
    bare; None when it is not there. Other attributes never leak into it."""
    for m in _ATTRIBUTE.finditer(attrs):
        if m.group(1) == key:
            value = next(g for g in m.groups()[1:] if g is not None)
            return html.unescape(value).strip()
    return None


def first_word(raw: str) -> str:
    """The name in ``<function=NAME …>``: its first word, quotes aside."""
    m = re.match(r"\s*[\"']?([^\s\"'>]*)", raw)
    return html.unescape(m.group(1)) if m else ""


def text_value(raw: str) -> str:
    """A parameter's text as written: one leading and one trailing newline dropped."""
    if raw.startswith("\n"):
        raw = raw[1:]
    if raw.endswith("\n"):
        raw = raw[:-1]
    return raw

