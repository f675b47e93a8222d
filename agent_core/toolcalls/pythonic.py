"""Calls written as Python: ``[get_weather(city="Paris"), calc(a=1)]`` (Llama 4, Llama 3.2's
pythonic style, LFM2 and several fine-tunes), bare or in ``<|python_start|>…<|python_end|>``.
Read with Python's own ``ast`` (literals only, never evaluated)."""

from __future__ import annotations

import ast
import re
from itertools import islice
from typing import Any

from .._lazyre import lazy
from .base import Call, Found, calls_from_json, each_block, unreadable
from .recipients import FunctionsPrefix

#: A whole output that is a list of calls (``[name(`` … ``)]``), or one call (``name(k=``
#: … ``)``: keywords only, so ``print(x)`` in an answer is not taken for one).
_BARE = lazy(r"^\s*[A-Za-z_][\w.]*\s*\(\s*[A-Za-z_]\w*\s*=.*\)\s*$", re.S)
_TOOL_CODE = lazy(r"```tool_code[ \t]*\r?\n(.*?)(?:```|\Z)", re.S)
_TAGS = lazy(r"<\|python_start\|>(.*?)(?:<\|python_end\|>|\Z)", re.S)
_MAX = 20_000
#: A list of calls begins here.
_LIST_HEAD = lazy(r"\[\s*[A-Za-z_][\w.]*\s*\(")
_SIGNIFICANT = lazy(r"[\\\"'()\[\]{}]")


def read_calls(source: str, rule: str) -> Found:
    """The calls in ``source``, a Python list of calls (or one call)."""
    tree = _parse(source, "eval", rule)
    if isinstance(tree, Found):
        return tree
    assert isinstance(tree, ast.Expression)
    body = tree.body
    return _calls(body.elts if isinstance(body, ast.List | ast.Tuple) else [body], rule)


def read_statements(source: str, rule: str) -> Found:
    """The calls in ``source``, one Python call a line (OLMo 3)."""
    tree = _parse(source, "exec", rule)
    if isinstance(tree, Found):
        return tree
    assert isinstance(tree, ast.Module)
    items: list[ast.expr] = []
    for statement in tree.body:
        if not isinstance(statement, ast.Expr):
            return unreadable(rule, f"{rule}: {ast.unparse(statement)[:80]} is not a call")
        items.append(statement.value)
    return _calls(items, rule) if items else unreadable(rule, f"{rule}: no call in it")


def _parse(source: str, mode: str, rule: str) -> ast.AST | Found:
    source = source.strip()
    if len(source) > _MAX:
        return unreadable(rule, f"{rule}: the calls are too long to read")
    try:
        return ast.parse(source, mode=mode)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    renamed = _keywords_renamed(source)  # book_flight(from="SFO"): a keyword as a name
    try:
        if renamed is not None:
            return ast.parse(renamed, mode=mode)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    return unreadable(rule, f"{rule}: the calls are not readable Python: {source[:120]}")


#: Python's own words that models use as argument names get this prefix while parsed.
_KEYWORD_PREFIX = "_hermes_keyword_"


def _keywords_renamed(source: str) -> str | None:
    """``source`` with Python keywords used as argument names (``from=``) renamed, strings
    untouched; None when there are none or it cannot be tokenized."""
    import io  # only for such calls: tokenize is not imported at start-up
    import keyword
    import tokenize

    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError, ValueError):
        return None
    renamed = False
    for i, token in enumerate(tokens[1:-1], start=1):
        if token.type == tokenize.NAME and keyword.iskeyword(token.string) \
                and tokens[i - 1].string in ("(", ",") and tokens[i + 1].string == "=":
            tokens[i] = token._replace(string=_KEYWORD_PREFIX + token.string)
            renamed = True
    if not renamed:
        return None
    try:
        return tokenize.untokenize(tokens)
    except ValueError:
        return None


def _calls(items: list[ast.expr], rule: str) -> Found:
    calls = []
    for item in items:
        if not isinstance(item, ast.Call):
            return unreadable(rule, f"{rule}: {ast.unparse(item)[:80]} is not a call")
        name = _name(item.func)
        try:
            if item.args:
                raise ValueError("positional arguments (name each one: key=value)")
            arguments: dict[str, Any] = {kw.arg.removeprefix(_KEYWORD_PREFIX):
                                         _literal(kw.value)
                                         for kw in item.keywords if kw.arg is not None}
        except ValueError as exc:
            calls.append(Call(name, None, f"{rule}: the arguments of {name!r} are not "
                                          f"literals: {exc}"))
            continue
        calls.append(Call(name, arguments))
    return Found(rule, calls)


def _list_end(text: str, start: int) -> int | None:
    """Where the ``[`` at ``start`` is closed (just past its ``]``), Python strings aside;
    None when it never is."""
    depth, quote, escaped_at = 0, "", -2
    for m in _SIGNIFICANT.finditer(text, start):
        ch, at = m.group(), m.start()
        if quote:
            if ch == "\\" and at != escaped_at + 1:
                escaped_at = at
            elif ch == quote and at != escaped_at + 1:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return at + 1 if ch == "]" else None
    return None


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
    """The output (reasoning aside) is a list of Python calls, or begins with one (prose
    after it is the calls' commentary), or ends with one after prose (LFM2.5)."""

    name, markers = "pythonic", ("(",)

    def read(self, text: str) -> Found | None:
        text = text.strip()
        head = text[:1]
        if head == "[":
            if not _LIST_HEAD.match(text):
                return None
            end = _list_end(text, 0)
            if end is None:
                return unreadable(self.name, "pythonic: the list of calls is cut off")
            return read_calls(text[:end], self.name)
        if text.endswith("]") and len(text) < _MAX:
            for m in islice(_LIST_HEAD.finditer(text), 4):
                if _list_end(text, m.start()) == len(text):
                    found = read_calls(text[m.start():], self.name)
                    return None if found.problem else found  # prose after all
            return None
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


class Olmo3:
    """``<function_calls>get_weather(city="Paris")\nget_time()</function_calls>`` (OLMo 3),
    one Python call a line."""

    name, markers = "olmo3", ("<function_calls>",)
    _block = lazy(r"<function_calls>(.*?)(?:</function_calls>|\Z)", re.S)

    def read(self, text: str) -> Found | None:
        return each_block(self._block, text, self.name, self._body)

    def _body(self, body: str) -> Found:
        if body.lstrip().startswith("functions."):  # llama-cpp-python's functions.NAME:
            found = FunctionsPrefix().read(body)
            if found is not None:
                return Found(self.name, found.calls)
        return read_statements(body, self.name)


class Lfm:
    """``<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>`` (Liquid LFM2),
    Python calls or a JSON list."""

    name, markers = "lfm2", ("<|tool_call_start|>",)
    _block = lazy(r"<\|tool_call_start\|>(.*?)(?:<\|tool_call_end\|>|\Z)", re.S)

    def read(self, text: str) -> Found | None:
        return each_block(self._block, text, self.name, self._body)

    def _body(self, body: str) -> Found:
        if body.strip().startswith(("{", "[{")):
            return calls_from_json(body, self.name, self.markers[0])
        return read_calls(body, self.name)
