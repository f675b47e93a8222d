"""Agents of the Synadia Agent Protocol, built with the stock host SDK
(``synadia-ai-agent-service``, pinned), as hub agents: discovered beside ours, answering a
``delegate`` call and a workflow step, an agent that never answers timed out by the hub's
deadline watch, and the bridge believed for its own namespace only."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import nats
import pytest
from synadia_ai.agent_service import PromptStream
from synadia_ai.agents import Attachment, Envelope, ResponseChunk, StatusChunk

from hub import Heartbeat, LogEvent, TaskRequest, TaskResponse
from hub.bridges.names import sap_id
from hub.delegation import HubDelegation
from hub.discovery import Discovery, discover
from hub.workflows.executor import WorkflowExecutor
from hub.workflows.store import WorkflowStore
from tests.hub.conftest import unique
from tests.hub.protocol_fixtures import BridgedHub, bridged, until_discovered
from tests.hub.test_bus import until

__all__ = ["bridged"]


async def echo(envelope: Envelope, stream: PromptStream) -> None:
    await stream.send(StatusChunk(status="reading"))
    await stream.send(f"echo: {envelope.prompt}")


async def test_a_protocol_agent_is_discovered_beside_ours_and_answers_delegate(
        bridged: BridgedHub) -> None:
    await bridged.start_bridges()
    _, owner = await bridged.host("echo", echo, extra_metadata={
        "capabilities": "summarise_text,is_bad,Bad Name"})
    agent_id = sap_id("echo", owner, "default")
    await until_discovered(bridged.bus, agent_id, "summarise_text")
    [listed] = [c for c in await discover(bridged.bus, "*") if c.agent_id == agent_id]
    # Capabilities from its metadata (those that can be one) and its name.
    assert listed.capabilities == ("bad_name", "echo", "summarise_text")
    notes: list[LogEvent] = []

    async def on_note(msg: Any) -> None:
        note = bridged.bus.parse(msg.data)
        if isinstance(note, LogEvent):
            notes.append(note)

    await bridged.bus.nc.subscribe("log.>", cb=on_note)
    delegated = await HubDelegation(bridged.bus, "gateway").delegate(
        "summarise_text", "the claim text", arguments={}, deadline_ms=10_000,
        correlation_id="case-7", conversation_id=None)
    assert (delegated.status, delegated.agent_id) == ("success", agent_id)
    assert delegated.result == {"answer": "echo: the claim text"}
    # Its status chunks were progress notes about the task.
    await until(lambda: any(n.details == {"status": "reading"} for n in notes))


async def test_a_protocol_agent_answers_a_workflow_step(bridged: BridgedHub) -> None:
    await bridged.start_bridges()
    # It takes signed senders only: the bridge signs its prompts with its own NATS key.
    _, owner = await bridged.host("echo", echo, min_sender_trust="signed")
    agent_id = sap_id("echo", owner, "default")
    await until_discovered(bridged.bus, agent_id)
    store = WorkflowStore(bridged.bus)
    workflow_id = unique("bridged")
    await store.put({"workflow_id": workflow_id, "steps": [
        {"id": "shout", "agent": agent_id, "intent": "echo",
         "input": {"text": "$.input.text"}},
        {"id": "again", "capability": "echo",
         "input": {"text": "$.shout.result.answer"}}]})
    executor_id = unique("executor")
    executor = WorkflowExecutor(bridged.bus, store, agent_id=executor_id)
    await executor.start()
    bridged.stack.push_async_callback(executor.stop)
    from hub import AgentRunner

    runner = AgentRunner(bridged.bus, executor)
    await runner.start()
    bridged.runners.append(runner)
    response = await bridged.bus.request(executor_id, TaskRequest(
        sender_id=unique("caller"), intent="run_workflow", deadline_ms=20_000,
        arguments={"workflow_id": workflow_id, "input": {"text": "hello"}}))
    assert response.status == "success", response
    assert response.result["output"] == {"answer": "echo: echo: hello"}
    assert [s["agent"] for s in response.result["steps"]] == [agent_id, agent_id]


async def test_a_protocol_agent_that_never_answers_gets_timeout(bridged: BridgedHub) -> None:
    hold = asyncio.Event()

    async def silent(envelope: Envelope, stream: PromptStream) -> None:
        await hold.wait()  # acks (the SDK does), then says nothing

    await bridged.start_bridges()
    _, owner = await bridged.host("mute", silent, keepalive_interval_s=None)
    agent_id = sap_id("mute", owner, "default")
    await until_discovered(bridged.bus, agent_id)
    response = await bridged.bus.request(agent_id, TaskRequest(
        sender_id=unique("caller"), intent="mute", arguments={"text": "anyone?"},
        deadline_ms=1500))
    hold.set()
    assert (response.status, response.error_code) == ("failed", "TIMEOUT")
    assert response.sender_id == "hub"  # the deadline watch's, as for our own agents


async def test_a_gone_protocol_agent_leaves_discovery(bridged: BridgedHub) -> None:
    await bridged.start_bridges()
    service, owner = await bridged.host("echo", echo)
    agent_id = sap_id("echo", owner, "default")
    await until_discovered(bridged.bus, agent_id)
    await service.stop()

    async def listed() -> bool:
        return agent_id in {c.agent_id for c in await discover(bridged.bus, "*")}

    async with asyncio.timeout(20):
        while await listed():
            await asyncio.sleep(0.1)


async def test_the_bridge_is_believed_for_its_namespace_only(bridged: BridgedHub) -> None:
    """The attacks: the bridge's heartbeat for one of our agents, and an agent's for an id
    of the bridge's namespace, are refused; an agent cannot even publish the latter."""
    discovery = Discovery(bridged.bus)
    await discovery.start()
    bridged.stack.push_async_callback(discovery.stop)
    bridge = await nats.connect(bridged.nats.url, user_credentials=bridged.nats.creds("bridge"),
                                inbox_prefix="_INBOX.bridge")
    bridged.stack.push_async_callback(bridge.close)
    ours, theirs = unique("validator"), unique("sap-intruder")
    await bridge.publish("$HEALTHCHECK.bridge", Heartbeat(
        sender_id="bridge", agent_id=ours, load_percent=0, memory_used_mb=1).to_json())
    await bridge.publish("$HEALTHCHECK.bridge", Heartbeat(
        sender_id="bridge", agent_id=theirs, load_percent=0, memory_used_mb=1).to_json())
    await bridge.flush()
    await until(lambda: theirs in {c.agent_id for c in discovery.live()})
    assert ours not in {c.agent_id for c in discovery.live()}
    # An agent's identity cannot beat for the bridge's namespace (nor be one).
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    agent = await nats.connect(bridged.nats.url, user_credentials=bridged.nats.creds(ours),
                               inbox_prefix=f"_INBOX.{ours}", error_cb=on_error)
    bridged.stack.push_async_callback(agent.close)
    with contextlib.suppress(Exception):
        await agent.publish("$HEALTHCHECK.bridge", b"{}")
        await agent.publish(f"$HEALTHCHECK.{theirs}", b"{}")
        await agent.flush()
    await until(lambda: len(errors) >= 2)


