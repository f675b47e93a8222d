"""The hub's services, started together: discovery, the deadline watch, enrolment, the
context store and the tool service, the hub's own agents (the workflow executor, the RAG
agents) and the bridges to other agent protocols. ``hermes-gateway hub`` runs them (several
copies may), and so does the gateway with ``HERMES_HUB``; they are the hub's core
(``identity.CORE``), but for the bridges, which connect as ``identity.BRIDGE``."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from agent_core.runtime import build_executor
from agent_core.store import ConversationStore
from agent_core.tools import ToolRegistry

from .bus import Bus
from .calls import ContextService, ToolService
from .deadlines import DeadlineWatch
from .discovery import Discovery
from .enrolment import Enrolment
from .settings import HubSettings

if TYPE_CHECKING:
    from .bridges.sap_host import LocalAgent


class Service(Protocol):
    """Something that runs between ``start`` and ``stop``."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def hub_services(bus: Bus, settings: HubSettings) -> list[Service]:
    """Every service of the hub, not started. The tool service runs the tools of
    HERMES_TOOLS that HUB_TOOLS allowlists (none by default)."""
    registry = ToolRegistry(t for t in ToolRegistry.from_modules(settings.hermes_tools)
                            if t.name in settings.hub_tools)
    tools = ToolService(bus, registry, build_executor(settings, registry),
                        allowlist=tuple(settings.hub_tools), data_dir=settings.hermes_data_dir,
                        extra=settings.tool_extra())
    return [Discovery(bus), DeadlineWatch(bus), Enrolment(bus), ContextService(bus), tools]


def hub_agents(bus: Bus, settings: HubSettings, *,
               store: ConversationStore | None = None) -> list[Service]:
    """The agents that run with the hub's services, not started: the workflow executor
    (HUB_EXECUTOR, with the definitions of HUB_WORKFLOWS_FILE) and, with HUB_RAG or
    HUB_KNOWLEDGE_BASES, the retriever and generator (and the rag_answer workflow).
    ``store``: the conversation store whose archive the retriever searches (default: one
    opened on first use)."""
    rag = settings.hub_rag or bool(settings.hub_knowledge_bases)
    agents: list[Service] = []
    if rag:
        from .rag.service import RagService

        agents.append(RagService(bus, settings, store=store))
    if settings.hub_executor:
        from .rag.service import RAG_WORKFLOW
        from .workflows.service import ExecutorService

        files = [settings.hub_workflows_file] if settings.hub_workflows_file else []
        agents.append(ExecutorService(bus, files=[*files, *([RAG_WORKFLOW] if rag else [])]))
    return agents


async def start_services(bus: Bus, settings: HubSettings,
                         stack: contextlib.AsyncExitStack, *,
                         store: ConversationStore | None = None,
                         local: Sequence[LocalAgent] = ()) -> list[Service]:
    """Start every service, the hub's own agents and the bridges; ``stack`` stops them (in
    reverse order). MCP servers whose tools HUB_TOOLS names (``<server>__<tool>``) are
    connected for the tool service. ``local``: agents of this process (the gateway's own)
    the bridge offers in the Synadia Agent Protocol too."""
    services = hub_services(bus, settings)
    tools = next(s for s in services if isinstance(s, ToolService))
    wanted = {name: config for name, config in settings.hermes_mcp_servers.items()
              if any(t.startswith(f"{name}__") for t in settings.hub_tools)}
    if wanted:
        from agent_core.mcp import McpServers

        mcp = McpServers(wanted, tools.registry, data_dir=settings.hermes_data_dir / "hub")
        await mcp.start()
        stack.push_async_callback(mcp.aclose)
    for service in [*services, *hub_agents(bus, settings, store=store)]:
        await service.start()
        stack.push_async_callback(service.stop)
    if settings.hub_agent_protocol or settings.hub_a2a_agents:
        from .bridges import Bridges

        bridges = Bridges(settings, local=local)
        stack.push_async_callback(bridges.stop)
        await bridges.start()
    return services
