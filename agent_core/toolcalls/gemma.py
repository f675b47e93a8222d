"""Gemma 4's ``<|tool_call>call:NAME{key:value}<tool_call|>`` and FunctionGemma's
``<start_function_call>call:NAME{key:<escape>value<escape>}<end_function_call>``.

The arguments are a dictionary with bare keys; strings sit between the format's own
delimiters (``<|"|>`` or ``<escape>``) and are taken as written (backslashes included),
JSON-quoted and single-quoted strings are also read, numbers, ``true``, ``false``, ``null``,
lists and nested dictionaries as in JSON. Read by a small parser, never repaired: a value,
a key or a number the text ends in was cut off, and its call is not run.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .._lazyre import lazy
from .base import Call, Found, unreadable

_NUMBER = lazy(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_WORD = lazy(r"true|false|null")
_KEY = lazy(r"[^\s:{}\[\],\"'<]+")
_HEAD = lazy(r"\s*call:([A-Za-z_][\w.-]*)\s*")
_JSON_STRING = lazy(r'"(?:[^"\\]|\\.)*"', re.S)
_MAX_DEPTH = 64


class _Cut(Exception):
    """The text ends inside the arguments."""


class _Dictionary:
    """One pass over a Gemma argument dictionary starting at ``text[at] == "{"``."""

    def __init__(self, text: str, quote: str) -> None:
        self.text, self.quote = text, quote

    def skip(self, at: int) -> int:
        while at < len(self.text) and self.text[at] in " \t\r\n":
            at += 1
        if at >= len(self.text):
            raise _Cut
        return at

    def value(self, at: int, depth: int) -> tuple[Any, int]:
        if depth > _MAX_DEPTH:
            raise ValueError("nested too deep")
        text, at = self.text, self.skip(at)
        if text.startswith(self.quote, at):
            return self.delimited(at + len(self.quote), self.quote)
        ch = text[at]
        if ch == "{":
            return self.dictionary(at, depth)
        if ch == "[":
            return self.array(at, depth)
        if ch == '"':
            m = _JSON_STRING.match(text, at)
            if m is None:
                raise _Cut
            return json.loads(m.group()), m.end()
        if ch == "'":
            return self.delimited(at + 1, "'")
        m = _NUMBER.match(text, at) or _WORD.match(text, at)
        if m is None:
            raise ValueError(f"unreadable value at {text[at:at + 20]!r}")
        if m.end() >= len(text):
            raise _Cut  # a number at the very end may have been cut short
        return json.loads(m.group()), m.end()

    def delimited(self, at: int, closing: str) -> tuple[str, int]:
        end = self.text.find(closing, at)
        if end < 0:
            raise _Cut
        return self.text[at:end], end + len(closing)

    def key(self, at: int) -> tuple[str, int]:
        text = self.text
        if text.startswith(self.quote, at):
            return self.delimited(at + len(self.quote), self.quote)
        if text[at] == '"':
            m = _JSON_STRING.match(text, at)
            if m is None:
                raise _Cut
            return json.loads(m.group()), m.end()
        m = _KEY.match(text, at)
        if m is None:
            raise ValueError(f"unreadable key at {text[at:at + 20]!r}")
        if m.end() >= len(text):
            raise _Cut
        return m.group(), m.end()

    def dictionary(self, at: int, depth: int) -> tuple[dict[str, Any], int]:
        result: dict[str, Any] = {}
        at = self.skip(at + 1)
        while self.text[at] != "}":
            key, at = self.key(at)
            at = self.skip(at)
            if self.text[at] != ":":
                raise ValueError(f"no ':' after {key!r}")
            result[key], at = self.value(at + 1, depth + 1)
            at = self.skip(at)
            if self.text[at] == ",":
                at = self.skip(at + 1)
            elif self.text[at] != "}":
                raise ValueError(f"no ',' after {key!r}")
        return result, at + 1

    def array(self, at: int, depth: int) -> tuple[list[Any], int]:
        result: list[Any] = []
        at = self.skip(at + 1)
        while self.text[at] != "]":
            item, at = self.value(at, depth + 1)
            result.append(item)
            at = self.skip(at)
            if self.text[at] == ",":
                at = self.skip(at + 1)
            elif self.text[at] != "]":
                raise ValueError("no ',' between items")
        return result, at + 1


class _CallDictionary:
    """A format of ``OPEN call:NAME{…} CLOSE`` calls."""

    name: str
    markers: tuple[str, ...]
    _quote: str

    def read(self, text: str) -> Found | None:
        opening = self.markers[0]
        calls: list[Call] = []
        at = text.find(opening)
        while at >= 0:
            head = _HEAD.match(text, at + len(opening))
            if head is None or head.end() >= len(text):
                calls.append(Call(head.group(1) if head else "", None,
                                  f"{self.name}: the call is cut off or has no name"))
                break
            name, start = head.group(1), head.end()
            if text[start] != "{":
                calls.append(Call(name, None, f"{self.name}: no arguments after {name!r}"))
                break
            try:
                arguments, end = _Dictionary(text, self._quote).dictionary(start, 0)
            except _Cut:
                calls.append(Call(name, None, f"{self.name}: the arguments of {name!r} are "
                                              "cut off"))
                break
            except (ValueError, IndexError) as exc:
                calls.append(Call(name, None, f"{self.name}: the arguments of {name!r} are "
                                              f"not readable: {exc}"))
                break
            calls.append(Call(name, arguments))
            at = text.find(opening, end)
        if not calls:
            return None
        if any(not c.name for c in calls):
            return unreadable(self.name, f"{self.name}: a call without a tool name")
        return Found(self.name, calls)


class Gemma4(_CallDictionary):
    """``<|tool_call>call:NAME{key:<|"|>text<|"|>,n:1}<tool_call|>`` (Gemma 4)."""

    name, markers, _quote = "gemma4", ("<|tool_call>",), '<|"|>'


class FunctionGemma(_CallDictionary):
    """``<start_function_call>call:NAME{key:<escape>text<escape>}<end_function_call>``
    (FunctionGemma)."""

    name, markers, _quote = "functiongemma", ("<start_function_call>",), "<escape>"
