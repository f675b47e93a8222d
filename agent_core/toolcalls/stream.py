"""What of a streamed reply may be shown while it comes: never reasoning, never the markup
of a tool call, never a special token. Text is held back while it could still turn out to
be the start of one, and what was shown is never taken back: when the reply turns out to
have been reasoning all along (a ``</think>`` the prompt opened), nothing more is shown."""

from __future__ import annotations

import re

from .reasoning import split_reasoning

#: Where what may be shown ends: the start of any tool-call markup or special token.
_STOPS = ("<tool_call", "<function", "<|", "<｜", "[TOOL_CALLS]", "<minimax:", "<seed:",
          "<steptml:", "<longcat_", "<tool_calls>", "functools[", "<think", "</think",
          "<arg_key>", "[{", "{\"name\"", "{\"tool", "{\"type\"", "<TOOLCALL>", "```tool_code",
          "<thinking", "</thinking", "<reasoning", "</reasoning")
_HARMONY_FINAL = re.compile(r"<\|channel\|>\s*final\s*<\|message\|>(.*?)(?:<\|return\|>|"
                            r"<\|end\|>|\Z)", re.S)


#: Every stop, reasoning tag and harmony token holds one of these: text without them is
#: shown as it is (the common case, checked per piece instead of the whole reply).
_SPECIAL = "<[{`"
#: The stops whose beginnings can end plain text ("f", "fu", ... of "functools[").
_PLAIN_STARTS = tuple(stop for stop in _STOPS if stop[0] not in _SPECIAL)


def showable(text: str) -> str:
    """The part of ``text`` (a reply so far) that may be shown."""
    final = _HARMONY_FINAL.search(text)
    if final:
        text = final.group(1)
    _, text = split_reasoning(text)
    cut = len(text)
    for stop in _STOPS:
        at = text.find(stop)
        if 0 <= at < cut:
            cut = at
    return _held_back(text[:cut], _STOPS)


def _held_back(text: str, stops: tuple[str, ...]) -> str:
    """``text`` without an end that may be the beginning of a stop ("<too", "[TOOL")."""
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), 0, -1):
            if text.endswith(stop[:size]):
                return text[:-size]
    return text


class VisibleStream:
    """Feed the streamed pieces; each call answers what is new to show."""

    def __init__(self) -> None:
        self._text = ""
        self._shown = ""
        self._done = False
        #: Whether no piece so far held a character any markup starts with.
        self._plain = True

    def feed(self, piece: str) -> str:
        """What of the reply so far is new to show (often "")."""
        self._text += piece
        if self._done:
            return ""
        self._plain = self._plain and not any(c in piece for c in _SPECIAL)
        # Plain text needs no reading of the whole reply: only its end may be held back.
        visible = _held_back(self._text, _PLAIN_STARTS) if self._plain \
            else showable(self._text)
        if not visible.startswith(self._shown):  # it was reasoning after all: stop here
            self._done = True
            return ""
        new, self._shown = visible[len(self._shown):], visible
        return new
