"""Our agents as agents of the Synadia Agent Protocol, called with the stock client SDK
(``synadia-ai-agents``, pinned) over the session's nats-server: discovery, a prompt's
stream (ack, progress, answer, terminator), questions mid-stream, errors, heartbeats, and
who may prompt (a signed sender; never as the hub's core)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
import pytest
from nats.errors import NoRespondersError
from synadia_ai.agents import (
    Agent,
    Agents,
    DiscoverFilter,
    HeartbeatPayload,
    ProtocolError,
    Query,
    ResponseChunk,
    SenderSignatureRequiredError,
    StatusChunk,
)

from hub import LogEvent, TaskRequest
from hub.bridges.names import protocol_agent
from hub.subjects import log_subject
from tests.hub.protocol_fixtures import BridgedHub, answering, bridged
from tests.hub.test_bus import until

__all__ = ["bridged"]


async def found(caller: Agents, owner: str, agent_id: str) -> Agent:
    """Our agent ``agent_id`` as the caller discovers it (waited for)."""
    async with asyncio.timeout(20):
        while True:
            for agent in await caller.discover(filter=DiscoverFilter(owner=owner)):
                if agent.metadata.get("hmp_agent_id") == agent_id:
                    return agent
            await asyncio.sleep(0.1)


async def test_discovery_lists_our_agents_as_protocol_agents(bridged: BridgedHub) -> None:
    validator = await bridged.agent("validator", answering(ok=True), "validate_claim", "score")
    await bridged.start_bridges()
    caller = await bridged.caller()
    agent = await found(caller, bridged.owner, validator.agent_id)
    assert agent.agent == protocol_agent(validator.agent_id)
    assert (agent.owner, agent.session_name, agent.protocol_version) == (
        bridged.owner, "default", "0.3")
    assert agent.metadata["capabilities"] == "score,validate_claim"
    assert agent.prompt_subject == f"agents.prompt.{agent.agent}.{bridged.owner}.default"
    # Signed by the bridge's key (its registration's id_sig), and signed senders only.
    assert agent.id_sig_verified and agent.min_sender_trust == "signed"
    status = await agent.status()
    assert (status.agent, status.owner) == (agent.agent, bridged.owner)


async def test_a_prompt_streams_ack_progress_answer_and_terminator(
        bridged: BridgedHub) -> None:
    async def working(request: TaskRequest) -> tuple[str, dict[str, Any]]:
        await bridged.bus.publish(log_subject(request.task_id), LogEvent(
            sender_id="x", level="info", event_type="checked", details={"rule": "R-1"}),
            _headers(request))
        return "success", {"answer": f"valid: {request.arguments['text']}"}

    validator = await bridged.agent("validator", working, "validate_claim")
    await bridged.start_bridges()
    caller = await bridged.caller()
    agent = await found(caller, bridged.owner, validator.agent_id)
    chunks = [m async for m in agent.prompt("claim C-7")]  # ends at the terminator
    assert chunks[0] == StatusChunk(status="ack")
    assert StatusChunk(status="checked: rule=R-1") in chunks
    assert chunks[-1] == ResponseChunk(text="valid: claim C-7")
    # The request came from the bridge, acting for no conversation.
    [request] = validator.seen
    assert (request.requester, request.conversation) == ("bridge", None)
    assert request.intent == "validate_claim" and request.arguments == {"text": "claim C-7"}


async def test_the_wire_is_ack_first_and_an_empty_terminator_last(bridged: BridgedHub
                                                                   ) -> None:
    validator = await bridged.agent("validator", answering(answer="fine"), "validate_claim")
    await bridged.start_bridges(hub_agent_protocol_unsigned=True)
    nc, _ = await bridged.participant()
    subject = f"agents.prompt.{protocol_agent(validator.agent_id)}.{bridged.owner}.default"
    await _wait_for_endpoint(nc, subject)
    frames = await _raw_prompt(nc, subject, json.dumps({"prompt": "hi"}).encode())
    assert [json.loads(f.data) for f in frames[:-1]] == [
        {"type": "status", "data": "ack"}, {"type": "response", "data": "fine"}]
    assert frames[-1].data == b"" and not frames[-1].headers


@pytest.mark.parametrize("body", [b"", b"{\"prompt\": 5}", b"{not json",
                                  b"{\"prompt\": \"x\", \"deadline_ms\": \"soon\"}",
                                  b"{\"prompt\": \"x\", \"arguments\": [1]}"])
async def test_a_malformed_envelope_gets_400_and_no_ack(bridged: BridgedHub,
                                                       body: bytes) -> None:
    validator = await bridged.agent("validator", answering(answer="fine"), "validate_claim")
    await bridged.start_bridges(hub_agent_protocol_unsigned=True)
    nc, _ = await bridged.participant()
    subject = f"agents.prompt.{protocol_agent(validator.agent_id)}.{bridged.owner}.default"
    await _wait_for_endpoint(nc, subject)
    frames = await _raw_prompt(nc, subject, body)
    assert (frames[0].headers or {}).get("Nats-Service-Error-Code") == "400"
    assert len(frames) == 2 and frames[-1].data == b"" and not frames[-1].headers
    assert validator.seen == []


async def test_heartbeats_arrive_for_each_agent(bridged: BridgedHub) -> None:
    validator = await bridged.agent("validator", answering(), "validate_claim")
    nc, _ = await bridged.participant()
    beats: list[HeartbeatPayload] = []

    async def on_beat(msg: Any) -> None:
        beats.append(HeartbeatPayload.model_validate_json(msg.data))

    await nc.subscribe(f"agents.hb.*.{bridged.owner}.*", cb=on_beat)
    await nc.flush()
    await bridged.start_bridges()
    token = protocol_agent(validator.agent_id)
    await until(lambda: sum(b.agent == token for b in beats) >= 2)
    beat = next(b for b in beats if b.agent == token)
    assert (beat.owner, beat.session, beat.interval_s) == (bridged.owner, "default", 1)
    assert beat.endpoints is not None and "prompt" in beat.endpoints


async def test_a_question_is_asked_mid_stream_and_the_reply_continues_the_task(
        bridged: BridgedHub) -> None:
    async def asks(request: TaskRequest) -> tuple[str, dict[str, Any]]:
        if "policy" not in request.arguments:
            return "partial", {"question": "Which policy?", "next_steps": [
                {"intent": "validate_claim", "arguments": {"policy": "given"}}]}
        return "success", {"answer": f"valid under {request.arguments['text']}"}

    validator = await bridged.agent("validator", asks, "validate_claim")
    await bridged.start_bridges()
    caller = await bridged.caller()
    agent = await found(caller, bridged.owner, validator.agent_id)
    answers = []
    async for message in agent.prompt("claim C-7"):
        if isinstance(message, Query):
            assert message.prompt == "Which policy?"
            await message.reply("P-1")
        elif isinstance(message, ResponseChunk):
            answers.append(message.text)
    assert answers == ["valid under P-1"]
    first, second = validator.seen
    assert first.correlation_id == second.correlation_id
    assert second.arguments == {"policy": "given", "text": "P-1"}


async def test_a_failed_answer_is_an_error_frame(bridged: BridgedHub) -> None:
    async def refuses(request: TaskRequest) -> tuple[str, dict[str, Any]]:
        return "failed", {"error": "no such claim"}

    validator = await bridged.agent("validator", refuses, "validate_claim")
    await bridged.start_bridges()
    caller = await bridged.caller()
    agent = await found(caller, bridged.owner, validator.agent_id)
    with pytest.raises(ProtocolError, match=r"service error 500: REFUSED: no such claim"):
        [m async for m in agent.prompt("claim C-404")]


async def test_an_unsigned_prompt_is_refused_by_default(bridged: BridgedHub) -> None:
    """The attack: a caller that does not prove who it is (no Agent-Sender, a malformed
    one, or a signature made for another prompt) is refused, and nothing reaches the
    agent."""
    validator = await bridged.agent("validator", answering(answer="fine"), "validate_claim")
    await bridged.start_bridges()
    signed = await bridged.caller()
    agent = await found(signed, bridged.owner, validator.agent_id)
    assert agent.min_sender_trust == "signed"
    subject = agent.prompt_subject
    nc = signed.connection
    other = await signed.sign_sender(subject, b'{"prompt": "something else"}')
    for headers, code in ((None, "401"), ({"Agent-Sender": "v=1; forged"}, "400"),
                          ({"Agent-Sender": other}, "401")):
        frames = await _raw_prompt(nc, subject, b'{"prompt": "hi"}', headers=headers)
        assert (frames[0].headers or {}).get("Nats-Service-Error-Code") == code, headers
        assert len(frames) == 2  # the error and the terminator: no ack
    assert validator.seen == []
    # The SDK's own unsigned caller is refused before it sends anything.
    unsigned = await bridged.caller(signed=False)
    with pytest.raises(SenderSignatureRequiredError):
        [m async for m in (await found(unsigned, bridged.owner, validator.agent_id)
                           ).prompt("hi")]


async def test_an_unsigned_prompt_is_served_when_allowed(bridged: BridgedHub) -> None:
    validator = await bridged.agent("validator", answering(answer="fine"), "validate_claim")
    await bridged.start_bridges(hub_agent_protocol_unsigned=True)
    caller = await bridged.caller(signed=False)
    agent = await found(caller, bridged.owner, validator.agent_id)
    assert agent.min_sender_trust == "any"
    chunks = [m async for m in agent.prompt("hi")]
    assert chunks[-1] == ResponseChunk(text="fine")


async def test_a_prompt_never_acts_for_a_conversation(bridged: BridgedHub) -> None:
    """The attack: a protocol caller names a chat's conversation (a header the core uses,
    arguments). The agent's request comes from the bridge, for no conversation."""
    validator = await bridged.agent("validator", answering(answer="fine"), "validate_claim")
    await bridged.start_bridges(hub_agent_protocol_unsigned=True)
    nc, _ = await bridged.participant()
    subject = f"agents.prompt.{protocol_agent(validator.agent_id)}.{bridged.owner}.default"
    await _wait_for_endpoint(nc, subject)
    body = {"prompt": "hi", "arguments": {"conversation_id": "slack:T1:C1"}}
    await _raw_prompt(nc, subject, json.dumps(body).encode(),
                      headers={"Hmp-Conversation": "slack%3AT1%3AC1"})
    [request] = validator.seen
    assert (request.requester, request.conversation) == ("bridge", None)


