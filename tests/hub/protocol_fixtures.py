"""A hub with its services and the bridges on the session's nats-server, and clients of the
Synadia Agent Protocol built with the stock SDKs (``synadia-ai-agents`` to call,
``synadia-ai-agent-service`` to host), each logged in as a protocol participant of its own
(``sap-<owner>``)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from synadia_ai.agent_service import AgentService, PromptStream
from synadia_ai.agents import Agents, Envelope, Identity, signer_from_creds_file

from hub import AgentRunner, Bus, TaskRequest
from hub.bridges import Bridges
from hub.discovery import discover
from hub.services import hub_services
from tests.conftest import NatsServer
from tests.hub.conftest import BusFactory, unique
from tests.hub.test_workflows import Handler, Scripted


def answering(**result: Any) -> Handler:
    async def handler(request: TaskRequest) -> tuple[str, dict[str, Any]]:
        return "success", {**result, "got": request.arguments.get("text")}

    return handler


def owner_token() -> str:
    """An owner token of this test's own (the server is the session's)."""
    return f"t{uuid.uuid4().hex[:10]}"


@dataclass
class BridgedHub:
    """The hub's services, its bridges, and what one test starts on them."""

    nats: NatsServer
    bus: Bus
    make_bus: BusFactory
    owner: str
    stack: contextlib.AsyncExitStack
    runners: list[AgentRunner] = field(default_factory=list)
    bridges: Bridges | None = None

    async def agent(self, prefix: str, handler: Handler, *capabilities: str) -> Scripted:
        agent = Scripted(unique(prefix), tuple(capabilities), handler)
        runner = AgentRunner(self.bus, agent)
        await runner.start()
        self.runners.append(runner)
        return agent

    async def start_bridges(self, **settings: Any) -> Bridges:
        bridges = Bridges(self.bus.settings.model_copy(update={
            "hub_bridge_creds_file": self.nats.creds("bridge"),
            "hub_agent_protocol_owner": self.owner, "hub_agent_protocol_scan": 0.5,
            "hub_agent_protocol_heartbeat": 1, **settings}))
        self.stack.push_async_callback(bridges.stop)
        await bridges.start()
        self.bridges = bridges
        return bridges

    async def participant(self, owner: str | None = None) -> tuple[Client, str]:
        """A connection as the protocol participant ``sap-<owner>``, and its .creds."""
        identity = f"sap-{owner or owner_token()}"
        creds = self.nats.creds(identity)
        nc = await nats.connect(self.nats.url, user_credentials=creds,
                                inbox_prefix=f"_INBOX.{identity}")
        self.stack.push_async_callback(nc.close)
        return nc, creds

    async def caller(self, *, signed: bool = True) -> Agents:
        """A stock SDK caller (its prompts signed with its NATS key unless ``signed`` is
        False)."""
        nc, creds = await self.participant()
        agents = Agents(nc=nc, identity=Identity(signer=signer_from_creds_file(creds))
                        if signed else None)
        self.stack.push_async_callback(agents.close)
        return agents

    async def host(self, agent: str, handler: Callable[[Envelope, PromptStream],
                                                        Awaitable[None]],
                   **options: Any) -> tuple[AgentService, str]:
        """A protocol agent built with the stock host SDK, under an owner of its own."""
        owner = owner_token()
        nc, _ = await self.participant(owner)
        service = AgentService(agent=agent, owner=owner, session_name="default", nc=nc,
                               heartbeat_interval_s=1, **options)
        service.on_prompt(handler)
        await service.start()
        self.stack.push_async_callback(service.stop)
        return service, owner


@pytest.fixture
async def bridged(nats: NatsServer, make_bus: BusFactory) -> AsyncIterator[BridgedHub]:
    async with contextlib.AsyncExitStack() as stack:
        bus = await make_bus(hub_bridge_creds_file=nats.creds("bridge"))
        for service in hub_services(bus, bus.settings):
            await service.start()
            stack.push_async_callback(service.stop)
        hub = BridgedHub(nats, bus, make_bus, owner_token(), stack)

        async def stop_runners() -> None:
            await asyncio.gather(*(r.stop() for r in hub.runners))

        stack.push_async_callback(stop_runners)
        yield hub


async def until_discovered(bus: Bus, agent_id: str, intent: str = "*") -> None:
    async with asyncio.timeout(20):
        while agent_id not in {c.agent_id for c in await discover(bus, intent)}:
            await asyncio.sleep(0.05)
