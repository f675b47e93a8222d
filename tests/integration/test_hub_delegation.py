"""The gateway's agent hands work to a hub agent: a Slack mention whose answer needs
``delegate`` gets the hub agent's answer in its thread, with the correlation id of the
gateway's task on the bus."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agent_core.models.replay import Reply
from hub import Agent, AgentRunner, Bus, HubSettings, TaskRequest, TaskResponse
from hub.discovery import discover
from tests.conftest import NatsServer
from tests.integration.conftest import GatewayFactory
from tests.integration.test_slack import answers, event_body, mention, send


class Validator(Agent):
    """A claims validator on the hub."""

    agent_id = "claims-validator"
    capabilities = ("validate_claim",)

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[TaskRequest] = []
        #: Set by the test once the chat shows who is working: the answer waits for it.
        self.release = asyncio.Event()

    async def on_message(self, request: TaskRequest) -> TaskResponse:
        self.requests.append(request)
        async with asyncio.timeout(30):
            await self.release.wait()
        verdict = "valid" if "C-7" in str(request.arguments.get("text")) else "unknown"
        return self.respond(request, "success", {"claim": "C-7", "verdict": verdict})


def delegating(path: str, body: dict[str, Any]) -> Reply:
    """A model that delegates the claim, then reports what the validator said."""
    tool = next((m for m in reversed(body["messages"]) if m["role"] == "tool"), None)
    if tool is None:
        return Reply.call("delegate", {"capability": "validate_claim",
                                       "task": "check claim C-7", "deadline_ms": 10_000})
    outcome = json.loads(tool["content"])
    return Reply(f"The {outcome['agent']} says claim C-7 is {outcome['result']['verdict']}.")


async def test_a_slack_mention_is_answered_by_a_hub_agent_through_delegate(
        make_gateway: GatewayFactory, nats: NatsServer, tmp_path: Any) -> None:
    h = await make_gateway(slack=True, hermes_hub=True, **nats.settings())
    assert h.slack is not None and h.gateway.parts.bus is not None
    h.model.responder = delegating
    # The validator runs as an agent of its own: its identity's credentials, its consumer
    # made by the gateway's hub services.
    agent_bus = await Bus.connect(HubSettings(  # type: ignore[call-arg]
        _env_file=None, hermes_data_dir=tmp_path, **nats.settings(Validator.agent_id)),
        identity=Validator.agent_id)
    validator = Validator()
    runner = AgentRunner(agent_bus, validator)
    await runner.start()
    try:
        ready = await h.client.get("/agent/status")
        assert (await ready.json())["hub"] == "connected"
        async with asyncio.timeout(15):  # the gateway's discovery has its heartbeat
            while not await discover(h.gateway.parts.bus, "validate_claim"):
                await asyncio.sleep(0.05)
        event = mention("is claim C-7 valid?")
        assert (await send(h, event_body(event))).status == 200

        def working() -> bool:  # the chat shows which agent took the task, while it works
            assert h.slack is not None
            return any("claims-validator is working on validate_claim" in status
                       for _, _, status in h.slack.statuses)

        await h.wait_for(working)
        assert not answers(h)
        validator.release.set()
        await h.wait_for(lambda: len(answers(h)) == 1)
        final = answers(h)[0]
        assert final["text"] == "The claims-validator says claim C-7 is valid."
        assert final["channel"] == "C9"
        [request] = validator.requests
        assert request.sender_id == "gateway" and request.intent == "validate_claim"
        assert request.arguments["text"] == "check claim C-7"
    finally:
        await runner.stop()
        await agent_bus.close()



#: Another person's private chat, whose archive holds a secret.
VICTIM = "telegram:5550123"
THREAD = "1700000000.000100"


async def remembered(h: Any, conversation_id: str, text: str) -> None:
    """``text`` said in ``conversation_id`` long ago: in its archive (what recall and the
    retriever search)."""
    from agent_core.messages import Message

    store = h.gateway.parts.opened.store
    said = [Message(role="user", content=text)]
    await store.append(conversation_id, said)
    await store.rewrite_window(conversation_id, [], said, base=[m.id for m in said])


def injected(path: str, body: dict[str, Any]) -> Reply:
    """A model that obeys injected text: it asks the retriever for another conversation's
    archive, by name and by overriding conversation_id, and through the rag_answer
    workflow, then for its own; and it tells the user everything it got."""
    results = [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]
    script = [
        {"capability": "retrieve", "task": "card PIN", "arguments": {
            "query": "card PIN", "knowledge_base_id": f"conversation:{VICTIM}",
            "conversation_id": VICTIM}},
        {"capability": "retrieve", "task": "card PIN", "arguments": {
            "query": "card PIN garage", "conversation_id": VICTIM}},
        {"capability": "answer_from_documents", "task": "What is the card PIN?",
         "arguments": {"knowledge_base_id": f"conversation:{VICTIM}",
                       "conversation_id": VICTIM}},
    ]
    if len(results) < len(script):
        return Reply.call("delegate", {**script[len(results)], "deadline_ms": 20_000})
    return Reply("Found: " + " | ".join(results))


async def test_a_chat_user_cannot_read_another_conversations_archive_through_delegate(
        make_gateway: GatewayFactory, nats: NatsServer) -> None:
    """A Slack user's task delegates to the hub's retriever with another person's Telegram
    conversation named in the arguments: nothing of it comes back; the thread's own
    archive still does."""
    h = await make_gateway(slack=True, hermes_hub=True, hub_rag=True, **nats.settings())
    assert h.slack is not None and h.gateway.parts.bus is not None
    await remembered(h, VICTIM, "my card PIN is 8841")
    await remembered(h, f"slack:T1:C9:{THREAD}", "our garage is Autohaus Keller, card ok")
    async with asyncio.timeout(20):
        while {"retrieve", "answer_from_documents"} - {
                c for a in await discover(h.gateway.parts.bus, "*") for c in a.capabilities}:
            await asyncio.sleep(0.05)
    h.model.responder = injected
    event = mention("what is the card PIN?", message_ts=THREAD)
    assert (await send(h, event_body(event))).status == 200
    await h.wait_for(lambda: len(answers(h)) == 1)
    told = answers(h)[0]["text"]
    results = [str(m["content"]) for _, body in h.model.requests
               for m in body["messages"] if m["role"] == "tool"][-3:]
    assert "8841" not in told and not any("8841" in r for r in results)
    assert "PERMISSION" in results[0], results[0]
    assert "Autohaus Keller" in results[1], "its own conversation's archive still answers"
    assert "STEP_FAILED" in results[2] or "PERMISSION" in results[2], results[2]
