"""Keyword search over a conversation's archive: tokenizing and BM25 scoring.

Latin text is split into lower-cased words and numbers; CJK text into overlapping character
bigrams (plus single characters), which is how keyword search engines index Chinese and
Japanese without a dictionary.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Iterable


@functools.lru_cache(maxsize=1)
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Words and CJK characters (compiled at the first use: their Unicode classes take a
    few ms that a process which never searches its archive need not pay)."""
    return (re.compile(r"[a-z0-9_\u00c0-\u024f]+(?:[.-][a-z0-9_]+)*"
                       r"|[\u3040-\u30ff\u3400-\u9fff]+"),
            re.compile(r"[\u3040-\u30ff\u3400-\u9fff]"))


_STOP = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "has", "have", "i", "in",
    "is", "it", "its", "of", "on", "or", "that", "the", "this", "to", "was", "were", "will",
    "with", "you", "your", "we", "our", "me", "my", "do", "did", "what", "when", "where",
    "which", "who", "how",
})

K1 = 1.2
B = 0.75


def terms(text: str) -> list[str]:
    """Index terms of ``text``, in order, repeats kept."""
    out: list[str] = []
    word, cjk = _patterns()
    for token in word.findall(text.lower()):
        if cjk.match(token):
            out.extend(token)
            out.extend(token[i:i + 2] for i in range(len(token) - 1))
        elif token not in _STOP and len(token) <= 64:
            out.append(token)
    return out


def query_terms(text: str) -> list[str]:
    """Distinct terms of a query (CJK queries use bigrams only when they have any)."""
    found = terms(text)
    cjk = _patterns()[1]
    bigrams = [t for t in found if cjk.match(t) and len(t) == 2]
    singles_cjk = {t for t in found if cjk.match(t) and len(t) == 1}
    chosen = [t for t in found if not (bigrams and t in singles_cjk)]
    return list(dict.fromkeys(chosen))


def idf(doc_count: int, doc_freq: int) -> float:
    """BM25's inverse document frequency (never negative)."""
    return math.log(1 + (doc_count - doc_freq + 0.5) / (doc_freq + 0.5))


def bm25(tf: int, doc_len: int, avg_len: float, term_idf: float) -> float:
    """BM25 contribution of one term to one document."""
    denom = tf + K1 * (1 - B + B * doc_len / max(avg_len, 1e-9))
    return term_idf * tf * (K1 + 1) / denom


def rank(query: str, docs: Iterable[tuple[str, str]], limit: int) -> list[tuple[str, float]]:
    """(doc_id, score) of the best ``limit`` docs for ``query``; for small, in-memory sets."""
    wanted = query_terms(query)
    if not wanted:
        return []
    counted = [(doc_id, Counter(terms(text))) for doc_id, text in docs]
    if not counted:
        return []
    avg = sum(sum(c.values()) for _, c in counted) / len(counted)
    dfs = {t: sum(1 for _, c in counted if t in c) for t in wanted}
    scored = []
    for doc_id, c in counted:
        length = sum(c.values())
        score = sum(bm25(c[t], length, avg, idf(len(counted), dfs[t])) for t in wanted if c[t])
        if score > 0:
            scored.append((doc_id, score))
    scored.sort(key=lambda x: -x[1])
    return scored[:limit]
