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
        self.pattern: re.Pattern[str] | None = None


_registry = _Registry()
# Shapes of well-known credentials, redacted even when not registered.
_SHAPES = re.compile(
    r"(?:sk-[A-Za-z0-9_-]{16,}|xox[abprs]-[A-Za-z0-9-]{10,}|xapp-[A-Za-z0-9-]{10,}"
    r"|\b\d{6,12}:[A-Za-z0-9_-]{30,}\b|(?i:bearer)\s+[A-Za-z0-9._~+/-]{12,}=*)"
)


def register(values: Iterable[str | None]) -> None:
    """Add secret values to redact from now on."""
    with _registry.lock:
        _registry.values.update(v for v in values if v and len(v) >= _MIN_LEN)
        if _registry.values:
            ordered = sorted(_registry.values, key=len, reverse=True)
            _registry.pattern = re.compile("|".join(re.escape(v) for v in ordered))


def redact(text: str) -> str:
    """``text`` with every registered secret and credential-shaped token replaced."""
    pattern = _registry.pattern
    if pattern is not None:
        text = pattern.sub(MARKER, text)
    return _SHAPES.sub(MARKER, text)