async def test_the_bridge_cannot_send_as_the_core_nor_answer_for_our_agents(
        bridged: BridgedHub) -> None:
    """Its identity is enforced by the server: a request as the core, or an answer as one
    of our agents, is refused."""
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    nc = await nats.connect(bridged.nats.url, user_credentials=bridged.nats.creds("bridge"),
                            inbox_prefix="_INBOX.bridge", error_cb=on_error)
    try:
        await nc.publish("task.request.validator.hub", b"{}")
        await nc.publish("reply.validator.gateway", b"{}")
        await nc.publish("$HEALTHCHECK.validator", b"{}")
        await nc.flush()
        await until(lambda: len(errors) >= 3)
    finally:
        await nc.close()
    assert all("permissions violation" in str(e).lower() for e in errors), errors


def _headers(request: TaskRequest) -> Any:
    from hub.bus import Headers

    return Headers(request.correlation_id, request.correlation_id)


async def _wait_for_endpoint(nc: Any, subject: str) -> None:
    """Until our agent's prompt endpoint answers (its registration takes a scan)."""
    async with asyncio.timeout(20):
        while True:
            try:
                await nc.request(subject.replace("agents.prompt.", "agents.status.", 1), b"",
                                 timeout=0.5)
                return
            except (NoRespondersError, TimeoutError):
                await asyncio.sleep(0.1)


