"""Formats whose calls are JSON inside a model's own tags or tokens.

Each reader is one format; ``markers`` is what must be in a text for the format to be there.
"""

from __future__ import annotations

import re
from itertools import islice

from .. import _jsonscan
from .._lazyre import Pattern, lazy
from .base import (
    MAX_CALLS,
    Call,
    Found,
    arguments_of,
    call_from_object,
    calls_from_json,
    each_block,
    unreadable,
)
from .pythonic import read_calls


class TaggedJson:
    """A format whose blocks (``_block``'s first group) each hold a JSON call or a list of
    them; subclasses say which blocks."""

    name: str
    markers: tuple[str, ...]
    _block: Pattern

    def read(self, text: str) -> Found | None:
        return each_block(self._block, text, self.name,
                          lambda body: calls_from_json(body, self.name, self.markers[0]))


class HermesTags(TaggedJson):
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes, Qwen2.5,
    Qwen3), one block per call; the closing tag may be cut off at the end."""

    name, markers = "hermes_tags", ("<tool_call>",)
    _block = lazy(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|(?=<tool_call>)|\Z)", re.S)


class LongCat(TaggedJson):
    """``<longcat_tool_call>{...}</longcat_tool_call>`` (LongCat-Flash)."""

    name, markers = "longcat", ("<longcat_tool_call>",)
    _block = lazy(r"<longcat_tool_call>\s*(.*?)\s*(?:</longcat_tool_call>|\Z)", re.S)


class TaggedList(TaggedJson):
    """``<tool_calls>[{...}, ...]</tool_calls>`` (Jamba, Hunyuan A13B, Apriel); a block of
    tags is another format's (Hunyuan 3's ``<tool_call>NAME<tool_sep>…``)."""

    name, markers = "tool_calls_tag", ("<tool_calls>",)
    _block = lazy(r"<tool_calls>\s*(.*?)\s*(?:</tool_calls>|\Z)", re.S)

    def read(self, text: str) -> Found | None:
        first = self._block.search(text)
        if first is not None and first.group(1).startswith("<"):
            return None
        return super().read(text)


class Nemotron(TaggedJson):
    """``<TOOLCALL>[{"name": ..., "arguments": {...}}]</TOOLCALL>`` (Llama-Nemotron)."""

    name, markers = "nemotron", ("<TOOLCALL>",)
    _block = lazy(r"<TOOLCALL>\s*(.*?)\s*(?:</TOOLCALL>|\Z)", re.S)


class CommandA:
    """``<|START_ACTION|>[{"tool_call_id": "0", "tool_name": ..., "parameters": {...}}]
    <|END_ACTION|>`` (Cohere Command A / R7B); its ``<|START_RESPONSE|>`` is the answer."""

    name, markers = "command_a", ("<|START_ACTION|>", "<|START_RESPONSE|>")
    _block = lazy(r"<\|START_ACTION\|>\s*(.*?)\s*(?:<\|END_ACTION\|>|\Z)", re.S)
    _answer = lazy(r"<\|START_RESPONSE\|>(.*?)(?:<\|END_RESPONSE\|>|\Z)", re.S)

    def read(self, text: str) -> Found | None:
        found = each_block(self._block, text, self.name,
                           lambda body: calls_from_json(body, self.name, "<|START_ACTION|>"))
        if found is not None:
            return found
        answer = self._answer.search(text)
        return Found(self.name, answer=answer.group(1).strip()) if answer else None


class Granite(TaggedJson):
    """``<|tool_call|>[{...}, ...]`` (IBM Granite 3.x)."""

    name, markers = "granite", ("<|tool_call|>",)
    _block = lazy(r"<\|tool_call\|>\s*(.*?)\s*(?=<\|tool_call\|>|<\|end_of_text\|>|\Z)",
                        re.S)


class GraniteFunctionCall(TaggedJson):
    """``<function_call> {...}`` (Granite-20B-FunctionCalling), one per call."""

    name, markers = "granite_fc", ("<function_call>",)
    _block = lazy(r"<function_call>\s*(.*?)\s*(?=<function_call>|\Z)", re.S)


class Functools(TaggedJson):
    """``functools[{...}, ...]`` (Phi-4-mini)."""

    name, markers = "phi4_functools", ("functools[",)
    _block = lazy(r"functools(\[.*?)(?=functools\[|\Z)", re.S)


class InternLM(TaggedJson):
    """``<|action_start|><|plugin|>{"name": ..., "parameters": {...}}<|action_end|>``
    (InternLM2 / 2.5)."""

    name, markers = "internlm", ("<|action_start|><|plugin|>",)
    _block = lazy(r"<\|action_start\|><\|plugin\|>\s*(.*?)\s*(?:<\|action_end\|>|\Z)",
                        re.S)


class Mistral:
    """``[TOOL_CALLS][{...}, ...]`` and, since tokenizer v11, ``[TOOL_CALLS]name[ARGS]{...}``
    (Mistral, Mixtral, Ministral, Devstral)."""

    name, markers = "mistral", ("[TOOL_CALLS]",)
    _named = lazy(r"\[TOOL_CALLS\]\s*([A-Za-z_][\w.-]*)\s*(?:\[CALL_ID\]\s*\w+\s*)?"
                        r"\[ARGS\]\s*(.*?)\s*(?=\[TOOL_CALLS\]|</s>|\Z)", re.S)

    def read(self, text: str) -> Found | None:
        named = list(islice(self._named.finditer(text), MAX_CALLS + 1))
        if named:
            calls = []
            for m in named:
                arguments, problem, _ = arguments_of(m.group(2), m.group(1))
                calls.append(Call(m.group(1), arguments, problem))
            return Found(self.name, calls)
        return calls_from_json(text.split("[TOOL_CALLS]", 1)[1], self.name, "[TOOL_CALLS]")


class LlamaTag:
    """``<|python_tag|>{"name": ..., "parameters": {...}}`` (Llama 3.1 / 3.2 / 3.3), several
    separated by ``;``."""

    name, markers = "llama_tag", ("<|python_tag|>",)
    _end = lazy(r"<\|(?:eom_id|eot_id|end_of_text)\|>")

    def read(self, text: str) -> Found | None:
        body = self._end.sub("", text.split("<|python_tag|>", 1)[1])
        if not body.lstrip().startswith("{"):  # a built-in: brave_search.call(query="...")
            return read_calls(body, self.name)
        calls: list[Call] = []
        for start, end in _jsonscan.balanced_spans(body, "{"):
            loaded = _jsonscan.loads_arguments(body[start:end])
            if loaded is None:
                return unreadable(self.name, f"{self.name}: the call is not readable JSON: "
                                             f"{body[start:end][:120]}")
            calls.append(call_from_object(loaded[0], self.name))
        if not calls:
            return unreadable(self.name, "<|python_tag|> is not followed by a JSON call")
        return Found(self.name, calls)


class GigaChat(TaggedJson):
    """``<|function_call|>{"name", "arguments"}`` (GigaChat 3.1) and ``function call
    <|role_sep|>\n{...}`` (GigaChat 3)."""

    name, markers = "gigachat", ("<|function_call|>", "function call<|role_sep|>")
    _block = lazy(r"(?:<\|function_call\|>|function call<\|role_sep\|>)\s*(.*?)\s*"
                        r"(?=<\|function_call\|>|<\|message_sep\|>|\Z)", re.S)


class Apertus:
    """``<|tools_prefix|>[{"NAME": {...arguments}}, ...]<|tools_suffix|>`` (Swiss AI
    Apertus): each call an object whose one key is the tool's name."""

    name, markers = "apertus", ("<|tools_prefix|>",)
    _block = lazy(r"<\|tools_prefix\|>\s*(.*?)\s*(?:<\|tools_suffix\|>|\Z)", re.S)

    def read(self, text: str) -> Found | None:
        return each_block(self._block, text, self.name, self._body)

    def _body(self, body: str) -> Found:
        found = _jsonscan.first_value(body)
        if found is None:
            return unreadable(self.name, f"<|tools_prefix|> is not followed by a readable "
                                         f"JSON call: {body.strip()[:120]!r}")
        value, repaired = found
        calls = []
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict) and len(item) == 1 and "name" not in item:
                [(name, raw)] = item.items()
                arguments, problem, _ = arguments_of(raw, name)
                calls.append(Call(name, arguments, problem))
            else:
                calls.append(call_from_object(item, self.name))
        if not calls:
            return unreadable(self.name, "apertus: the list of calls is empty")
        return Found(self.name, calls, repaired)


class AnswerTag:
    """``<answer>…</answer>`` around the answer (Hunyuan, after its ``<think>``)."""

    name, markers = "answer_tag", ("<answer>",)
    _block = lazy(r"<answer>(.*?)(?:</answer>|\Z)", re.S)

    def read(self, text: str) -> Found | None:
        found = self._block.search(text)
        return Found(self.name, answer=found.group(1).strip()) if found else None