async def test_a_request_for_an_agent_it_does_not_front_is_handed_back(
        bridged: BridgedHub) -> None:
    await bridged.start_bridges()
    _, owner = await bridged.host("echo", echo)
    agent_id = sap_id("echo", owner, "default")
    await until_discovered(bridged.bus, agent_id)
    assert bridged.bridges is not None and bridged.bridges.runner is not None
    gone = sap_id("gone", "nobody", "default")
    from hub.enrolment import bridge_consumer

    await bridge_consumer(bridged.bus, [gone])  # its requests reach the bridge
    response = await bridged.bus.request(gone, TaskRequest(
        sender_id=unique("caller"), intent="gone", deadline_ms=1200))
    assert (response.status, response.error_code) == ("failed", "TIMEOUT")


async def test_a_protocol_agents_files_questions_and_errors(bridged: BridgedHub) -> None:
    """Its stream mapped to the task's answer: the request's attachments and deadline sent
    in the envelope, its files in the result, a question mid-stream a ``partial`` answer
    with a next step to it, an error frame ``failed``."""
    seen: list[Envelope] = []

    async def varied(envelope: Envelope, stream: PromptStream) -> None:
        seen.append(envelope)
        if envelope.prompt == "ask me":
            await stream.ask("Which claim?", timeout=5)
        elif envelope.prompt == "fail":
            raise RuntimeError("the disk is full")
        else:
            await stream.send(ResponseChunk(text="made", attachments=[
                Attachment.from_bytes("out.txt", b"out")]))

    await bridged.start_bridges()
    _, owner = await bridged.host("varied", varied)
    agent_id = sap_id("varied", owner, "default")
    await until_discovered(bridged.bus, agent_id)

    async def ask(text: str, **arguments: Any) -> TaskResponse:
        return await bridged.bus.request(agent_id, TaskRequest(
            sender_id=unique("caller"), intent="varied", deadline_ms=10_000,
            arguments={"text": text, **arguments}))

    made = await ask("make it", attachments=[{"filename": "in.txt", "content": "aW4="}])
    assert made.status == "success" and made.result == {"answer": "made", "attachments": [
        {"filename": "out.txt", "content": "b3V0"}]}
    assert seen[0].attachments == [Attachment(filename="in.txt", content="aW4=")]
    assert 9000 < int(str(seen[0].extras["deadline_ms"])) <= 10_000
    asked = await ask("ask me")
    assert asked.status == "partial" and asked.result["question"] == "Which claim?"
    assert asked.result["next_steps"] == [{"intent": "varied", "agent": agent_id,
                                           "arguments": {"question": "Which claim?"}}]
    failed = await ask("fail")
    assert (failed.status, failed.error_code) == ("failed", "AGENT_ERROR")
    refused = await ask("x", attachments="not a list")
    assert (refused.status, refused.error_code) == ("failed", "INVALID_ARGUMENTS")


