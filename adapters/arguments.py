"""A tool call's arguments as an approver sees them: complete when they fit, otherwise a
faithful summary, never a silent cut.

The text is JSON (``json.dumps``), so strings are quoted and their line breaks escaped: an
argument cannot look like another key or like the prompt's own text. Characters that
render invisibly or reorder text (format and control characters: bidi overrides,
zero-width spaces, line separators) and the backtick, which would close a chat's code
block, are written as JSON ``\\uXXXX`` escapes: the same string, shown unambiguously.

When the whole does not fit the platform's budget, the summary shows every key, in the
order the tool receives them, each value cut visibly (``… [cut: N characters in all]``);
only when even the key names do not fit does it stop, saying how many keys it left out.
The caller links to the full arguments (``GET /agent/approvals/{id}``) whenever the text
is not complete. The budget is measured on the text as the platform will count it
(``measure``: after Slack's entity escaping, for instance).
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Unicode categories written as escapes: format (bidi, zero-width), control, line and
#: paragraph separators, private use, surrogates, unassigned.
_HIDDEN = frozenset({"Cf", "Cc", "Zl", "Zp", "Co", "Cs", "Cn"})
_ESCAPED = frozenset("`")
#: Per-value limits tried in turn, longest first, until the summary fits.
_VALUE_LIMITS = (1000, 400, 160, 80, 40, 16)
_KEY_LIMIT = 80
_SHORT_KEY = 24  # when even the values' sizes barely fit


@dataclass(frozen=True, slots=True)
class ShownArguments:
    """What the approver is shown."""

    text: str
    #: Everything, verbatim; False: a summary (link to the full arguments).
    complete: bool


def display_json(value: Any, *, indent: int | None = 2) -> str:
    """``value`` as JSON with hidden characters and backticks escaped (still valid JSON,
    decoding to the same value)."""
    text = json.dumps(value, ensure_ascii=False, indent=indent, default=str,
                      separators=None if indent is not None else (", ", ": "))
    if not any(_hidden(c) for c in text):
        return text
    return "".join(_escape(c) if _hidden(c) else c for c in text)


def show_arguments(arguments: dict[str, Any], *, budget: int,
                   measure: Callable[[str], int] = len) -> ShownArguments:
    """The arguments within ``budget`` (as ``measure`` counts): all of them, or a summary."""
    whole = display_json(arguments)
    if measure(whole) <= budget:
        return ShownArguments(whole, complete=True)
    items = [(_key(k, _KEY_LIMIT), display_json(v, indent=None), _size(v))
             for k, v in arguments.items()]
    for limit in _VALUE_LIMITS:
        lines = [f"  {key}: {_cut(value, limit, size)}" for key, value, size in items]
        text = "{\n" + ",\n".join(lines) + "\n}"
        if measure(text) <= budget:
            return ShownArguments(text, complete=False)
    names = [(_key(k, _SHORT_KEY), _size(v)) for k, v in arguments.items()]
    sized = _names_only(names, budget, measure, sized=True)
    if sized[1] == 0:
        return ShownArguments(sized[0], complete=False)
    bare = _names_only(names, budget, measure, sized=False)
    return ShownArguments(min(sized, bare, key=lambda found: found[1])[0], complete=False)


def _names_only(names: list[tuple[str, str]], budget: int, measure: Callable[[str], int],
                *, sized: bool) -> tuple[str, int]:
    """Too many keys for their values: the keys (with their values' sizes, if ``sized``),
    as many as fit, and how many are left out; the text and that number."""
    lines: list[str] = []
    for n, (key, size) in enumerate(names):
        line = f"  {key}: … [{size}]" if sized else f"  {key}: …"
        if measure(_listing([*lines, line], len(names) - n - 1)) > budget:
            return _listing(lines, len(names) - n), len(names) - n
        lines.append(line)
    return _listing(lines, 0), 0


def _listing(lines: list[str], missing: int) -> str:
    more = [f"  … and {missing} more keys not shown here"] if missing else []
    return "{\n" + ",\n".join([*lines, *more]) + "\n}"


def _key(key: str, limit: int) -> str:
    shown = display_json(key, indent=None)
    if len(shown) <= limit:
        return shown
    return _trim(shown, limit) + f"…[key of {len(key)} characters]"


def _size(value: Any) -> str:
    """How big a value is, in the terms a person checks it by."""
    if isinstance(value, str):
        return f"{len(value)} characters"
    shown = len(display_json(value, indent=None))
    if isinstance(value, dict):
        return f"{len(value)} keys, {shown} characters of JSON"
    if isinstance(value, list):
        return f"{len(value)} items, {shown} characters of JSON"
    return f"{shown} characters"


def _cut(value: str, limit: int, size: str) -> str:
    if len(value) <= limit:
        return value
    return _trim(value, limit) + f"… [cut: {size} in all]"


def _trim(text: str, limit: int) -> str:
    """``text`` cut at ``limit``, not inside an escape sequence (``\\n``, ``\\u0060``)."""
    cut = text[:limit]
    slash = cut.rfind("\\", max(0, limit - 6))
    if slash == -1:
        return cut
    run = len(cut[:slash + 1]) - len(cut[:slash + 1].rstrip("\\"))
    tail = cut[slash:]
    whole = 6 if tail.startswith("\\u") else 2
    if run % 2 == 1 and len(tail) < whole:  # the cut would split this escape
        cut = cut[:slash]
    return cut


def _hidden(char: str) -> bool:
    return char in _ESCAPED or (char > "~" and unicodedata.category(char) in _HIDDEN)


def _escape(char: str) -> str:
    code = ord(char)
    if code > 0xFFFF:  # JSON escapes beyond the BMP as a surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"
