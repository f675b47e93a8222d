"""Counting byte-pair-encoded tokens in Python, from a tiktoken table.

tiktoken's encoder (Rust) keeps three copies of its table besides the Python dict it is
built from (an encoder map, a decoder map and the sorted tokens): for cl100k ~23 MB of
resident memory on top of the dict's ~13 MB, and ~75 ms to build. A count needs only the
dict: split the text with the table's pattern, look each piece up (most pieces are one
token), and merge the rest pair by pair exactly as tiktoken does (always the lowest-ranked
adjacent pair, the leftmost of equals). ``tests/unit/test_tokens.py`` checks the counts
against tiktoken's own encoder on the token corpus and on generated text.
"""

from __future__ import annotations

import heapq
from typing import Any, Protocol

#: Pieces up to this many bytes merge by rescanning (fast for short pieces); longer ones
#: (a run of letters pasted from a log, say) through a heap, so a piece of n bytes costs
#: O(n log n) rather than O(n^2).
_SCAN_LIMIT = 48
_CACHE_LIMIT = 16_384


class Ranks(Protocol):
    """Token bytes -> rank: a dict, or ``ranks.CompactRanks``."""

    def get(self, token: bytes, default: None = None, /) -> int | None: ...

    def __contains__(self, token: object, /) -> bool: ...


class BPECounter:
    """Token counts of text under one table (``ranks``: token bytes -> rank) and
    pre-tokenizer pattern (tiktoken's ``pat_str``: ``pretokenize.splitter``)."""

    def __init__(self, ranks: Ranks, pattern: str) -> None:
        from .pretokenize import splitter

        self._ranks = ranks
        self._split = splitter(pattern)
        #: Pieces counted before, one token or several (a compact table's lookup costs
        #: ~10x a dict's; text repeats its pieces).
        self._seen: dict[str, int] = {}

    def count(self, text: str) -> int:
        try:
            return self._count(text)
        except UnicodeEncodeError:  # lone surrogates: replaced, as tiktoken's encode does
            return self._count(text.encode("utf-16", "surrogatepass").decode("utf-16",
                                                                              "replace"))

    def _count(self, text: str) -> int:
        ranks, seen = self._ranks, self._seen
        total = 0
        for piece in self._split(text):
            tokens = seen.get(piece)
            if tokens is None:
                raw = piece.encode()
                tokens = 1 if raw in ranks else merge_count(raw, ranks)
                if len(seen) < _CACHE_LIMIT:
                    seen[piece] = tokens
            total += tokens
        return total


def merge_count(piece: bytes, ranks: Ranks) -> int:
    """Tokens of one piece: merge the lowest-ranked adjacent pair until none is a token."""
    if len(piece) > _SCAN_LIMIT:
        return _heap_merge_count(piece, ranks)
    parts = [piece[i:i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best, at = None, -1
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and (best is None or rank < best):
                best, at = rank, i
        if best is None:
            break
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    return len(parts)


def _heap_merge_count(piece: bytes, ranks: Ranks) -> int:
    """The same merges, lowest (rank, position) first from a heap of adjacent pairs. Parts
    are kept as start offsets in a linked list; a pair entry is stale once either part has
    changed (its right part's end moved, or its left part is gone)."""
    n = len(piece)
    nxt = list(range(1, n + 1))  # nxt[s]: the start of the part after the one at s (n: end)
    prv = list(range(-1, n - 1))
    alive = [True] * n
    heap: list[Any] = []

    def push(start: int) -> None:
        mid = nxt[start]
        if mid >= n:
            return
        end = nxt[mid]
        rank = ranks.get(piece[start:end])
        if rank is not None:
            heapq.heappush(heap, (rank, start, mid, end))

    for start in range(n - 1):
        push(start)
    parts = n
    while heap:
        _, start, mid, end = heapq.heappop(heap)
        if not alive[start] or nxt[start] != mid or not alive[mid] or nxt[mid] != end:
            continue  # stale: one of the two parts has merged since
        alive[mid] = False
        nxt[start] = end
        if end < n:
            prv[end] = start
        parts -= 1
        push(start)
        if prv[start] >= 0:
            push(prv[start])
    return parts
