"""What of a streamed reply may be shown while it comes: never reasoning, never the markup
of a tool call, never a special token. Text is held back while it could still turn out to
be the start of one, and what was shown is never taken back: when the reply turns out to
have been reasoning all along (a ``</think>`` the prompt opened), nothing more is shown."""

from __future__ import annotations

import re

from .._lazyre import lazy
from .nested import MINIMAX_NS
from .reasoning import MARKS, split_reasoning

#: Where what may be shown ends: the start of any tool-call markup or special token.
_STOPS = ("<tool_call", "<function", "<|", "<｜", "[TOOL_CALLS]", "<minimax:", "<seed:",
          "<steptml:", "<longcat_", "<tool_calls>", "functools[", "<think", "</think",
          "<arg_key>", "[{", "{\"name\"", "{\"tool", "{\"type\"", "<TOOLCALL>", "```tool_code",
          "<thinking", "</thinking", "<reasoning", "</reasoning", "[THINK]", "[/THINK]",
          "<channel|>", "<start_function_call>", MINIMAX_NS, ">>>", "{\"function\"",
          "<|tools_prefix|>")
_HARMONY_FINAL = lazy(r"<\|channel\|>\s*final[^<]*(?:<\|constrain\|>[^<]*)?<\|message\|>"
                            r"(.*?)(?:<\|return\|>|<\|end\|>|\Z)", re.S)


#: Everything ``showable`` looks for: with none of it in a reply, the reply is shown as it
#: is but for an end that may begin a stop.
_MARKS = tuple(dict.fromkeys([*_STOPS, *MARKS, "<|channel|>"]))
_LONGEST = max(map(len, _MARKS))
#: Each stop's beginnings, in the order they are tried (stop by stop, longest first).
_BEGINNINGS = tuple(stop[:size] for stop in _STOPS for size in range(len(stop) - 1, 0, -1))
_LAST_CHARS = frozenset(b[-1] for b in _BEGINNINGS)


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
    if cut < len(text):
        # Followed by a stop, the text before it is final: its end ("<" of "<[{") begins
        # nothing (holding it back would take back what the stream already showed).
        return text[:cut]
    return _held_back(text)


def _held_back(text: str) -> str:
    """``text`` without an end that may be the beginning of a stop ("<too", "[TOOL")."""
    if text[-1:] not in _LAST_CHARS:
        return text
    for beginning in _BEGINNINGS:
        if text.endswith(beginning):
            return text[:-len(beginning)]
    return text


class VisibleStream:
    """Feed the streamed pieces; each call answers what is new to show."""

    def __init__(self) -> None:
        self._text = ""
        self._shown = ""
        self._done = False
        #: How much of the reply is known to hold no mark (None: one was found).
        self._unmarked: int | None = 0

    def feed(self, piece: str) -> str:
        """What of the reply so far is new to show (often "")."""
        self._text += piece
        if self._done:
            return ""
        if self._unmarked is not None:  # only the new end is searched, once
            since = max(0, self._unmarked - _LONGEST + 1)
            found = any(self._text.find(mark, since) >= 0 for mark in _MARKS)
            self._unmarked = None if found else len(self._text)
        visible = _held_back(self._text) if self._unmarked is not None \
            else showable(self._text)
        if not visible.startswith(self._shown):  # it was reasoning after all: stop here
            self._done = True
            return ""
        new, self._shown = visible[len(self._shown):], visible
        return new
