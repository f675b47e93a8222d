"""RAG as two hub agents: a retriever (``retrieve``) and a generator (``generate``).

The retriever answers ``{query, knowledge_base_id?, top_k?}`` with documents
(``document_id``, ``text``, ``source``, ``relevance_score``) from a loaded knowledge base
(``HUB_KNOWLEDGE_BASES``), from the archive of the conversation the request acts for (the
one the recall tool searches: ``conversation:<id>``), or from all of them (``*``: every
loaded base, plus that archive). Which conversation a request acts for comes from the bus
(``TaskRequest.conversation``: the core's assertion, from the chat the work came from),
never from the arguments: a request for another conversation's archive, or one acting for
none, is refused.

The generator answers ``{question, retrieved_docs, prompt_template?, min_score?,
knowledge_base_id?}`` with an answer that cites the ``document_id``s it used, checked
against the documents it was given. It drops documents scored under ``min_score``, and its
model may ask the retriever once more, through the hub, when the documents do not answer
the question (the ``retrieve_more`` tool: one call per answer).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from agent_core import ConfigError, ToolContext, ToolError, tool
from agent_core import TaskRequest as AgentTask
from agent_core.runtime import Runtime
from agent_core.store import ConversationStore
from agent_core.store.embeddings import Embedder
from agent_core.tools import Tool

from ..agent import Agent
from ..messages import TaskRequest, TaskResponse
from .corpus import Document, Found, KnowledgeBase, relative_scores

log = logging.getLogger(__name__)

RETRIEVER_ID, GENERATOR_ID = "retriever", "generator"
ALL = "*"
_CONVERSATION = "conversation:"
_TOP_K, _MAX_TOP_K = 5, 50
_MIN_SCORE = 0.2
_MAX_DOC_CHARS = 4000
#: The generator's task extra holding the conversation its request acts for.
_ACTS_FOR = "acts_for_conversation"

TEMPLATE = """Answer the question from the documents below, and cite each document you use
by its id in square brackets, like [handbook:claims.md#2]. If they do not answer it, call
retrieve_more once with a better query; if they still do not, say what is missing.

Documents:
{documents}

Question: {question}"""

SYSTEM_PROMPT = ("You answer questions from documents you are given, citing them by id in "
                 "square brackets. You never invent a document id or a fact the documents do "
                 "not state.")

Archive = Callable[[], Awaitable[ConversationStore]]


class RetrieverAgent(Agent):
    """Finds documents for a query."""

    concurrency = 16
    version = "1"

    def __init__(self, knowledge_bases: Mapping[str, KnowledgeBase], *,
                 archive: Archive | None = None, embedder: Embedder | None = None,
                 agent_id: str = RETRIEVER_ID) -> None:
        super().__init__()
        self.agent_id = agent_id
        self.capabilities = ("retrieve",)
        self.knowledge_bases = dict(knowledge_bases)
        self.archive = archive
        self.embedder = embedder

    async def on_message(self, request: TaskRequest) -> TaskResponse:
        args = request.arguments
        query = args.get("query") or args.get("text")
        kb_id = args.get("knowledge_base_id") or ALL
        top_k = args.get("top_k", _TOP_K)
        own = request.conversation  # what the bus proved; an argument never widens it
        if not isinstance(query, str) or not query.strip():
            return self._invalid(request, "query", "a non-empty string")
        if not isinstance(kb_id, str):
            return self._invalid(request, "knowledge_base_id", "a string")
        if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= _MAX_TOP_K:
            return self._invalid(request, "top_k", f"a whole number from 1 to {_MAX_TOP_K}")
        sources: list[str] = []
        if kb_id == ALL:
            sources = sorted(self.knowledge_bases)
            if own:
                sources.append(_CONVERSATION + own)
        elif kb_id in self.knowledge_bases:
            sources = [kb_id]
        elif kb_id.startswith(_CONVERSATION):
            if kb_id != _CONVERSATION + (own or ""):
                log.warning("retriever: %s (from %s, acting for %s) refused",
                            kb_id, request.requester or request.sender_id, own or "none")
                return self.respond(request, "failed", {
                    "error": "a conversation's archive is searched only for a request from "
                             "that conversation" + (f" (this one acts for {own})" if own
                                                    else " (this one acts for none)"),
                    "field": "knowledge_base_id"}, error_code="PERMISSION")
            sources = [kb_id]
        else:
            known = ", ".join(sorted(self.knowledge_bases)) or "none loaded"
            return self.respond(request, "failed", {
                "error": f"no knowledge base {kb_id!r} (loaded: {known}; or "
                         "conversation:<id>, or * for all)"},
                error_code="UNKNOWN_KNOWLEDGE_BASE")
        found: list[Found] = []
        for source in sources:
            found += await self._search(source, query, top_k)
        found.sort(key=lambda f: -f.relevance_score)
        return self.respond(request, "success", {
            "query": query, "knowledge_base_id": kb_id,
            "documents": [f.as_dict() for f in found[:top_k]]})

    async def _search(self, source: str, query: str, limit: int) -> list[Found]:
        if not source.startswith(_CONVERSATION):
            return await self.knowledge_bases[source].search(query, limit, self.embedder)
        if self.archive is None:
            return []
        cid = source.removeprefix(_CONVERSATION)
        store = await self.archive()
        hits = await store.recall(cid, query, limit)
        scores = relative_scores([h.score for h in hits])
        return [Found(Document(
            f"{source}#{h.message_id}", h.content[:_MAX_DOC_CHARS],
            f"conversation {cid}, {h.role}, "
            f"{dt.datetime.fromtimestamp(h.ts, dt.UTC):%Y-%m-%d %H:%M} UTC", h.summary),
            score) for h, score in zip(hits, scores, strict=True)]

    def _invalid(self, request: TaskRequest, field: str, rule: str) -> TaskResponse:
        return self.respond(request, "failed", {"field": field, "rule": rule},
                            error_code="INVALID_ARGUMENTS")


class GeneratorAgent(Agent):
    """Answers a question from retrieved documents, citing them."""

    concurrency = 8
    version = "1"

    def __init__(self, runtime: Runtime, *, agent_id: str = GENERATOR_ID) -> None:
        super().__init__()
        self.agent_id = agent_id
        self.capabilities = ("generate",)
        self.runtime = runtime
        #: Per task (its trace id): the documents its follow-up retrieval found, and the
        #: tasks that have made theirs.
        self._more: dict[str, list[dict[str, Any]]] = {}
        self._asked: set[str] = set()
        runtime.registry.add(self.retrieve_more_tool())

    async def on_message(self, request: TaskRequest) -> TaskResponse:
        args = request.arguments
        question = args.get("question") or args.get("query") or args.get("text")
        template = args.get("prompt_template") or TEMPLATE
        min_score = args.get("min_score", _MIN_SCORE)
        docs = args.get("retrieved_docs", [])
        if not isinstance(question, str) or not question.strip():
            return self._invalid(request, "question", "a non-empty string")
        if not isinstance(template, str) or "{question}" not in template or \
                "{documents}" not in template:
            return self._invalid(request, "prompt_template",
                                 "a string with {question} and {documents} in it")
        if not isinstance(min_score, int | float) or isinstance(min_score, bool):
            return self._invalid(request, "min_score", "a number from 0 to 1")
        if not isinstance(docs, list) or not all(_is_document(d) for d in docs):
            return self._invalid(request, "retrieved_docs", "a list of documents, each with "
                                 "a document_id and a text (and a relevance_score)")
        kept = [d for d in docs if float(d.get("relevance_score", 1.0)) >= min_score]
        dropped = [d["document_id"] for d in docs if d not in kept]
        prompt = template.replace("{documents}", _listed(kept) or "(none)").replace(
            "{question}", question)
        self._more[request.task_id] = []
        try:
            result = await self.runtime.loop.run(AgentTask(
                text=prompt, conversation_id=f"hub:{self.agent_id}:{request.task_id}",
                user_id=f"hub:{request.sender_id}", role="agent",
                permissions=frozenset({"read"}), trace_id=request.task_id,
                deadline=request.deadline_ms / 1000,
                data_dir=self.runtime.settings.hermes_data_dir,
                extra={"unattended": True, "correlation_id": request.correlation_id,
                       "knowledge_base_id": args.get("knowledge_base_id") or ALL,
                       # The request's own (the bus proved it), carried to retrieve_more.
                       _ACTS_FOR: request.conversation}))
        except ConfigError as exc:
            return self.respond(request, "failed", {"error": str(exc)},
                                error_code="NOT_CONFIGURED")
        finally:
            more = self._more.pop(request.task_id, [])
            self._asked.discard(request.task_id)
            await self.runtime.store.forget(f"hub:{self.agent_id}:{request.task_id}")
        if result.outcome != "answered":
            return self.respond(request, "failed", {"error": result.text},
                                error_code=result.outcome.upper())
        known = [d["document_id"] for d in kept + more]
        cited = [i for i in dict.fromkeys(_CITATION.findall(result.text)) if i in known]
        return self.respond(request, "success", {
            "answer": result.text, "citations": cited, "used": known, "dropped": dropped,
            "follow_up": {"documents": [d["document_id"] for d in more]} if more else None})

    def retrieve_more_tool(self) -> Tool:
        """The model's one follow-up retrieval, through the hub."""
        agent = self

        @tool(name="retrieve_more", timeout=60, retries=0)
        async def retrieve_more(query: str, ctx: ToolContext | None = None) -> dict[str, Any]:
            """Search the knowledge base again with a better query, when the documents you
            were given do not answer the question. You may call it once.

            Args:
                query: What to search for: the names, terms or numbers the answer needs.
            """
            if ctx is None or ctx.services.delegation is None:
                raise ToolError("no hub is connected: answer from the documents you have")
            found = agent._more.get(ctx.trace_id)
            if found is None:
                raise ToolError("not answering a request")
            if ctx.trace_id in agent._asked:
                raise ToolError("retrieve_more was used already: answer from the documents "
                                "you have, or say what is missing")
            agent._asked.add(ctx.trace_id)
            extra = ctx.extra
            outcome = await ctx.services.delegation.delegate(
                "retrieve", query, arguments={
                    "query": query, "knowledge_base_id": extra.get("knowledge_base_id", ALL)},
                deadline_ms=20_000, correlation_id=str(extra.get("correlation_id")
                                                       or ctx.trace_id),
                conversation_id=extra.get(_ACTS_FOR))
            if outcome.status != "success":
                raise ToolError(f"the retriever could not search: {outcome.error_code}")
            documents = [d for d in outcome.result.get("documents", []) if _is_document(d)]
            found.extend(documents)
            return {"documents": [{"document_id": d["document_id"], "source":
                                   d.get("source", ""), "text": d["text"][:_MAX_DOC_CHARS]}
                                  for d in documents]}

        return retrieve_more

    def _invalid(self, request: TaskRequest, field: str, rule: str) -> TaskResponse:
        return self.respond(request, "failed", {"field": field, "rule": rule},
                            error_code="INVALID_ARGUMENTS")


#: A cited document id: ``[handbook:claims.md#2]`` (several may share brackets: ``[a; b]``).
_CITATION = re.compile(r"[\[;,]\s*([A-Za-z0-9_.:@/-]+#[A-Za-z0-9_.:@-]+)\s*(?=[\];,])")


def _is_document(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("document_id"), str) and \
        isinstance(value.get("text"), str) and \
        isinstance(value.get("relevance_score", 1.0), int | float)


def _listed(documents: list[dict[str, Any]]) -> str:
    return "\n\n".join(
        f"[{d['document_id']}] ({d.get('source') or 'no source'})\n"
        f"{d['text'][:_MAX_DOC_CHARS]}" for d in documents)

