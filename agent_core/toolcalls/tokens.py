"""Formats written in a model's special tokens: Kimi K2, DeepSeek V3 / R1 / V3.1, gpt-oss
(harmony)."""

from __future__ import annotations

import re

from .base import Call, Found, arguments_of, unreadable


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
    _call = re.compile(r"<\|tool_call_begin\|>\s*(?:functions\.)?([\w.-]+?)(?::(\d+))?\s*"
                       r"<\|tool_call_argument_begin\|>\s*(.*?)\s*"
                       r"(?:<\|tool_call_end\|>|(?=<\|tool_call_begin\|>)|"
                       r"<\|tool_calls_section_end\|>|\Z)", re.S)

    def read(self, text: str) -> Found | None:
        calls: list[Call] = []
        for m in self._call.finditer(text):
            call = _call(m.group(1), m.group(3))
            call.call_id = f"functions.{m.group(1)}:{m.group(2) or len(calls)}"
            calls.append(call)
        return Found(self.name, calls) if calls else unreadable(
            self.name, "kimi_k2: a tool call section without a readable call")


class DeepSeek:
    """``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json
    {...}```<｜tool▁call▁end｜>`` (V3, R1) and ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}``
    (V3.1)."""

    name, markers = "deepseek", ("<｜tool▁call▁begin｜>", "<｜tool▁calls▁begin｜>")
    _call = re.compile(r"<｜tool▁call▁begin｜>\s*(?:(?:function|tool)\s*<｜tool▁sep｜>\s*"
                       r"([\w.-]+)|([\w.-]+)\s*<｜tool▁sep｜>)\s*(.*?)\s*"
                       r"(?:<｜tool▁call▁end｜>|(?=<｜tool▁call▁begin｜>)|<｜tool▁calls▁end｜>|\Z)",
                       re.S)
    def read(self, text: str) -> Found | None:
        calls: list[Call] = []
        for m in self._call.finditer(text):
            calls.append(_call(m.group(1) or m.group(2), _unfenced(m.group(3))))
        return Found(self.name, calls) if calls else unreadable(
            self.name, "deepseek: tool call tokens without a readable call")


class Harmony:
    """gpt-oss: ``<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}
    <|call|>`` (the recipient may also come before the channel); the ``final`` channel is
    the answer. The analysis channel is reasoning (cut before any reader looks)."""

    name, markers = "harmony", ("<|channel|>", "<|message|>")
    _call = re.compile(r"(?:to=(?:functions\.)?([\w.-]+)\s*)?<\|channel\|>\s*commentary"
                       r"(?:\s+to=(?:functions\.)?([\w.-]+))?[^<]*(?:<\|constrain\|>\s*\w+\s*)?"
                       r"<\|message\|>(.*?)(?:<\|call\|>|<\|end\|>|(?=<\|start\|>)|\Z)", re.S)
    _final = re.compile(r"<\|channel\|>\s*final\s*<\|message\|>(.*?)"
                        r"(?:<\|return\|>|<\|end\|>|\Z)", re.S)

    def read(self, text: str) -> Found | None:
        calls = [_call(m.group(1) or m.group(2), m.group(3)) for m in self._call.finditer(text)
                 if m.group(1) or m.group(2)]
        if calls:
            return Found(self.name, calls)
        final = self._final.search(text)
        if final:
            return Found(self.name, answer=final.group(1).strip())
        return None
