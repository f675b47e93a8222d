"""Embeddings for recall: the interface, an OpenAI-compatible backend, and vector math.

Keyword search (BM25 over the archive's postings) is the default. A deployment with an
embedding model sets RECALL_EMBEDDINGS; archived messages then also get a vector, and recall
re-ranks the keyword candidates together with the most recent archived messages by cosine
similarity to the query, fusing both rankings (reciprocal rank fusion). A message that
shares no word with the query can be found that way when it is among the recent ones.
"""

from __future__ import annotations

import abc
import math
import struct
from typing import Any

from ..errors import ModelResponseError
from ..models._http import ModelHTTP
from ..models.base import ModelRequest


class Embedder(abc.ABC):
    """Turns texts into vectors of one fixed dimension."""

    name: str = "embedder"

    @abc.abstractmethod
    async def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


class OpenAIEmbedder(Embedder):
    """``POST {base}/embeddings``: OpenAI, vLLM, llama.cpp, Ollama's /v1 and others."""

    def __init__(self, http: ModelHTTP, model_name: str, *, batch: int = 64) -> None:
        self.http = http
        self.model_name = model_name
        self.batch = batch
        self.name = f"{http.provider}:{model_name}"

    async def aclose(self) -> None:
        await self.http.aclose()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch):
            chunk = [t[:8000] or " " for t in texts[start:start + self.batch]]
            data = await self.http.post_json(
                "/embeddings", {"model": self.model_name, "input": chunk},
                ModelRequest(messages=[]))
            rows: Any = data.get("data")
            if not isinstance(rows, list) or len(rows) != len(chunk):
                raise ModelResponseError("the embeddings response has the wrong number of rows")
            ordered = sorted(rows, key=lambda r: int(r.get("index", 0)))
            out.extend([float(x) for x in row["embedding"]] for row in ordered)
        return out


def pack(vector: list[float]) -> bytes:
    """A unit-length float32 vector, packed."""
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return struct.pack(f"<{len(vector)}f", *(x / norm for x in vector))


def cosine(query: list[float], packed: bytes) -> float:
    """Cosine similarity of a query and a packed unit vector (0 when sizes differ)."""
    dims = len(packed) // 4
    if dims != len(query):
        return 0.0
    other = struct.unpack(f"<{dims}f", packed)
    norm = math.sqrt(sum(x * x for x in query)) or 1.0
    return float(sum(a * b for a, b in zip(query, other, strict=True))) / norm


def fuse(*rankings: list[int], k: int = 60) -> list[int]:
    """Reciprocal rank fusion of several rankings of the same ids, best first."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank + 1)
    return sorted(scores, key=lambda item: -scores[item])
