"""The archive: messages evicted from a conversation's window, and recall over them.

Per conversation (keys from ``Keys``): ``archive`` (HASH seq -> archived message with its
summary), ``archive_ids`` (message id -> seq, so archiving is idempotent), ``t:<term>``
(APPEND-only packed postings (seq, tf, doc length) of the keyword index, so recall reads
one key per query term and never scans the archive) and, with an embedder, ``vectors``.
Archiving runs inside the store's window rewrite (one transaction); recall is BM25 over the
postings, fused with cosine similarity when an embedding model is configured.
"""

from __future__ import annotations

import heapq
import json
import logging
import struct
from collections import Counter
from typing import Any

import redis.asyncio as aioredis

from ..messages import Message
from .base import ArchiveHit
from .embeddings import Embedder, cosine, fuse, pack
from .keys import Keys
from .search import bm25, idf, query_terms, terms

log = logging.getLogger(__name__)

_POSTING = struct.Struct("<IHH")
_MAX_QUERY_TERMS = 16
_SUMMARY_CHARS = 200
_CANDIDATES = 10  # keyword candidates per requested hit, for re-ranking by vector
_RECENT = 500  # most recent archived messages also compared by vector

# KEYS: archive, archive_ids, meta, postings...
# ARGV: n, (seq, id, doc) * n, total_terms, posting bytes for each postings key
_ARCHIVE = """
local n = tonumber(ARGV[1])
for i = 0, n - 1 do
  local seq, id, doc = ARGV[2 + 3 * i], ARGV[3 + 3 * i], ARGV[4 + 3 * i]
  redis.call('HSET', KEYS[1], seq, doc)
  redis.call('HSET', KEYS[2], id, seq)
end
local base = 3 * n + 2
for k = 4, #KEYS do
  redis.call('APPEND', KEYS[k], ARGV[base + k - 3])
end
redis.call('HINCRBY', KEYS[3], 'archived', n)
redis.call('HINCRBY', KEYS[3], 'archived_terms', ARGV[base])
return n
"""


