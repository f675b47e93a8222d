"""The gateway's own agent in the Synadia Agent Protocol: a stock SDK caller (signed, as a
protocol participant of the session's nats-server) prompts ``gateway`` and gets the
scripted model's answer (its tool calls as status chunks before it), routed like an API
message in a conversation of its own, with the prompt's attachments as its files."""

from __future__ import annotations

import asyncio
import uuid

import nats as nats_client
import pytest
from synadia_ai.agents import (
    Agents,
    Attachment,
    DiscoverFilter,
    Identity,
    ProtocolError,
    ResponseChunk,
    StatusChunk,
    signer_from_creds_file,
)

from agent_core.models.replay import Reply
from tests.conftest import NatsServer
from tests.integration import fixture_files as files
from tests.integration.conftest import GatewayFactory
from tests.integration.test_files import text_of, user_content


async def test_the_gateways_agent_answers_a_protocol_prompt(make_gateway: GatewayFactory,
                                                           nats: NatsServer) -> None:
    owner = f"t{uuid.uuid4().hex[:10]}"
    h = await make_gateway(hermes_hub=True, **nats.settings(),
                           hub_bridge_creds_file=nats.creds("bridge"),
                           hub_agent_protocol_owner=owner, hub_agent_protocol_scan=0.5)
    h.model.add(Reply.call("calc_growth_rate", {"current": 2, "previous": 1}),
                Reply("Hello over NATS."))
    creds = nats.creds(f"sap-{owner}-caller")
    nc = await nats_client.connect(nats.url, user_credentials=creds,
                            inbox_prefix=f"_INBOX.sap-{owner}-caller")
    agents = Agents(nc=nc, identity=Identity(signer=signer_from_creds_file(creds)))
    try:
        async with asyncio.timeout(20):
            while not (found := await agents.discover(
                    filter=DiscoverFilter(owner=owner, agent="gateway"))):
                await asyncio.sleep(0.1)
        [agent] = found
        assert agent.metadata["hmp_agent_id"] == "gateway"
        chunks = [c async for c in agent.prompt("hello?")]
        assert chunks[0] == StatusChunk(status="ack")
        # Its tool calls told as they start (their names, never their arguments).
        assert StatusChunk(status="tool: calc_growth_rate") in chunks
        assert chunks[-1] == ResponseChunk(text="Hello over NATS.")
        tasks = [t for t in await _tasks(h) if t.conversation_id.startswith("api:sap-")]
        [task] = tasks
        assert task.user_id.startswith("api:sap:U") and task.status == "answered"
    finally:
        await agents.close()
        await nc.close()


async def _tasks(h: object) -> list[object]:
    store = h.gateway.parts.opened.store  # type: ignore[attr-defined]
    found = []
    async for key in store.redis.scan_iter(match=f"{store.keys.prefix}:task:*"):
        name = key.decode() if isinstance(key, bytes) else key
        if name.count(":") == 2:
            state = await store.load_task(name.rsplit(":", 1)[-1])
            if state is not None:
                found.append(state)
    return found


async def test_an_a2a_caller_uses_a_protocol_agent(make_gateway: GatewayFactory,
                                                  nats: NatsServer) -> None:
    """A2A edge -> task_request -> the bridge -> a prompt to an agent built with the stock
    host SDK, and back: an agent of one protocol answers a caller of another."""
    import httpx
    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.types import a2a_pb2 as pb
    from synadia_ai.agent_service import AgentService

    from hub.bridges.names import sap_id
    from tests.integration.conftest import api_key, bearer

    owner = f"t{uuid.uuid4().hex[:10]}"
    h = await make_gateway(hermes_hub=True, **nats.settings(),
                           hermes_api_keys=[api_key("alice")],
                           hub_bridge_creds_file=nats.creds("bridge"),
                           hub_agent_protocol_owner=f"{owner}-hub",
                           hub_agent_protocol_scan=0.5)
    host = await nats_client.connect(nats.url, user_credentials=nats.creds(f"sap-{owner}"),
                                     inbox_prefix=f"_INBOX.sap-{owner}")
    service = AgentService(agent="shouter", owner=owner, session_name="default", nc=host,
                           heartbeat_interval_s=1)

    async def shout(envelope: object, stream: object) -> None:
        await stream.send(envelope.prompt.upper())  # type: ignore[attr-defined]

    service.on_prompt(shout)  # type: ignore[arg-type]
    await service.start()
    agent_id = sap_id("shouter", owner, "default")
    base = str(h.client.make_url("")).rstrip("/")
    try:
        async with httpx.AsyncClient(headers=bearer("alice"), timeout=30) as http:
            async with asyncio.timeout(20):
                while (await http.get(f"{base}/a2a/{agent_id}/.well-known/agent-card.json"
                                      )).status_code != 200:
                    await asyncio.sleep(0.1)
            card = await A2ACardResolver(http, f"{base}/a2a/{agent_id}").get_agent_card()
            assert [s.id for s in card.skills] == ["shouter"]
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)
                                   ).create(card)
            [event] = [e async for e in client.send_message(pb.SendMessageRequest(
                message=pb.Message(message_id=uuid.uuid4().hex, role=pb.ROLE_USER,
                                   parts=[pb.Part(text="quiet please")])))]
        assert event.task.status.state == pb.TASK_STATE_COMPLETED
        assert event.task.artifacts[0].parts[0].text == "QUIET PLEASE"
    finally:
        await service.stop()
        await host.close()


async def test_a_prompts_attachments_are_the_messages_files(make_gateway: GatewayFactory,
                                                           nats: NatsServer) -> None:
    """A prompt's attachments reach the gateway's agent as the files people send do (a
    document's text, its name made safe); files past a limit of a message's are refused
    with 400 before anything runs."""
    owner = f"t{uuid.uuid4().hex[:10]}"
    h = await make_gateway(hermes_hub=True, **nats.settings(),
                           hub_bridge_creds_file=nats.creds("bridge"),
                           hub_agent_protocol_owner=owner, hub_agent_protocol_scan=0.5,
                           hermes_max_files_per_message=1)
    h.model.add(Reply("The term is 24 months."))
    creds = nats.creds(f"sap-{owner}-caller")
    nc = await nats_client.connect(nats.url, user_credentials=creds,
                                   inbox_prefix=f"_INBOX.sap-{owner}-caller")
    agents = Agents(nc=nc, identity=Identity(signer=signer_from_creds_file(creds)))
    try:
        async with asyncio.timeout(20):
            while not (found := await agents.discover(
                    filter=DiscoverFilter(owner=owner, agent="gateway"))):
                await asyncio.sleep(0.1)
        [agent] = found
        contract = Attachment.from_bytes("../../contract.pdf",
                                         files.pdf(["The term is 24 months"]))
        chunks = [c async for c in agent.prompt("what does the contract say?",
                                                attachments=[contract])]
        assert chunks[-1] == ResponseChunk(text="The term is 24 months.")
        said = text_of(user_content(h))
        assert "what does the contract say?" in said and "--- page 1 of 1 ---" in said
        assert "The term is 24 months" in said and "inbox/contract.pdf" in said
        with pytest.raises(ProtocolError, match=r"400.*HERMES_MAX_FILES_PER_MESSAGE"):
            [c async for c in agent.prompt("and these?", attachments=[contract, contract])]
        assert len(h.model.requests) == 1
    finally:
        await agents.close()
        await nc.close()
