"""Keeps secrets out of logs, events, chat messages and error texts.

Every secret the process knows (API keys, bot tokens, signing secrets) is registered here
when settings load; ``redact`` replaces any occurrence with a fixed marker. This is the last
line of defence: code should not put secrets in messages in the first place.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable

MARKER = "[REDACTED]"
_MIN_LEN = 6  # shorter values would redact ordinary words



class _Registry:
    """The secrets known to this process and one compiled pattern matching them all."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: set[str] = set()
        #: The values, longest first (a check with ``in`` is far cheaper than the pattern),
        #: and the pattern; one attribute, so that a reader sees the two of one update.
        self.compiled: tuple[tuple[str, ...], re.Pattern[str]] | None = None


_registry = _Registry()
# Shapes of well-known credentials, redacted even when not registered. No branch starts
# with a word boundary or a case-insensitive group, which the regex engine tried at every
# position of every text (~27 µs for 300 characters, against ~15 µs now; events carry such
# texts several times an answer): the Telegram token's boundary is a lookbehind after its
# first digit (no word character before it), "bearer" is [Bb] then the rest in any case.
_SHAPES = re.compile(
    r"(?:sk-[A-Za-z0-9_-]{16,}|xox[abprs]-[A-Za-z0-9-]{10,}|xapp-[A-Za-z0-9-]{10,}"
    r"|\d(?<!\w\d)\d{5,11}:[A-Za-z0-9_-]{30,}\b|[Bb](?i:earer)\s+[A-Za-z0-9._~+/-]{12,}=*)"
)
#: The shortest text a shape matches (``xoxb-`` and ten more): shorter ones, most of an
#: event's strings (outcomes, rule, tool and model names), skip the pattern.
SHAPE_MIN_LEN = 15


def register(values: Iterable[str | None]) -> None:
    """Add secret values to redact from now on."""
    with _registry.lock:
        _registry.values.update(v for v in values if v and len(v) >= _MIN_LEN)
        if _registry.values:
            ordered = tuple(sorted(_registry.values, key=len, reverse=True))
            _registry.compiled = (ordered,
                                  re.compile("|".join(re.escape(v) for v in ordered)))


def redact(text: str) -> str:
    """``text`` with every registered secret and credential-shaped token replaced."""
    compiled = _registry.compiled
    if compiled is not None:
        for value in compiled[0]:
            if value in text:
                text = compiled[1].sub(MARKER, text)
                break
    return _SHAPES.sub(MARKER, text) if len(text) >= SHAPE_MIN_LEN else text
