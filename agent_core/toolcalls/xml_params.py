"""Formats that write each argument as its own tagged text (the values are typed later by
the tool's schema): Qwen3-Coder / Qwen3.5, Seed-OSS, MiniMax-M2, Step-3, GLM-4.5 / 4.6."""

from __future__ import annotations

import html
import re

from .base import Call, Found, arguments_of, text_value, unreadable


def _parameters(pattern: re.Pattern[str], body: str) -> dict[str, str]:
    return {html.unescape(m.group(1).strip().strip("\"'")): text_value(m.group(2))
            for m in pattern.finditer(body)}


def _invocations(rule: str, invoke: re.Pattern[str], parameter: re.Pattern[str],
                 opening: str, text: str) -> Found | None:
    """The calls ``invoke`` finds, their arguments by ``parameter``; a call with a parameter
    tag (``opening``) that cannot be read (cut off inside its name) has no arguments."""
    calls = []
    for m in invoke.finditer(text):
        name, body = m.group(1).strip().strip("\"'"), m.group(2)
        arguments = _parameters(parameter, body)
        if body.count(opening) != len(parameter.findall(body)):
            calls.append(Call(name, None, f"{rule}: an argument of {name!r} is cut off"))
        elif not arguments and body.strip().startswith("{"):
            # <function=NAME>{"k": "v"}</function>: Llama 3.1's custom tools, Functionary
            json_arguments, problem, _ = arguments_of(body.strip(), name)
            calls.append(Call(name, json_arguments, problem))
        else:
            calls.append(Call(name, arguments, typed=False))
    if not calls:
        return None
    if any(not c.name for c in calls):
        return unreadable(rule, f"{rule}: a call without a tool name")
    return Found(rule, calls)


#: ``<function=NAME>…</function>`` with ``<parameter=KEY>VALUE</parameter>``; either end
#: tag may be cut off at the very end of the output.
_FUNCTION = re.compile(r"<function=([^>\n]{0,200})>(.*?)(?:</function>|(?=<function=)|\Z)", re.S)
_PARAMETER = re.compile(r"<parameter=([^>\n]{0,200})>(.*?)(?:</parameter>|(?=<parameter=)|"
                        r"(?=</function>)|\Z)", re.S)


class QwenXml:
    """``<tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>``
    (Qwen3-Coder, Qwen3.5), also without the outer tag; and ``<function=NAME>{...}
    </function>`` with JSON arguments (Llama 3.1's custom tools, Functionary v3.1)."""

    name, markers = "qwen_xml", ("<function=",)

    def read(self, text: str) -> Found | None:
        return _invocations(self.name, _FUNCTION, _PARAMETER, "<parameter=", text)


class SeedOss:
    """``<seed:tool_call><function=NAME><parameter=KEY>VALUE</parameter></function>
    </seed:tool_call>`` (ByteDance Seed-OSS)."""

    name, markers = "seed_oss", ("<seed:tool_call>",)
    _block = re.compile(r"<seed:tool_call>(.*?)(?:</seed:tool_call>|\Z)", re.S)

    def read(self, text: str) -> Found | None:
        inner = "".join(m.group(1) for m in self._block.finditer(text))
        return _invocations(self.name, _FUNCTION, _PARAMETER, "<parameter=", inner) or unreadable(
            self.name, "seed_oss: a <seed:tool_call> without a <function=...> in it")


class MiniMax:
    """``<minimax:tool_call><invoke name="NAME"><parameter name="KEY">VALUE</parameter>
    </invoke></minimax:tool_call>`` (MiniMax-M2)."""

    name, markers = "minimax", ("<minimax:tool_call>",)
    _invoke = re.compile(r"<invoke\s+name=([^>]{0,200})>(.*?)(?:</invoke>|(?=<invoke\s)|\Z)", re.S)
    _parameter = re.compile(r"<parameter\s+name=([^>]{0,200})>(.*?)(?:</parameter>|"
                            r"(?=<parameter\s)|(?=</invoke>)|\Z)", re.S)

    def read(self, text: str) -> Found | None:
        inner = text.split("<minimax:tool_call>", 1)[1]
        found = _invocations(self.name, self._invoke, self._parameter, "<parameter", inner)
        return found or unreadable(
            self.name, "minimax: a <minimax:tool_call> without an <invoke name=...> in it")


class Step3:
    """``<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke
    name="NAME"><steptml:parameter name="KEY">VALUE</steptml:parameter></steptml:invoke>
    <｜tool_call_end｜><｜tool_calls_end｜>`` (StepFun Step-3)."""

    name, markers = "step3", ("<steptml:invoke",)
    _invoke = re.compile(r"<steptml:invoke\s+name=([^>]{0,200})>(.*?)(?:</steptml:invoke>|"
                         r"(?=<steptml:invoke\s)|\Z)", re.S)
    _parameter = re.compile(r"<steptml:parameter\s+name=([^>]{0,200})>(.*?)(?:</steptml:parameter>|"
                            r"(?=<steptml:parameter\s)|(?=</steptml:invoke>)|\Z)", re.S)

    def read(self, text: str) -> Found | None:
        return _invocations(self.name, self._invoke, self._parameter, "<steptml:parameter",
                            text)


class Glm:
    """``<tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>…</tool_call>``
    (GLM-4.5, GLM-4.6); a call without arguments is ``<tool_call>NAME</tool_call>``."""

    name, markers = "glm", ("<tool_call>",)
    _block = re.compile(r"<tool_call>(.*?)(?:</tool_call>|(?=<tool_call>)|\Z)", re.S)
    _pair = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)(?:</arg_value>|\Z)",
                       re.S)
    _tool = re.compile(r"[A-Za-z_][\w.-]*")

    def read(self, text: str) -> Found | None:
        calls = []
        for body in self._block.findall(text):
            head, keyed, rest = body.partition("<arg_key>")
            name = head.strip()
            if not self._tool.fullmatch(name):
                return None  # another format's <tool_call> (JSON, <function=...>)
            pairs = self._pair.findall(keyed + rest)
            if body.count("<arg_key>") != len(pairs):
                calls.append(Call(name, None, f"glm: an argument of {name!r} is cut off"))
            else:
                calls.append(Call(name, {k.strip(): text_value(v) for k, v in pairs},
                                  typed=False))
        return Found(self.name, calls) if calls else None
