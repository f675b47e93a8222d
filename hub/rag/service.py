"""The retriever and generator agents as one of the hub's services (with HUB_RAG or
HUB_KNOWLEDGE_BASES): knowledge bases loaded (and embedded, with RECALL_EMBEDDINGS), both
agents on the bus. The conversation archive is the store's: the gateway's own, or one
opened on first use by a ``hermes-gateway hub`` process."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from agent_core import ConfigError
from agent_core.runtime import Runtime, UnconfiguredModel, build_runtime
from agent_core.store import ConversationStore, MemoryConversationStore, OpenStore, open_store
from agent_core.store.factory import build_embedder
from agent_core.tools import Services, ToolRegistry

from ..agent import AgentRunner
from ..bus import Bus
from ..delegation import HubDelegation
from ..settings import HubSettings
from .agents import GENERATOR_ID, SYSTEM_PROMPT, GeneratorAgent, RetrieverAgent
from .corpus import KnowledgeBase

#: The workflow that answers from documents: retrieve, then generate.
RAG_WORKFLOW = Path(__file__).parent.parent / "workflows" / "shipped" / "rag_answer.yaml"
#: A small corpus that ships with the hub (knowledge base ``claims-handbook``).
SAMPLE = Path(__file__).parent / "sample" / "claims-handbook"


class RagService:
    """Runs the retriever and the generator until stopped."""

    def __init__(self, bus: Bus, settings: HubSettings, *,
                 store: ConversationStore | None = None) -> None:
        self.bus = bus
        self.settings = settings
        self._store = store
        self._opened: OpenStore | None = None
        self._opening = asyncio.Lock()
        self._runners: list[AgentRunner] = []
        self._runtime: Runtime | None = None
        self._embedder = build_embedder(settings)

    async def archive(self) -> ConversationStore:
        """The conversation store (opened on first use when not given)."""
        async with self._opening:
            if self._store is None:
                self._opened = await open_store(self.settings, pooled=4)
                self._store = self._opened.store
            return self._store

    async def start(self) -> None:
        bases = {}
        for kb_id, folder in self.settings.hub_knowledge_bases.items():
            try:
                bases[kb_id] = await asyncio.to_thread(KnowledgeBase.from_folder, kb_id,
                                                       Path(folder))
            except (OSError, UnicodeError) as exc:
                raise ConfigError(f"HUB_KNOWLEDGE_BASES: {exc}") from None
            if self._embedder is not None:
                await bases[kb_id].embed(self._embedder)
        settings = self.settings
        model = None if settings.model_configured else UnconfiguredModel()
        self._runtime = build_runtime(settings.model_copy(update={
            "agent_system_prompt": SYSTEM_PROMPT, "hermes_tools": []}),
            store=MemoryConversationStore(), model=model, registry=ToolRegistry())
        self._runtime.loop.services = Services(delegation=HubDelegation(self.bus,
                                                                        GENERATOR_ID))
        for agent in (RetrieverAgent(bases, archive=self.archive, embedder=self._embedder),
                      GeneratorAgent(self._runtime)):
            runner = AgentRunner(self.bus, agent)
            await runner.start()
            self._runners.append(runner)

    async def stop(self) -> None:
        await asyncio.gather(*(r.stop() for r in self._runners))
        if self._runtime is not None:
            with contextlib.suppress(Exception):
                await self._runtime.aclose()
        if self._embedder is not None:
            await self._embedder.aclose()
        if self._opened is not None:
            await self._opened.close()
