"""Finding and loading JSON inside model text: strict first, then repaired."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import json_repair

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\r?\n?(.*?)(?:```|\Z)", re.DOTALL)
_SMART = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'",
                        "\uff02": '"', "\u00ab": '"', "\u00bb": '"'})


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each ``` fenced block; an unclosed final fence runs to the end."""
    return [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]


def balanced_spans(text: str, openers: str = "{[") -> Iterator[tuple[int, int]]:
    """(start, end) of each top-level balanced {...} or [...] span, string-aware.

    An opener whose span never closes yields (start, len(text)), so a missing final brace
    can still be repaired.
    """
    i, n = 0, len(text)
    while i < n:
        if text[i] not in openers:
            i += 1
            continue
        start, depth, in_str, esc, quote = i, 0, False, False, ""
        j = i
        while j < n:
            ch = text[j]
            if in_str:
                if esc:
                    esc = False
                elif ch == "\\":
                    esc = True
                elif ch == quote:
                    in_str = False
            elif ch in "\"":
                in_str, quote = True, ch
            elif ch in "{[":
                depth += 1
            elif ch in "}]":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        if j >= n:
            yield start, n
            return
        yield start, j + 1
        i = j + 1


def loads_strict(text: str) -> Any:
    """json.loads, or None when the text is not valid JSON."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def loads_repaired(text: str) -> Any:
    """Parse JSON that may be broken: smart quotes, trailing commas, single quotes, missing
    braces, unescaped quotes. None when nothing JSON-like can be recovered."""
    value = loads_strict(text)
    if value is not None:
        return value
    candidate = text.translate(_SMART).strip()
    value = loads_strict(candidate)
    if value is not None:
        return value
    try:
        repaired = json_repair.loads(candidate)
    except Exception:  # json_repair raises assorted errors on hostile input
        return None
    if repaired in ("", None) or isinstance(repaired, str):
        return None
    return repaired


def first_json_value(text: str) -> tuple[Any, bool] | None:
    """The first JSON object or array in text, and whether it needed repair."""
    for start, end in balanced_spans(text):
        chunk = text[start:end]
        value = loads_strict(chunk)
        if value is not None:
            return value, False
        value = loads_repaired(chunk)
        if isinstance(value, dict | list) and value:
            return value, True
    return None
