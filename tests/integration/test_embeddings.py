"""Recall with an embedding backend: the interface, the OpenAI-compatible client, fusion."""

from __future__ import annotations

from typing import Any

from agent_core import Settings
from agent_core.messages import Message
from agent_core.models.replay import ReplayModelServer
from agent_core.store.embeddings import Embedder, fuse
from agent_core.store.factory import build_embedder
from tests.conftest import StoreFactory

# A tiny "semantic" space: words with the same meaning share a dimension.
MEANING = {"car": 0, "automobile": 0, "vehicle": 0, "red": 1, "colour": 1, "color": 1,
           "invoice": 2, "bill": 2, "deploy": 3, "release": 3}


class MeaningEmbedder(Embedder):
    """Stands in for an embedding model in these tests."""

    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.calls = 0

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        if self.fail:
            raise ConnectionError("embedding service down")
        out = []
        for text in texts:
            vector = [0.0] * 5
            for word in text.lower().replace("?", " ").split():
                vector[MEANING.get(word, 4)] += 1.0
            out.append(vector)
        return out


async def archive(store: Any, cid: str, texts: list[str]) -> None:
    messages = [Message(role="user", content=t, tokens=10) for t in texts]
    await store.append(cid, messages)
    await store.rewrite_window(cid, [], messages, base=[m.id for m in messages])


async def test_vector_recall_finds_what_keywords_cannot(make_store: StoreFactory) -> None:
    texts = ["my car is red", "the invoice was paid", "we deploy on fridays"]
    plain = make_store()
    await archive(plain, "e:1", texts)
    assert await plain.recall("e:1", "which automobile colour?", 3) == []

    store = make_store(embedder=MeaningEmbedder())
    await archive(store, "e:1", texts)
    hits = await store.recall("e:1", "which automobile colour?", 1)
    assert [h.content for h in hits] == ["my car is red"]
    # Keyword matches still count: both rankings are fused.
    both = await store.recall("e:1", "invoice bill", 2)
    assert both[0].content == "the invoice was paid"
    assert await store.recall("e:2", "automobile", 3) == [], "never another conversation"


async def test_a_broken_embedder_falls_back_to_keywords(make_store: StoreFactory) -> None:
    store = make_store(embedder=MeaningEmbedder(fail=True))
    await archive(store, "e:1", ["the invoice was paid", "my car is red"])
    hits = await store.recall("e:1", "invoice", 3)
    assert [h.content for h in hits] == ["the invoice was paid"]


async def test_the_openai_compatible_embedder(model_server: ReplayModelServer) -> None:
    settings = Settings(_env_file=None, recall_embeddings={  # type: ignore[call-arg]
        "provider": "openai", "model_name": "text-embedding-test",
        "base_url": model_server.openai_url, "api_key": "sk-embed-0123456789abcdef"})
    embedder = build_embedder(settings)
    assert embedder is not None
    try:
        vectors = await embedder.embed(["alpha beta", "gamma", "alpha beta"])
    finally:
        await embedder.aclose()
    assert len(vectors) == 3 and vectors[0] == vectors[2] and vectors[0] != vectors[1]
    path, body = model_server.requests[-1]
    assert path == "/v1/embeddings" and body["model"] == "text-embedding-test"
    assert body["input"] == ["alpha beta", "gamma", "alpha beta"]


def test_rank_fusion_rewards_agreement() -> None:
    assert fuse([1, 2, 3], [3, 1, 4]) == [1, 3, 2, 4]