async def test_the_bridges_filter_keeps_the_live_agents_when_full(
        bridged: BridgedHub, monkeypatch: pytest.MonkeyPatch) -> None:
    """Protocol agents come and go (one per session): once the bridge's consumer would
    pass its limit, the ids discovery no longer lists are dropped from its filter, so a new
    agent is still fronted and the live ones still reached."""
    from nats.js.api import ConsumerConfig

    from hub import enrolment
    from hub.bus import TASKS
    from hub.identity import BRIDGE, durable_of
    from hub.subjects import requests_for

    await bridged.start_bridges()
    _, owner = await bridged.host("echo", echo)
    live = sap_id("echo", owner, "default")
    await until_discovered(bridged.bus, live)
    monkeypatch.setattr(enrolment, "MAX_BRIDGED", 3)
    gone = [sap_id(f"gone{n}", "nobody", "default") for n in range(3)]
    await enrolment.bridge_consumer(bridged.bus, gone[:2])
    await enrolment.bridge_consumer(bridged.bus, gone[2:])

    def filtered(config: ConsumerConfig) -> set[str]:
        return set(config.filter_subjects or [])

    info = await bridged.bus.js.consumer_info(TASKS, durable_of(BRIDGE))
    assert filtered(info.config) == {requests_for(live), requests_for(gone[2])}
    response = await bridged.bus.request(live, TaskRequest(
        sender_id=unique("caller"), intent="echo", deadline_ms=10_000,
        arguments={"text": "still here"}))
    assert response.result == {"answer": "echo: still here"}
