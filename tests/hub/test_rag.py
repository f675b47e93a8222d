"""RAG as hub agents on a real nats-server: the retriever over the shipped corpus and a
conversation's archive, the generator against the scripted model (which reads the prompt it
is sent, as a model would), and the rag_answer workflow that joins them."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent_core.messages import Message
from agent_core.models.replay import ReplayModelServer, Reply
from hub import Bus, TaskRequest, TaskResponse
from hub.rag.agents import RetrieverAgent
from hub.rag.corpus import KnowledgeBase, chunks
from hub.rag.service import SAMPLE
from hub.services import hub_agents, hub_services
from tests.conftest import StoreFactory
from tests.hub.conftest import BusFactory, unique
from tests.hub.test_workflows import until_discovered

CORPUS = {d.document_id: d.text for d in KnowledgeBase.from_folder("claims-handbook",
                                                                    SAMPLE).documents}
_ID = re.compile(r"(?:claims-handbook|conversation:[\w:.-]+):?[\w./-]*#[\w-]+")


def reader(phrase: str, answer: str, *, invent: bool = True) -> Callable[[str, dict[str, Any]],
                                                                             Reply]:
    """A model that answers ``answer`` citing each document it was shown (in the prompt or
    in a tool's result) whose text has ``phrase``, plus an id it made up."""
    def respond(path: str, body: dict[str, Any]) -> Reply:
        shown = "\n".join(str(m.get("content")) for m in body["messages"]
                          if m["role"] in ("user", "tool"))
        cited = [i for i in dict.fromkeys(_ID.findall(shown))
                 if phrase in CORPUS.get(i, "") or phrase in _TEXTS.get(i, "")]
        made_up = " [claims-handbook:made-up.md#9]" if invent else ""
        return Reply(text=f"{answer} {' '.join(f'[{i}]' for i in cited)}{made_up}".strip())

    return respond


#: Texts of documents outside the shipped corpus (the archive's), by id.
_TEXTS: dict[str, str] = {}


@dataclass
class Rag:
    bus: Bus
    model: ReplayModelServer

    async def ask(self, agent_id: str, intent: str, *, acting_for: str | None = None,
                  **arguments: Any) -> TaskResponse:
        """A request from the hub's core, for the conversation ``acting_for`` (as the
        gateway's delegate sends it for the chat it works in)."""
        return await self.bus.request(agent_id, TaskRequest(
            sender_id=unique("caller"), intent=intent, arguments=arguments,
            deadline_ms=60_000).for_conversation(acting_for))


@pytest.fixture
async def rag(make_bus: BusFactory, model_server: ReplayModelServer,
              make_store: StoreFactory, tmp_path: Path) -> AsyncIterator[Rag]:
    """The hub's services, the executor (with rag_answer) and the RAG agents, the generator
    on the scripted model, the archive on a real store."""
    store = make_store()
    async with contextlib.AsyncExitStack() as stack:
        bus = await make_bus(hub_knowledge_bases={"claims-handbook": str(SAMPLE)},
                             llm_provider="openai", llm_model_name="scripted",
                             llm_base_url=model_server.openai_url, llm_max_retries=0,
                             llm_api_key="sk-test-0123456789abcdefghij")
        for service in [*hub_services(bus, bus.settings),
                        *hub_agents(bus, bus.settings, store=store)]:
            await service.start()
            stack.push_async_callback(service.stop)
        for agent_id in ("retriever", "generator", "workflow-executor"):
            await until_discovered(bus, agent_id)
        rag = Rag(bus, model_server)
        rag.store = store  # type: ignore[attr-defined]
        yield rag


def test_files_are_cut_at_headings_and_paragraphs() -> None:
    second = ("second para. " * 120).strip()
    text = "# Title\n\n## One\n\n" + "first para. " * 20 + "\n\n" + second + \
        "\n\n## Two\n\nshort"
    pieces = chunks(text, size=400)
    assert [h for h, _ in pieces] == ["One", "One", "One", "One", "Two"], "no heading-only piece"
    assert all(len(p) <= 800 for _, p in pieces)
    assert pieces[0][1] == "## One\n\n" + ("first para. " * 20).strip()
    assert pieces[1][1].startswith("One\n\nsecond para."), "a new piece keeps its heading"
    assert "".join(p for _, p in pieces[1:4]) == "One\n\n" + second, "nothing is lost"
    assert pieces[-1] == ("Two", "## Two\n\nshort")


async def test_the_retriever_finds_the_shipped_documents_by_keywords(rag: Rag) -> None:
    answer = await rag.ask("retriever", "retrieve", query="windscreen excess on third party",
                           knowledge_base_id="claims-handbook", top_k=2)
    assert answer.status == "success", answer
    first = answer.result["documents"][0]
    assert first["document_id"] == "claims-handbook:windscreen.md#1"
    assert first["relevance_score"] == 1.0 and "150 euros" in first["text"]
    assert first["source"] == "windscreen.md › Windscreen and glass damage"
    police = await rag.ask("retriever", "retrieve", query="police reference for a theft")
    assert police.result["documents"][0]["document_id"] == "claims-handbook:reporting.md#1"
    assert all(d["relevance_score"] <= 1.0 for d in police.result["documents"])


async def test_the_retriever_refuses_what_it_cannot_search(rag: Rag) -> None:
    unknown = await rag.ask("retriever", "retrieve", query="x", knowledge_base_id="wiki")
    assert unknown.error_code == "UNKNOWN_KNOWLEDGE_BASE"
    assert "claims-handbook" in unknown.result["error"]
    for arguments, field in (({}, "query"), ({"query": "x", "top_k": 0}, "top_k"),
                             ({"query": "x", "top_k": True}, "top_k")):
        refused = await rag.ask("retriever", "retrieve", **arguments)
        assert (refused.error_code, refused.result["field"]) == ("INVALID_ARGUMENTS", field)


async def archived(rag: Rag, conversation_id: str, *texts: str) -> list[Message]:
    """``texts`` said in ``conversation_id`` and archived (what recall searches)."""
    store = rag.store  # type: ignore[attr-defined]
    said = [Message(role="user", content=t) for t in texts]
    await store.append(conversation_id, said)
    await store.rewrite_window(conversation_id, [], said, base=[m.id for m in said])
    return said


async def test_the_retriever_searches_the_archive_of_the_conversation_it_acts_for(
        rag: Rag) -> None:
    said = await archived(rag, "web:c7", "my policy number is PX-2291 and the car is blue",
                          "the garage is Autohaus Keller in Leipzig")
    answer = await rag.ask("retriever", "retrieve", acting_for="web:c7",
                           query="which garage?", knowledge_base_id="conversation:web:c7")
    assert answer.status == "success", answer
    [found] = answer.result["documents"]
    assert found["document_id"] == f"conversation:web:c7#{said[1].id}"
    assert "Autohaus Keller" in found["text"]
    # "*" searches every loaded base, and the archive of the conversation it acts for.
    both = await rag.ask("retriever", "retrieve", acting_for="web:c7",
                         query="garage repaired car")
    ids = [d["document_id"] for d in both.result["documents"]]
    assert "claims-handbook:rental.md#1" in ids and f"conversation:web:c7#{said[1].id}" in ids


async def test_no_argument_reaches_another_conversations_archive(rag: Rag) -> None:
    """What a model (or a caller) writes in the arguments never widens the request: another
    conversation by name is refused, an overriding conversation_id is ignored, and a
    request acting for no conversation reads none."""
    await archived(rag, "telegram:victim", "my card PIN is 8841")
    await archived(rag, "slack:T1:C9", "our garage is Autohaus Keller")
    named = await rag.ask("retriever", "retrieve", acting_for="slack:T1:C9",
                          query="card PIN", knowledge_base_id="conversation:telegram:victim",
                          conversation_id="telegram:victim")
    assert (named.status, named.error_code) == ("failed", "PERMISSION"), named
    assert "8841" not in json.dumps(named.result)
    everything = await rag.ask("retriever", "retrieve", acting_for="slack:T1:C9",
                               query="card PIN garage", conversation_id="telegram:victim")
    assert everything.status == "success"
    assert "8841" not in json.dumps(everything.result), "the override was ignored"
    assert "Autohaus Keller" in json.dumps(everything.result), "its own archive still is"
    nobody = await rag.ask("retriever", "retrieve", query="card PIN",
                           knowledge_base_id="conversation:telegram:victim")
    assert (nobody.status, nobody.error_code) == ("failed", "PERMISSION")
    alone = await rag.ask("retriever", "retrieve", query="card PIN garage",
                          conversation_id="telegram:victim")
    assert "8841" not in json.dumps(alone.result) and "Keller" not in json.dumps(alone.result)


async def test_an_agent_cannot_claim_to_act_for_a_conversation(
        rag: Rag, make_bus: BusFactory) -> None:
    """Only the hub's core may say which conversation a request acts for: an ordinary
    agent's credentials sending the core's header (on its own subject, the only one the
    server lets it use) read nothing of that conversation."""
    await archived(rag, "telegram:victim", "my card PIN is 8841")
    mallory = await make_bus(identity=unique("mallory"))
    request = TaskRequest(sender_id=mallory.identity, intent="retrieve", deadline_ms=20_000,
                          arguments={"query": "card PIN",
                                     "knowledge_base_id": "conversation:telegram:victim"}
                          ).for_conversation("telegram:victim")
    answer = await mallory.request("retriever", request)
    assert (answer.status, answer.error_code) == ("failed", "PERMISSION"), answer
    assert "8841" not in json.dumps(answer.result)


async def test_rag_answer_cites_the_right_documents(rag: Rag) -> None:
    rag.model.responder = reader("14 days", "Up to 14 days on the Comprehensive plan.")
    answer = await rag.ask("workflow-executor", "answer_from_documents",
                           text="How long do I get a rental car while mine is repaired?")
    assert answer.status == "success", answer
    output = answer.result["output"]
    assert output["citations"] == ["claims-handbook:rental.md#1"], output
    assert "made-up" not in json.dumps(output["citations"]), "an invented id is not a citation"
    assert output["answer"].startswith("Up to 14 days")
    assert [s["status"] for s in answer.result["steps"]] == ["success", "success"]
    rag.model.responder = reader("10,000 euros", "Above 10,000 euros, among other reasons.")
    fraud = await rag.ask("workflow-executor", "run_workflow", workflow_id="rag_answer",
                          input={"text": "When does a claim go to fraud review?",
                                 "knowledge_base_id": "claims-handbook"})
    assert fraud.result["output"]["citations"] == ["claims-handbook:fraud-review.md#1"]


async def test_the_generator_drops_low_scored_documents_and_asks_again_once(rag: Rag) -> None:
    rental = {"document_id": "claims-handbook:rental.md#1", "source": "rental.md",
              "text": CORPUS["claims-handbook:rental.md#1"], "relevance_score": 0.9}
    weak = {"document_id": "claims-handbook:reporting.md#2", "source": "reporting.md",
            "text": CORPUS["claims-handbook:reporting.md#2"], "relevance_score": 0.05}
    rag.model.add(Reply.call("retrieve_more", {"query": "windscreen replacement excess"}),
                  Reply.call("retrieve_more", {"query": "glass"}))
    rag.model.responder = reader("150 euros", "The excess is 150 euros on that plan.",
                                 invent=False)
    answer = await rag.ask("generator", "generate", question="What is the windscreen excess "
                           "on Third Party, Fire and Theft?", retrieved_docs=[rental, weak],
                           knowledge_base_id="claims-handbook", min_score=0.2)
    assert answer.status == "success", answer
    assert answer.result["dropped"] == ["claims-handbook:reporting.md#2"]
    first_prompt = json.dumps(rag.model.requests[0][1]["messages"])
    assert "14 days" in first_prompt and "police reference" not in first_prompt
    assert answer.result["citations"] == ["claims-handbook:windscreen.md#1"]
    assert "claims-handbook:windscreen.md#1" in answer.result["follow_up"]["documents"]
    second_result = json.dumps(rag.model.requests[2][1]["messages"][-1])
    assert "used already" in second_result, "a second follow-up retrieval is refused"


async def test_the_generator_refuses_bad_arguments(rag: Rag) -> None:
    for arguments, field in (({"retrieved_docs": []}, "question"),
                             ({"question": "q", "retrieved_docs": [{"text": "no id"}]},
                              "retrieved_docs"),
                             ({"question": "q", "prompt_template": "no slots"},
                              "prompt_template")):
        refused = await rag.ask("generator", "generate", **arguments)
        assert (refused.error_code, refused.result["field"]) == ("INVALID_ARGUMENTS", field)
    assert rag.model.requests == [], "nothing reached the model"


async def test_a_retriever_without_an_archive_finds_nothing_there() -> None:
    retriever = RetrieverAgent({})
    request = TaskRequest(sender_id="t", intent="retrieve", deadline_ms=1000,
                          arguments={"query": "x", "knowledge_base_id": "conversation:a"}
                          ).received("hub", "a")
    answer = await retriever.on_message(request)
    assert answer.status == "success" and answer.result["documents"] == []


async def test_with_an_embedding_model_the_retriever_also_finds_by_meaning() -> None:
    """RECALL_EMBEDDINGS (here the scripted server's /v1/embeddings, whose stand-in model
    knows a few synonyms): a query sharing no word with the document still finds it, and
    its score is the cosine similarity."""
    import re as regex

    from agent_core import Settings
    from agent_core.models.replay import hashed_embedding
    from agent_core.store.factory import build_embedder

    synonyms = {"automobile": "car", "hire": "rental", "weeks": "days"}

    def embed(text: str) -> list[float]:
        words = regex.findall(r"[a-z]+", text.lower())
        return hashed_embedding(" ".join(synonyms.get(w, w) for w in words))

    async with ReplayModelServer(embed=embed) as server:
        settings = Settings(_env_file=None, recall_embeddings={  # type: ignore[call-arg]
            "provider": "openai", "model_name": "embedder", "base_url": server.openai_url,
            "api_key": "sk-test-0123456789abcdef"})
        embedder = build_embedder(settings)
        assert embedder is not None
        try:
            kb = KnowledgeBase.from_folder("claims-handbook", SAMPLE)
            assert await kb.search("automobile hire weeks", 3) == [], "no shared keyword"
            await kb.embed(embedder)
            retriever = RetrieverAgent({"claims-handbook": kb}, embedder=embedder)
            answer = await retriever.on_message(TaskRequest(
                sender_id="t", intent="retrieve", deadline_ms=5000,
                arguments={"query": "automobile hire weeks", "top_k": 2}))
        finally:
            await embedder.aclose()
    first = answer.result["documents"][0]
    assert first["document_id"] == "claims-handbook:rental.md#1"
    assert 0 < first["relevance_score"] <= 1
    embedded = [body for path, body in server.requests if path == "/v1/embeddings"]
    assert len(embedded[0]["input"]) == len(kb.documents), "every document, once, at load"
