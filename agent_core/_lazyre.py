"""Regular expressions compiled the first time they are used: the format readers hold
dozens, and most outputs (an answer in prose) need none of them, so the import does not pay
for them."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any


class LazyPattern:
    """``re.compile(pattern, flags)``, done at the first search."""

    __slots__ = ("_compiled", "_flags", "_pattern")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._pattern, self._flags = pattern, flags
        self._compiled: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        """The compiled pattern."""
        if self._compiled is None:
            self._compiled = re.compile(self._pattern, self._flags)
        return self._compiled

    def search(self, text: str, pos: int = 0) -> re.Match[str] | None:
        """As ``re.Pattern.search``."""
        return self.compiled.search(text, pos)

    def match(self, text: str, pos: int = 0) -> re.Match[str] | None:
        """As ``re.Pattern.match``."""
        return self.compiled.match(text, pos)

    def fullmatch(self, text: str) -> re.Match[str] | None:
        """As ``re.Pattern.fullmatch``."""
        return self.compiled.fullmatch(text)

    def finditer(self, text: str, pos: int = 0) -> Iterator[re.Match[str]]:
        """As ``re.Pattern.finditer``."""
        return self.compiled.finditer(text, pos)

    def findall(self, text: str) -> list[Any]:
        """As ``re.Pattern.findall``."""
        return self.compiled.findall(text)

    def sub(self, repl: str | Callable[[re.Match[str]], str], text: str) -> str:
        """As ``re.Pattern.sub``."""
        return self.compiled.sub(repl, text)


#: What the readers take: a pattern compiled now or at its first use.
Pattern = re.Pattern[str] | LazyPattern


def lazy(pattern: str, flags: int = 0) -> LazyPattern:
    """``pattern``, compiled when first used."""
    return LazyPattern(pattern, flags)
