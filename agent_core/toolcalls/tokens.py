"""Formats written in a model's special tokens: Kimi K2, DeepSeek V3 / R1 / V3.1, gpt-oss
(harmony)."""

from __future__ import annotations

import re
from itertools import islice

from .._lazyre import lazy
from .base import MAX_CALLS, Call, Found, arguments_of, unreadable


def _call(name: str, raw: str) -> Call:
    arguments, problem, _ = arguments_of(raw, name)
    return Call(name, arguments, problem)


def _unfenced(raw: str) -> str:
    """``raw`` without a ```json fence around it."""
    raw = raw.strip()
    if raw.startswith("```"):
        raw = raw.split("\n", 1)[1] if "\n" in raw else raw[3:].removeprefix("json")
    return raw.removesuffix("```").strip()


class Kimi:
    """``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0
    <|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>``."""

    name, markers = "kimi_k2", ("<|tool_call_begin|>",)
    _call = lazy(r"<\|tool_call_begin\|>\s*(?:functions\.)?([\w.-]+?)(?::(\d+))?\s*"
                       r"<\|tool_call_argument_begin\|>\s*(.*?)\s*"
                       r"(?:<\|tool_call_end\|>|(?=<\|tool_call_begin\|>)|"
                       r"<\|tool_calls_section_end\|>|\Z)", re.S)

    def read(self, text: str) -> Found | None:
        calls: list[Call] = []
        for m in islice(self._call.finditer(text), MAX_CALLS + 1):
            call = _call(m.group(1), m.group(3))
            call.call_id = f"functions.{m.group(1)}:{m.group(2) or len(calls)}"
            calls.append(call)
        return Found(self.name, calls) if calls else unreadable(
            self.name, "kimi_k2: a tool call section without a readable call")


class DeepSeek:
    """``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json
    {...}```<｜tool▁call▁end｜>`` (V3, R1; the R1 distills may open with ``<｜tool▁calls｜>``)
    and ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}`` (V3.1)."""

    name = "deepseek"
    markers = ("<｜tool▁call▁begin｜>", "<｜tool▁calls▁begin｜>", "<｜tool▁calls｜>")
    _call = lazy(r"(?:<｜tool▁call▁begin｜>|<｜tool▁calls｜>)\s*"
                       r"(?:(?:function|tool)\s*<｜tool▁sep｜>\s*"
                       r"([\w.-]+)|([\w.-]+)\s*<｜tool▁sep｜>)\s*(.*?)\s*"
                       r"(?:<｜tool▁call▁end｜>|(?=<｜tool▁call▁begin｜>)|<｜tool▁calls▁end｜>|\Z)",
                       re.S)

    def read(self, text: str) -> Found | None:
        calls: list[Call] = []
        for m in islice(self._call.finditer(text), MAX_CALLS + 1):
            calls.append(_call(m.group(1) or m.group(2), _unfenced(m.group(3))))
        return Found(self.name, calls) if calls else unreadable(
            self.name, "deepseek: tool call tokens without a readable call")


class Harmony:
    """gpt-oss: ``<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}
    <|call|>``. A recipient makes a call on whatever channel it stands (analysis included),
    in the role header (``<|start|>assistant to=functions.NAME<|channel|>…``) or the
    channel's, with or without ``<|constrain|>``; the ``final`` channel is the answer, and
    commentary with no recipient (a preamble) is the answer when there is nothing else. The
    analysis channel without a recipient is reasoning (cut before any reader looks)."""

    name, markers = "harmony", ("<|channel|>", "<|message|>")
    _message = lazy(r"(?:to=([\w.-]+)[^<]*)?<\|channel\|>\s*(\w+)([^<]*)"
                          r"(?:<\|constrain\|>[^<]*)?<\|message\|>(.*?)"
                          r"(?:<\|call\|>|<\|end\|>|<\|return\|>|(?=<\|start\|>)|\Z)", re.S)
    _recipient = lazy(r"to=([\w.-]+)")

    def read(self, text: str) -> Found | None:
        calls: list[Call] = []
        final: str | None = None
        preamble: list[str] = []
        for m in islice(self._message.finditer(text), MAX_CALLS + 1):
            header = self._recipient.search(m.group(3))
            recipient = m.group(1) or (header.group(1) if header else "")
            if recipient and recipient != "assistant":
                calls.append(_call(recipient.removeprefix("functions."), m.group(4)))
            elif m.group(2) == "final":
                final = m.group(4)
            elif m.group(2) == "commentary":
                preamble.append(m.group(4))
        if calls:
            return Found(self.name, calls)
        if final is not None or preamble:
            return Found(self.name, answer=(final if final is not None else "\n".join(preamble)))
        if self._recipient.search(text):
            return unreadable(self.name, "harmony: a message to a tool that is cut off")
        return None