async def _raw_prompt(nc: Any, subject: str, body: bytes, *,
                      headers: dict[str, str] | None = None) -> list[Any]:
    """Every frame of one prompt's stream, up to its terminator (empty, no headers)."""
    inbox = f"_INBOX.agents.{nc.new_inbox().rsplit('.', 1)[-1]}"
    frames: list[Any] = []
    done = asyncio.Event()

    async def on_frame(msg: Any) -> None:
        frames.append(msg)
        if msg.data == b"" and not msg.headers:
            done.set()

    sub = await nc.subscribe(inbox, cb=on_frame)
    await nc.publish(subject, body, reply=inbox, headers=headers)
    try:
        await asyncio.wait_for(done.wait(), 20)
    finally:
        await sub.unsubscribe()
    return frames


async def test_a_participant_cannot_take_the_prompts_of_our_agents(bridged: BridgedHub
                                                                   ) -> None:
    """The attack: a protocol participant (``sap-mallory``) joins the ``agents`` queue
    group on our agents' prompt subjects to receive their prompts, or beats for them. The
    server refuses: a participant hosts under its own owner token only."""
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    nc = await nats.connect(bridged.nats.url, user_credentials=bridged.nats.creds(
        "sap-mallory"), inbox_prefix="_INBOX.sap-mallory", error_cb=on_error)
    try:
        await nc.subscribe(f"agents.prompt.validator.{bridged.owner}.default", queue="agents")
        await nc.publish(f"agents.hb.validator.{bridged.owner}.default", b"{}")
        await nc.subscribe("agents.prompt.validator.mallory.default", queue="agents")
        await nc.flush()
        await until(lambda: len(errors) >= 2)
    finally:
        await nc.close()
    refused = " ".join(str(e).lower() for e in errors)
    assert f"agents.prompt.validator.{bridged.owner}.default" in refused
    assert f"agents.hb.validator.{bridged.owner}.default" in refused
    assert "mallory.default" not in refused  # its own owner token is its own
