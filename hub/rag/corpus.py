"""Knowledge bases of the retriever: folders of Markdown and text files, chunked and indexed.

A file is cut at its Markdown headings, then into pieces of about ``CHUNK_CHARS`` at
paragraph ends; each piece is a document ``<kb>:<path>#<n>`` that keeps its heading as part
of its text. Search is BM25 over the pieces' terms (the tokenizer recall uses) and, with an
embedding model (RECALL_EMBEDDINGS), cosine similarity over their vectors, fused by
reciprocal rank as recall fuses them.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from agent_core.store.embeddings import Embedder, cosine, fuse, pack
from agent_core.store.search import bm25, idf, query_terms, terms

log = logging.getLogger(__name__)

CHUNK_CHARS = 1200
SUFFIXES = (".md", ".markdown", ".txt", ".rst")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.MULTILINE)
_MAX_FILE = 2 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Document:
    """One retrievable piece of a knowledge base."""

    document_id: str
    text: str
    source: str
    title: str = ""


@dataclass(frozen=True, slots=True)
class Found:
    """A document and how well it matches a query (0..1, best first)."""

    document: Document
    relevance_score: float

    def as_dict(self) -> dict[str, object]:
        """As the retriever answers it."""
        d = self.document
        return {"document_id": d.document_id, "text": d.text, "source": d.source,
                "title": d.title, "relevance_score": round(self.relevance_score, 4)}


def chunks(text: str, *, size: int = CHUNK_CHARS) -> list[tuple[str, str]]:
    """(heading, text) pieces of a Markdown or text file, each at most about ``size``
    characters, cut at headings and then at paragraph ends."""
    sections: list[tuple[str, str]] = []
    starts = [(m.start(), m.group(2)) for m in _HEADING.finditer(text)]
    if not starts or starts[0][0] > 0:
        starts.insert(0, (0, ""))
    for i, (start, heading) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(text)
        body = text[start:end].strip()
        if body and body.lstrip("#").strip() != heading:  # more than its heading line
            sections.append((heading, body))
    pieces: list[tuple[str, str]] = []
    for heading, body in sections:
        current = ""
        for raw in re.split(r"\n\s*\n", body):
            paragraph = raw.strip()
            if not paragraph:
                continue
            if current and len(current) + len(paragraph) + 2 > size:
                pieces.append((heading, current))
                current = f"{heading}\n\n{paragraph}" if heading else paragraph
            else:
                current = f"{current}\n\n{paragraph}" if current else paragraph
            while len(current) > size * 2:  # one huge paragraph: cut it
                pieces.append((heading, current[:size]))
                current = current[size:]
        if current:
            pieces.append((heading, current))
    return pieces


@dataclass
class KnowledgeBase:
    """The documents of one knowledge base, indexed for search."""

    kb_id: str
    documents: list[Document] = field(default_factory=list)
    _terms: list[Counter[str]] = field(default_factory=list)
    _freq: Counter[str] = field(default_factory=Counter)
    _vectors: list[bytes] = field(default_factory=list)
    _avg: float = 1.0

    @classmethod
    def from_folder(cls, kb_id: str, folder: Path) -> KnowledgeBase:
        """Every Markdown/text file under ``folder``, chunked."""
        if not folder.is_dir():
            raise FileNotFoundError(f"knowledge base {kb_id!r}: {folder} is not a folder")
        kb = cls(kb_id)
        for path in sorted(p for p in folder.rglob("*") if p.suffix.lower() in SUFFIXES
                           and p.is_file()):
            if path.stat().st_size > _MAX_FILE:
                log.warning("knowledge base %s: %s skipped (over 2 MB)", kb_id, path)
                continue
            relative = path.relative_to(folder).as_posix()
            text = path.read_text(encoding="utf-8", errors="replace")
            for n, (heading, piece) in enumerate(chunks(text), start=1):
                kb.add(Document(f"{kb_id}:{relative.replace(' ', '_')}#{n}", piece,
                                f"{relative}" + (f" › {heading}" if heading else ""),
                                heading))
        log.info("knowledge base %s: %d documents from %s", kb_id, len(kb.documents), folder)
        return kb

    def add(self, document: Document) -> None:
        """Index one more document."""
        counted = Counter(terms(document.text))
        self.documents.append(document)
        self._terms.append(counted)
        self._freq.update(counted.keys())
        self._avg = sum(sum(c.values()) for c in self._terms) / len(self._terms)

    async def embed(self, embedder: Embedder) -> None:
        """Vectors for every document (vector search from then on)."""
        vectors = await embedder.embed([d.text for d in self.documents])
        self._vectors = [pack(v) for v in vectors]

    def keyword(self, query: str) -> list[tuple[int, float]]:
        """(document index, BM25 score) of the documents sharing a term with ``query``,
        best first."""
        wanted = query_terms(query)
        total = len(self.documents)
        scored = []
        for index, counted in enumerate(self._terms):
            length = sum(counted.values())
            score = sum(bm25(counted[t], length, self._avg, idf(total, self._freq[t]))
                        for t in wanted if counted[t])
            if score > 0:
                scored.append((index, score))
        return sorted(scored, key=lambda x: -x[1])

    async def search(self, query: str, limit: int, embedder: Embedder | None = None
                     ) -> list[Found]:
        """The best ``limit`` documents for ``query``. Keywords alone: the score is BM25
        relative to the best match (1.0); with vectors: the rank fusion of both, scored by
        cosine similarity."""
        keyword = self.keyword(query)
        if embedder is None or not self._vectors:
            if not keyword:
                return []
            top = keyword[0][1]
            return [Found(self.documents[i], s / top) for i, s in keyword[:limit]]
        [vector] = await embedder.embed([query])
        similarity = {i: cosine(vector, v) for i, v in enumerate(self._vectors)}
        by_vector = [i for i, s in sorted(similarity.items(), key=lambda x: -x[1]) if s > 0]
        fused = fuse([i for i, _ in keyword], by_vector)[:limit]
        return [Found(self.documents[i], max(0.0, min(1.0, similarity[i]))) for i in fused]


def relative_scores(scores: list[float]) -> list[float]:
    """Scores as fractions of the best one (for results from elsewhere, like recall)."""
    top = max(scores, default=0.0)
    return [s / top if top > 0 and math.isfinite(s) else 0.0 for s in scores]
