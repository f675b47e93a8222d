"""Calls written as Python: ``[get_weather(city="Paris"), calc(a=1)]`` (Llama 4, Llama 3.2's
pythonic style, LFM2 and several fine-tunes), bare or in ``<|python_start|>…<|python_end|>``.
Read with Python's own ``ast`` (literals only, never evaluated)."""

from __future__ import annotations

import ast
import re
from typing import Any

from .base import Call, Found, calls_from_json, each_block, unreadable

#: A whole output that is a list of calls (``[name(`` … ``)]``), or one call (``name(k=``
#: … ``)``: keywords only, so ``print(x)`` in an answer is not taken for one).
_WHOLE = re.compile(r"^\s*\[\s*[A-Za-z_][\w.]*\s*\(.*\)\s*\]\s*$", re.S)
_BARE = re.compile(r"^\s*[A-Za-z_][\w.]*\s*\(\s*[A-Za-z_]\w*\s*=.*\)\s*$", re.S)
_TOOL_CODE = re.compile(r"```tool_code[ \t]*\r?\n(.*?)(?:```|\Z)", re.S)
_TAGS = re.compile(r"<\|python_start\|>(.*?)(?:<\|python_end\|>|\Z)", re.S)
_MAX = 20_000


def read_calls(source: str, rule: str) -> Found:
    """The calls in ``source``, a Python list of calls (or one call)."""
    source = source.strip()
    if len(source) > _MAX:
        return unreadable(rule, f"{rule}: the calls are too long to read")
    try:
        tree = ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return unreadable(rule, f"{rule}: the calls are not readable Python: {source[:120]}")
    items = tree.elts if isinstance(tree, ast.List | ast.Tuple) else [tree]
    calls = []
    for item in items:
        if not isinstance(item, ast.Call):
            return unreadable(rule, f"{rule}: {ast.unparse(item)[:80]} is not a call")
        name = _name(item.func)
        try:
            if item.args:
                raise ValueError("positional arguments (name each one: key=value)")
            arguments: dict[str, Any] = {kw.arg: _literal(kw.value) for kw in item.keywords
                                         if kw.arg is not None}
        except ValueError as exc:
            calls.append(Call(name, None, f"{rule}: the arguments of {name!r} are not "
                                          f"literals: {exc}"))
            continue
        calls.append(Call(name, arguments))
    return Found(rule, calls)


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        if func.attr == "call" and isinstance(func.value, ast.Name):
            return func.value.id  # Llama 3.1's built-ins: brave_search.call(query=...)
        return func.attr  # functions.get_weather(...)
    return ast.unparse(func)[:60]


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Name) and node.id in ("true", "false", "null"):  # JSON-isms
        return {"true": True, "false": False, "null": None}[node.id]
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        raise ValueError(ast.unparse(node)[:80]) from None


class Pythonic:
    """The whole output (reasoning aside) is a list of Python calls."""

    name, markers = "pythonic", ("(",)

    def read(self, text: str) -> Found | None:
        head = text.lstrip()[:1]
        if head == "[" and _WHOLE.match(text):
            return read_calls(text, self.name)
        if head.isalpha() and len(text) < _MAX and _BARE.match(text):
            found = read_calls(text, self.name)
            return None if found.problem else found  # prose after all
        return None


class ToolCode:
    """```` ```tool_code\nget_weather(city="Paris")\n``` ```` (Gemma)."""

    name, markers = "tool_code", ("```tool_code",)

    def read(self, text: str) -> Found | None:
        return each_block(_TOOL_CODE, text, self.name, lambda body: read_calls(body, self.name))


class PythonTags:
    """``<|python_start|>[...]<|python_end|>`` (Llama 4)."""

    name, markers = "python_tags", ("<|python_start|>",)

    def read(self, text: str) -> Found | None:
        return each_block(_TAGS, text, self.name, lambda body: read_calls(body, self.name))


class Lfm:
    """``<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>`` (Liquid LFM2),
    Python calls or a JSON list."""

    name, markers = "lfm2", ("<|tool_call_start|>",)
    _block = re.compile(r"<\|tool_call_start\|>(.*?)(?:<\|tool_call_end\|>|\Z)", re.S)

    def read(self, text: str) -> Found | None:
        return each_block(self._block, text, self.name, self._body)

    def _body(self, body: str) -> Found:
        if body.strip().startswith(("{", "[{")):
            return calls_from_json(body, self.name, self.markers[0])
        return read_calls(body, self.name)
