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
        make_gateway: GatewayFactory, nats_url: str, tmp_path: Any) -> None:
    h = await make_gateway(slack=True, hermes_hub=True, nats_url=nats_url)
    assert h.slack is not None and h.gateway.parts.bus is not None
    h.model.responder = delegating
    agent_bus = await Bus.connect(HubSettings(_env_file=None, nats_url=nats_url,  # type: ignore[call-arg]
                                              hermes_data_dir=tmp_path))
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

