"""Finding and loading JSON inside model text: strict first, then repaired."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\r?\n?(.*?)(?:```|\Z)", re.DOTALL)
_SMART = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'",
                        "\uff02": '"', "\u00ab": '"', "\u00bb": '"'})


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each ``` fenced block; an unclosed final fence runs to the end."""
    return [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]


#: Fences whose body is a call or JSON (the JSON protocol, Gemma's ```tool_code).
CALL_FENCES = frozenset({"json", "json5", "javascript", "js", "tool_call", "tool_code"})


def without_shown_code(text: str) -> str:
    """``text`` without the code blocks prose shows (a fence that is not JSON's, with text
    around it): markup a model shows while explaining a format is never a call. A whole
    output in one fence is kept (models wrap calls so)."""
    if "```" not in text:
        return text
    blocks = list(_FENCE.finditer(text))
    if not _FENCE.sub("", text).strip():
        return text
    kept, at = [], 0
    for m in blocks:
        lang, body = m.group(1).lower(), m.group(2).lstrip()
        if lang in CALL_FENCES or (not lang and body[:1] in "{["):
            continue
        kept.append(text[at:m.start()])
        at = m.end()
    kept.append(text[at:])
    return "\n".join(kept) if len(kept) > 1 else text


#: Beyond these json-repair is not tried: it slows down badly, and no call looks like that.
_REPAIR_MAX = 100_000
_REPAIR_DEPTH = 64

#: What a scan for JSON looks at: quotes, escapes and brackets (the rest is skipped in C).
_SIGNIFICANT = re.compile(r'[\\"{}\[\]]')


def _structure(text: str) -> Iterator[tuple[str, int]]:
    """The quotes and brackets of ``text`` and where they are, those a backslash escapes
    left out (plain text between them is skipped by the regex, in C)."""
    escaped_at = -2
    for m in _SIGNIFICANT.finditer(text):
        at = m.start()
        if at == escaped_at + 1:
            escaped_at = -2  # an escaped backslash escapes nothing more
            continue
        ch = m.group()
        if ch == "\\":
            escaped_at = at
            continue
        yield ch, at


def balanced_spans(text: str, openers: str = "{[") -> Iterator[tuple[int, int]]:
    """(start, end) of each top-level balanced {...} or [...] span, string-aware.

    An opener whose span never closes yields (start, len(text)), so a missing final brace
    can still be repaired.
    """
    depth, start, in_str = 0, -1, False
    for ch, at in _structure(text):
        if in_str:
            in_str = ch != '"'
        elif depth == 0:  # quotes in the prose around JSON do not count
            if ch in openers:
                depth, start = 1, at
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                yield start, at + 1
    if depth > 0:
        yield start, len(text)


def loads_strict(text: str) -> Any:
    """json.loads, or None when the text is not valid JSON."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def loads_repaired(text: str) -> Any:
    """Parse JSON that may be broken: smart quotes, trailing commas, single quotes,
    unescaped quotes; missing closing braces only after a complete value (text cut off
    inside a value, or after a number, is never repaired into one). None when nothing
    JSON-like can be recovered."""
    value = loads_strict(text)
    if value is not None:
        return value
    candidate = text.translate(_SMART).strip()
    value = loads_strict(candidate)
    if value is not None:
        return value
    if not candidate or len(candidate) > _REPAIR_MAX or _depth(candidate) > _REPAIR_DEPTH:
        return None  # json-repair is slow on such text, and nothing sane is in it
    closers = _closers(candidate)
    if closers is None or (closers and _NUMBER_AT_END.search(candidate)):
        return None  # cut off inside a value: json-repair would guess the rest
    if closers:  # cut off after a value (and its comma): only closed
        return loads_strict(candidate.removesuffix(",") + closers)
    import json_repair  # only for broken JSON: ~17 ms of import the runtime need not pay

    try:
        repaired = json_repair.loads(candidate)
    except Exception:  # json_repair raises assorted errors on hostile input
        return None
    if repaired in ("", None) or isinstance(repaired, str):
        return None
    return repaired


def first_json_value(text: str, spans: Iterable[tuple[int, int]] | None = None
                     ) -> tuple[Any, bool] | None:
    """The first JSON object or array in text (among ``spans`` when they were found
    already), and whether it needed repair."""
    for start, end in balanced_spans(text) if spans is None else spans:
        chunk = text[start:end]
        value = loads_strict(chunk)
        if value is not None:
            return value, False
        value = loads_repaired(chunk)
        if isinstance(value, dict | list) and value:
            return value, True
    return None


def _brackets(text: str) -> Iterator[str]:
    """The brackets of ``text`` outside its strings, in order, then ``"`` when the text
    ends inside a string."""
    in_str = False
    for ch, _ in _structure(text):
        if in_str:
            in_str = ch != '"'
        elif ch == '"':
            in_str = True
        else:
            yield ch
    if in_str:
        yield '"'


def _closers(text: str) -> str | None:
    """What closes ``text`` when it was cut short after a complete value: the missing
    ``}`` and ``]``; "" when nothing is missing; None when it was cut inside a string."""
    stack: list[str] = []
    for ch in _brackets(text):
        if ch == '"':
            return None
        if ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif stack:
            stack.pop()
    return "".join(reversed(stack))


#: A number the text ends in: in JSON left open it may have been cut short (12 of 125).
_NUMBER_AT_END = re.compile(r"(?:^|[\s:,\[])-?\d[\d.eE+-]*\s*\Z")


def loads_arguments(text: str) -> tuple[Any, bool] | None:
    """JSON a model wrote, read without making anything up: strictly; when it was cut
    short after a complete value, with the missing braces added; when it is complete but
    malformed (single quotes, trailing commas), with json-repair. (value, repaired), or
    None: json-repair would fill a value cut in half, or a key without one, with guesses,
    and a number the open JSON ends in may be cut short."""
    value = loads_strict(text)
    if value is not None:
        return value, False
    candidate = text.translate(_SMART).strip()
    closers = _closers(candidate)
    if closers is None or (closers and _NUMBER_AT_END.search(candidate)):
        return None
    if closers:
        value = loads_strict(candidate + closers)
        return (value, True) if value is not None else None
    value = loads_repaired(candidate)
    return (value, True) if value is not None else None


def first_value(text: str) -> tuple[Any, bool] | None:
    """The first JSON object or array in ``text`` read by ``loads_arguments``."""
    for start, end in balanced_spans(text):
        return loads_arguments(text[start:end])
    return None


def _depth(text: str) -> int:
    """The deepest nesting of brackets in ``text`` (strings aside), counted up to just past
    the depth json-repair is tried to."""
    depth = deepest = 0
    for ch in _brackets(text):
        if ch in "{[":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > _REPAIR_DEPTH:
                break
        elif ch != '"':
            depth -= 1
    return deepest