def brief(text: str, limit: int = _SUMMARY_CHARS) -> str:
    """A one-line summary: the first sentence, or the start of the text."""
    flat = " ".join(text.split())
    for end in (". ", "。", "! ", "? ", "\n"):
        cut = flat.find(end)
        if 20 <= cut < limit:
            return flat[: cut + len(end)].strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class Archive:
    """Writes archived messages (into a transaction the store runs) and searches them."""

    def __init__(self, client: aioredis.Redis, keys: Keys, *, max_archive: int,
                 embedder: Embedder | None = None) -> None:
        self.redis = client
        self.keys = keys
        self.max_archive = max_archive
        self.embedder = embedder
        self.script = client.register_script(_ARCHIVE)

    async def not_yet_archived(self, pipe: Any, cid: str, messages: list[Message]
                                ) -> list[Message]:
        if not messages:
            return []
        seen = await pipe.hmget(self.keys.archive_ids(cid), [m.id for m in messages])
        unique: dict[str, Message] = {}
        for m, known in zip(messages, seen, strict=True):
            if known is None:
                unique.setdefault(m.id, m)
        return list(unique.values())

    async def vectors(self, messages: list[Message]) -> list[bytes]:
        """Packed embeddings of messages about to be archived (none without an embedder)."""
        if self.embedder is None or not messages:
            return []
        try:
            found = await self.embedder.embed([f"{m.name or ''} {m.text}".strip()
                                               for m in messages])
        except Exception as exc:  # keyword recall still works without the vectors
            log.warning("could not embed %d archived messages: %s", len(messages), exc)
            return []
        return [pack(v) for v in found]

    def queue(self, pipe: Any, cid: str, messages: list[Message], first_seq: int
                       ) -> None:
        """Queue the archiving of ``messages`` as one script call: documents, id map and
        every posting (a command per term would cost far more on the client)."""
        if not messages:
            return
        docs: list[str | int] = []
        postings: dict[str, bytearray] = {}
        total_terms = 0
        for offset, m in enumerate(messages):
            seq = first_seq + offset
            text = m.text  # the files' text too: recall finds what was sent
            doc = {**m.to_dict(), "summary": brief(text), "seq": seq}
            if m.parts:
                doc["text"] = text
            docs += [seq, m.id, json.dumps(doc, ensure_ascii=False)]
            words = terms(f"{m.name or ''} {text}")
            total_terms += len(words)
            length = min(len(words), 65_535)
            for term, tf in Counter(words).items():
                postings.setdefault(term, bytearray()).extend(
                    _POSTING.pack(seq, min(tf, 65_535), length))
        keys = [self.keys.archive(cid), self.keys.archive_ids(cid), self.keys.meta(cid),
                *(self.keys.postings(cid, t) for t in postings)]
        args = [len(messages), *docs, total_terms, *(bytes(p) for p in postings.values())]
        pipe.evalsha(self.script.sha, len(keys), *keys, *args)

    async def trim(self, cid: str, last_seq: int) -> None:
        """Keep the newest ``max_archive`` archived messages; older postings are skipped."""
        low = last_seq - self.max_archive
        meta = self.keys.meta(cid)
        floor = int(await self.redis.hget(meta, "archive_floor") or 0)
        if low <= floor:
            return
        doomed = [str(s) for s in range(floor + 1, low + 1)]
        docs = await self.redis.hmget(self.keys.archive(cid), doomed)
        ids = [json.loads(d)["id"] for d in docs if d]
        pipe = self.redis.pipeline(transaction=True)
        pipe.hdel(self.keys.archive(cid), *doomed)
        pipe.hdel(self.keys.vectors(cid), *doomed)
        if ids:
            pipe.hdel(self.keys.archive_ids(cid), *ids)
        pipe.hset(meta, "archive_floor", low)
        pipe.hincrby(meta, "archived", -len(ids))
        await pipe.execute()

    async def recall(self, cid: str, query: str, limit: int = 5) -> list[ArchiveHit]:
        """The archived messages of ``cid`` best matching ``query``."""
        wanted = query_terms(query)[:_MAX_QUERY_TERMS]
        if limit <= 0 or not (wanted or self.embedder):
            return []
        pipe = self.redis.pipeline(transaction=False)
        pipe.hmget(self.keys.meta(cid), ["archived", "archived_terms", "archive_floor"])
        pipe.get(self.keys.archive_seq(cid))
        for term in wanted:
            pipe.get(self.keys.postings(cid, term))
        (count, total_terms, floor), last_seq, *postings = await pipe.execute()
        docs = int(count or 0)
        if docs == 0:
            return []
        avg = int(total_terms or 0) / max(1, docs)
        floor_seq = int(floor or 0)
        scores: dict[int, float] = {}
        lists = [(len(p) // _POSTING.size, p) for p in postings if p]
        # Terms found in most documents say little and cost the most to score: skip them
        # when rarer terms are there to rank by.
        rare = [(df, p) for df, p in lists if df * 2 <= docs]
        for df, raw in rare or lists:
            weight = idf(docs, df)
            for seq, tf, length in _POSTING.iter_unpack(raw):
                if seq > floor_seq:
                    scores[seq] = scores.get(seq, 0.0) + bm25(tf, length, avg, weight)
        if self.embedder is not None:
            best = await self._rerank(cid, query, scores, limit=limit,
                                      last_seq=int(last_seq or 0), floor_seq=floor_seq)
        else:
            best = heapq.nlargest(limit, scores.items(), key=lambda kv: kv[1])
        if not best:
            return []
        found = await self.redis.hmget(self.keys.archive(cid), [str(s) for s, _ in best])
        hits = []
        for (_, score), raw_doc in zip(best, found, strict=True):
            if raw_doc is None:
                continue
            doc = json.loads(raw_doc)
            hits.append(ArchiveHit(doc["id"], doc["role"], doc.get("kind", ""),
                                   doc.get("text") or doc.get("content", ""),
                                   doc.get("summary", ""),
                                   float(doc.get("ts", 0)), int(doc.get("round", 0)), score))
        return hits

    async def _rerank(self, cid: str, query: str, scores: dict[int, float], *, limit: int,
                      last_seq: int, floor_seq: int) -> list[tuple[int, float]]:
        """Keyword candidates and the most recent archived messages, ranked by keywords and
        by cosine similarity, fused."""
        assert self.embedder is not None
        keyword = [s for s, _ in heapq.nlargest(limit * _CANDIDATES, scores.items(),
                                                key=lambda kv: kv[1])]
        recent = list(range(last_seq, max(floor_seq, last_seq - _RECENT), -1))
        candidates = list(dict.fromkeys(keyword + recent))
        try:
            [query_vector] = await self.embedder.embed([query])
        except Exception as exc:
            log.warning("recall falls back to keywords: cannot embed the query: %s", exc)
            return [(s, scores[s]) for s in keyword[:limit]]
        packed: list[Any] = await self.redis.hmget(self.keys.vectors(cid),
                                                   [str(s) for s in candidates])
        similar = sorted(((cosine(query_vector, v), s) for s, v in zip(candidates, packed,
                                                                       strict=True) if v),
                         reverse=True)
        by_vector = [s for sim, s in similar if sim > 0]
        fused = fuse(keyword, by_vector)[:limit]
        return [(s, scores.get(s, 0.0)) for s in fused]
