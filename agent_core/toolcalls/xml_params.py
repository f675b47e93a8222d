"""Formats that write each argument as its own tagged text (the values are typed later by
the tool's schema): Qwen3-Coder / Qwen3.5, Seed-OSS, MiniMax-M2, Step-3, GLM-4.5 / 4.6 /
4.7, ``<function name="…">`` (MiniCPM, Hermes 2 Pro), DeepSeek V3.2 / V4 DSML, Hunyuan.

A value is read only when its own closing tag is there (or the next argument's or the
call's closing tag ends it): one that runs to the end of the text was cut off, and its call
is not run. The closing tags of the call itself may be missing at the very end.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from itertools import islice

from .. import _jsonscan
from .._lazyre import Pattern, lazy
from .base import (
    MAX_CALLS,
    Call,
    Found,
    arguments_of,
    attribute,
    first_word,
    text_value,
    unreadable,
)

_Name = Callable[[str], "str | None"]


def _by_name(attrs: str) -> str | None:
    return attribute(attrs, "name")


def _cdata(value: str) -> str:
    stripped = value.strip()
    if stripped.startswith("<![CDATA[") and stripped.endswith("]]>"):
        return stripped[9:-3]
    return text_value(value)


def _invocations(rule: str, invoke: Pattern, parameter: Pattern,
                 opening: Pattern, text: str, *, name_of: _Name = _by_name,
                 key_of: _Name = _by_name) -> Found | None:
    """The calls ``invoke`` finds (its groups: the tag's attributes, the body), their
    arguments by ``parameter`` (the same groups); a call with an argument ``opening`` that
    cannot be read (cut off inside its tag or its value) has no arguments."""
    calls = []
    for m in islice(invoke.finditer(text), MAX_CALLS + 1):
        name, body = name_of(m.group(1)) or "", m.group(2)
        pairs = parameter.findall(body)
        keys = [key_of(key) for key, _ in pairs]
        if len(opening.findall(body)) != len(pairs) or not all(keys):
            calls.append(Call(name, None, f"{rule}: an argument of {name!r} is cut off"))
        elif not pairs and body.strip().startswith("{"):
            # <function=NAME>{"k": "v"}</function>: Llama 3.1's custom tools, Functionary
            json_arguments, problem, _ = arguments_of(body.strip(), name)
            calls.append(Call(name, json_arguments, problem))
        else:
            calls.append(Call(name, {str(k): _cdata(v) for k, (_, v) in zip(keys, pairs,
                                                                           strict=True)},
                              typed=False))
    if not calls:
        return None
    if any(not c.name for c in calls):
        return unreadable(rule, f"{rule}: a call without a tool name")
    return Found(rule, calls)


#: ``<function=NAME>…</function>`` with ``<parameter=KEY>VALUE</parameter>``.
_FUNCTION = lazy(r"<function=([^>\n]{0,200})>(.*?)(?:</function>|(?=<function=)|\Z)", re.S)
_PARAMETER = lazy(r"<parameter=([^>\n]{0,200})>(.*?)(?:</parameter>|(?=<parameter=)|"
                        r"(?=</function>))", re.S)
_PARAMETER_OPENING = lazy("<parameter=")


def _qwen(rule: str, text: str) -> Found | None:
    return _invocations(rule, _FUNCTION, _PARAMETER, _PARAMETER_OPENING, text,
                        name_of=first_word, key_of=first_word)


class QwenXml:
    """``<tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>``
    (Qwen3-Coder, Qwen3.5, Nemotron 3, Step-3.5), also without the outer tag; and
    ``<function=NAME>{...}</function>`` with JSON arguments (Llama 3.1's custom tools,
    Functionary v3.1)."""

    name, markers = "qwen_xml", ("<function=",)

    def read(self, text: str) -> Found | None:
        return _qwen(self.name, text)


class SeedOss:
    """``<seed:tool_call><function=NAME><parameter=KEY>VALUE</parameter></function>
    </seed:tool_call>`` (ByteDance Seed-OSS)."""

    name, markers = "seed_oss", ("<seed:tool_call>",)
    _block = lazy(r"<seed:tool_call>(.*?)(?:</seed:tool_call>|\Z)", re.S)

    def read(self, text: str) -> Found | None:
        inner = "".join(m.group(1) for m in self._block.finditer(text))
        return _qwen(self.name, inner) or unreadable(
            self.name, "seed_oss: a <seed:tool_call> without a <function=...> in it")


class MiniMax:
    """``<minimax:tool_call><invoke name="NAME"><parameter name="KEY">VALUE</parameter>
    </invoke></minimax:tool_call>`` (MiniMax-M2)."""

    name, markers = "minimax", ("<minimax:tool_call>",)
    _invoke = lazy(r"<invoke\b([^>]{0,400})>(.*?)(?:</invoke>|(?=<invoke\b)|\Z)", re.S)
    _parameter = lazy(r"<parameter\b([^>]{0,400})>(.*?)(?:</parameter>|"
                            r"(?=<parameter\b)|(?=</invoke>))", re.S)
    _opening = lazy(r"<parameter\b")

    def read(self, text: str) -> Found | None:
        inner = text.split("<minimax:tool_call>", 1)[1]
        found = _invocations(self.name, self._invoke, self._parameter, self._opening, inner)
        return found or unreadable(
            self.name, "minimax: a <minimax:tool_call> without an <invoke name=...> in it")


class Step3:
    """``<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke
    name="NAME"><steptml:parameter name="KEY">VALUE</steptml:parameter></steptml:invoke>
    <｜tool_call_end｜><｜tool_calls_end｜>`` (StepFun Step-3)."""

    name, markers = "step3", ("<steptml:invoke",)
    _invoke = lazy(r"<steptml:invoke\b([^>]{0,400})>(.*?)(?:</steptml:invoke>|"
                         r"(?=<steptml:invoke\b)|\Z)", re.S)
    _parameter = lazy(r"<steptml:parameter\b([^>]{0,400})>(.*?)(?:</steptml:parameter>|"
                            r"(?=<steptml:parameter\b)|(?=</steptml:invoke>))", re.S)
    _opening = lazy(r"<steptml:parameter\b")

    def read(self, text: str) -> Found | None:
        return _invocations(self.name, self._invoke, self._parameter, self._opening, text)


class NamedFunction:
    """``<function name="NAME"><param name="KEY">VALUE</param></function>`` (MiniCPM,
    values may be CDATA) and ``<function name="NAME">{...}</function>`` (Hermes 2 Pro)."""

    name, markers = "function_name", ("<function ", "<functionname=", "<function\u0120",
                                      "<function\n")
    _invoke = lazy(r"<function((?:[\s\u0120]|(?=name\s*=))[^>]{0,400})>(.*?)"
                         r"(?:</function>|(?=<function[\s\u0120])|\Z)", re.S)
    _parameter = lazy(r"<param(?:eter)?((?:[\s\u0120]|(?=name\s*=))[^>]{0,400})>(.*?)"
                            r"(?:</param(?:eter)?>|(?=<param)|(?=</function>))", re.S)
    _opening = lazy(r"<param")

    def read(self, text: str) -> Found | None:
        return _invocations(self.name, self._invoke, self._parameter, self._opening, text)


_DSML = r"[｜|]DSML[｜|]"
_DSML_CLOSE_ESCAPED = lazy(r"&lt;(/[｜|]DSML[｜|]parameter>)")


class DeepSeekDsml:
    """DeepSeek V3.2 / V4: ``<｜DSML｜function_calls>`` (or ``tool_calls``) ``<｜DSML｜invoke
    name="NAME"><｜DSML｜parameter name="KEY" string="true">VALUE</｜DSML｜parameter>…``; a
    ``string="false"`` value is JSON."""

    name, markers = "deepseek_dsml", ("<｜DSML｜", "<|DSML|")
    _invoke = lazy(rf"<{_DSML}invoke\b([^>]{{0,400}})>(.*?)(?:</{_DSML}invoke>|"
                         rf"(?=<{_DSML}invoke\b)|\Z)", re.S)
    _parameter = lazy(rf"<{_DSML}parameter\b([^>]{{0,400}})>(.*?)</{_DSML}parameter>",
                            re.S)
    _opening = lazy(rf"<{_DSML}parameter\b")

    def read(self, text: str) -> Found | None:
        found = _invocations(self.name, self._invoke, self._parameter, self._opening, text)
        if found is None:
            return unreadable(self.name, "deepseek_dsml: DSML markup without a readable invoke")
        for call, m in zip(found.calls, self._invoke.finditer(text), strict=False):
            if call.arguments is None:
                continue
            for attrs, raw in self._parameter.findall(m.group(2)):
                key = attribute(attrs, "name") or ""
                if attribute(attrs, "string") == "false":
                    value = _jsonscan.loads_strict(raw.strip())
                    if value is not None or raw.strip() == "null":
                        call.arguments[key] = value
                else:
                    call.arguments[key] = _DSML_CLOSE_ESCAPED.sub(r"<\1", raw)
        return found


class Glm:
    """``<tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>…</tool_call>``
    (GLM-4.5, 4.6, 4.7; Hunyuan 3 puts ``<tool_sep>`` after the name); a call without
    arguments is ``<tool_call>NAME</tool_call>``."""

    name, markers = "glm", ("<tool_call>",)
    _block = lazy(r"<tool_call>(.*?)(?:</tool_call>|(?=<tool_call>)|\Z)", re.S)
    _pair = lazy(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)(?:</arg_value>|"
                       r"(?=<arg_key>)|(?=</tool_call>))", re.S)
    _tool = lazy(r"[A-Za-z_][\w.-]*")

    def read(self, text: str) -> Found | None:
        calls = []
        for m in islice(self._block.finditer(text), MAX_CALLS + 1):
            body = m.group(1)
            head, keyed, rest = body.partition("<arg_key>")
            name = head.strip().removesuffix("<tool_sep>").strip()  # Hunyuan 3 writes one
            if not self._tool.fullmatch(name):
                return None  # another format's <tool_call> (JSON, <function=...>)
            pairs = self._pair.findall(keyed + rest)
            open_end = m.end() == len(text) and not m.group().endswith("</tool_call>")
            if body.count("<arg_key>") != len(pairs) or (open_end and not keyed):
                # a value, a key or the name itself runs to the end: cut off
                calls.append(Call(name, None, f"glm: an argument of {name!r} is cut off"))
            else:
                calls.append(Call(name, {k.strip(): text_value(v) for k, v in pairs},
                                  typed=False))
        return Found(self.name, calls) if calls else None


@lru_cache(maxsize=16)
def _hunyuan_pair(suffix: str) -> re.Pattern[str]:
    s = re.escape(suffix)
    return re.compile(rf"<arg_key:{s}>(.*?)</arg_key:{s}>\s*<arg_value:{s}>(.*?)"
                      rf"(?:</arg_value:{s}>|(?=<arg_key:{s}>)|(?=</tool_call:{s}>))", re.S)


class Hunyuan:
    """``<tool_calls:S><tool_call:S>NAME<tool_sep:S><arg_key:S>KEY</arg_key:S><arg_value:S>
    VALUE</arg_value:S></tool_call:S></tool_calls:S>``, every tag suffixed (``opensource``
    for Hunyuan 3, a hash for HY4, which leaves out ``<tool_sep>``)."""

    name, markers = "hunyuan", ("<tool_call:",)
    _block = lazy(r"<tool_call:(\w{1,40})>(.*?)(?:</tool_call:\1>|(?=<tool_call:\1>)|\Z)",
                        re.S)
    _name = lazy(r"\s*([^<\s]+)\s*")

    def read(self, text: str) -> Found | None:
        calls = []
        for m in islice(self._block.finditer(text), MAX_CALLS + 1):
            suffix, body = m.group(1), m.group(2)
            head = self._name.match(body)
            name = head.group(1) if head else ""
            if not name:
                return unreadable(self.name, "hunyuan: a call without a tool name")
            pairs = _hunyuan_pair(suffix).findall(body)
            ended = m.group().endswith(f"</tool_call:{suffix}>") or m.end() < len(text)
            if body.count(f"<arg_key:{suffix}>") != len(pairs) or not (pairs or ended):
                calls.append(Call(name, None, f"hunyuan: an argument of {name!r} is cut off"))
            else:
                calls.append(Call(name, {k.strip(): text_value(v) for k, v in pairs},
                                  typed=False))
        return Found(self.name, calls) if calls else None
