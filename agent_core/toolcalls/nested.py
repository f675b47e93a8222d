"""Formats whose arguments are trees of tags: MiniMax-M3's namespaced XML and Kimi K3's
XTML. Values are text typed later by the tool's schema (or by the type the tag names); an
element never closed at the end of the text was cut off, and its call is not run."""

from __future__ import annotations

import json
import re
from itertools import islice
from typing import Any

from .._lazyre import lazy
from .base import MAX_CALLS, Call, Found, arguments_of, attribute, text_value, unreadable

#: MiniMax-M3 writes this before every tag of a call, so that text inside values can hold
#: any markup.
MINIMAX_NS = "]<]minimax[>["


def _element(children: list[tuple[str, Any]]) -> dict[str, Any]:
    """Child elements as a dictionary; a name repeated gathers its values in a list (the
    schema makes a list of a wrapper later: ``<items><item>…</item></items>``)."""
    grouped: dict[str, list[Any]] = {}
    for key, value in children:
        grouped.setdefault(key, []).append(value)
    return {key: values[0] if len(values) == 1 else values for key, values in grouped.items()}


class MiniMaxM3:
    """``NS<tool_call>NS<invoke name="NAME">NS<KEY>VALUE NS</KEY>…NS</invoke>NS</tool_call>``
    where NS is ``]<]minimax[>[``; an argument's children make an object, a name repeated a
    list (MiniMax-M3). Read ahead of the ``<tool_call>`` formats it contains."""

    name, markers = "minimax_m3", (MINIMAX_NS,)
    _tag = lazy(re.escape(MINIMAX_NS) + r"<(/?)([\w.:-]{1,100})\b([^>]{0,400})>")

    def read(self, text: str) -> Found | None:
        calls: list[Call] = []
        call: Call | None = None
        # the call's arguments, then each open element: (name, where its text begins,
        # its children)
        stack: list[tuple[str, int, list[tuple[str, Any]]]] = []
        for m in self._tag.finditer(text):
            closing, tag = m.group(1) == "/", m.group(2)
            if tag == "tool_call" or (call is None and tag != "invoke"):
                continue
            if tag == "invoke" and not closing:
                if call is not None:
                    if len(stack) > 1:
                        break  # the previous call is cut off inside an argument
                    call.arguments = _element(stack[0][2])  # only its </invoke> is missing
                call = Call(attribute(m.group(3), "name") or "", {}, typed=False)
                calls.append(call)
                stack = [("invoke", m.end(), [])]
            elif not closing:
                stack.append((tag, m.end(), []))
            elif call is not None and stack and stack[-1][0] == tag:
                name, begins, children = stack.pop()
                value = _element(children) if children else text_value(text[begins:m.start()])
                if stack:
                    stack[-1][2].append((name, value))
                else:
                    call.arguments, call = value if isinstance(value, dict) else {}, None
            elif call is not None:
                call.arguments, call.problem = None, f"minimax_m3: a misplaced </{tag}>"
                call, stack = None, []
        if call is not None:
            if len(stack) == 1:  # only </invoke> is missing
                call.arguments = _element(stack[0][2])
            else:
                call.arguments, call.problem = None, (
                    f"minimax_m3: an argument of {call.name!r} is cut off")
        if not calls:
            return unreadable(self.name, "minimax_m3: markup without an <invoke name=...>")
        if any(not c.name for c in calls):
            return unreadable(self.name, "minimax_m3: a call without a tool name")
        return Found(self.name, calls)


_K3_CALL = lazy(r"<\|open\|>call\b((?:[^<]|<(?!\|)){0,400})<\|sep\|>(.*?)"
                      r"(?:<\|close\|>call<\|sep\|>|(?=<\|open\|>call\b)|\Z)", re.S)
_K3_ARGUMENT = lazy(r"<\|open\|>argument\b((?:[^<]|<(?!\|)){0,400})<\|sep\|>(.*?)"
                          r"<\|close\|>argument<\|sep\|>", re.S)
_K3_JSON = lazy(r"<\|open\|>json\b[^<]{0,400}<\|sep\|>(.*?)<\|close\|>json<\|sep\|>",
                      re.S)
_K3_RESPONSE = lazy(r"<\|open\|>response<\|sep\|>(.*?)(?:<\|close\|>response<\|sep\|>|"
                          r"<\|close\|>message<\|sep\|>|\Z)", re.S)


class KimiK3:
    """Kimi K3's XTML: ``<|open|>tools<|sep|><|open|>call tool="NAME" index="1"<|sep|>
    <|open|>argument key="K" type="number"<|sep|>1.5<|close|>argument<|sep|>…
    <|close|>call<|sep|><|close|>tools<|sep|>`` (or one ``<|open|>json …<|sep|>{…}`` block
    for all the arguments); ``<|open|>response<|sep|>…`` is the answer."""

    name, markers = "kimi_k3", ("<|open|>call", "<|open|>response<|sep|>",
                                "<|close|>message<|sep|>")

    def read(self, text: str) -> Found | None:
        calls = [self._call(m.group(1), m.group(2))
                 for m in islice(_K3_CALL.finditer(text), MAX_CALLS + 1)]
        if calls:
            if any(not c.name for c in calls):
                return unreadable(self.name, "kimi_k3: a call without a tool name")
            return Found(self.name, calls)
        response = _K3_RESPONSE.search(text)
        if response is not None:
            return Found(self.name, answer=response.group(1))
        said, closed, _ = text.partition("<|close|>message<|sep|>")
        return Found(self.name, answer=said) if closed else None

    @staticmethod
    def _call(attrs: str, body: str) -> Call:
        name = attribute(attrs, "tool") or ""
        raw_json = _K3_JSON.search(body)
        if raw_json is not None:
            whole, problem, _ = arguments_of(raw_json.group(1), name)
            return Call(name, whole, problem)
        if "<|open|>json" in body:
            return Call(name, None, f"kimi_k3: the arguments of {name!r} are cut off")
        pairs = _K3_ARGUMENT.findall(body)
        if body.count("<|open|>argument") != len(pairs):
            return Call(name, None, f"kimi_k3: an argument of {name!r} is cut off")
        arguments: dict[str, Any] = {}
        for arg_attrs, raw in pairs:
            key, kind = attribute(arg_attrs, "key") or "", attribute(arg_attrs, "type")
            value: Any = raw
            if kind not in (None, "string"):
                try:
                    value = json.loads(raw)
                except ValueError:
                    value = raw  # as upstream: a malformed typed value stays its text
            arguments[key] = value
        return Call(name, arguments)
