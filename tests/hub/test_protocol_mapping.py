"""How a prompt of the Synadia Agent Protocol maps to HMP, called with the stock client SDK
(``synadia-ai-agents``, pinned): the envelope's text, attachments and extension fields
(``intent``, ``arguments``, ``deadline_ms``; HERMES_RUN_TIMEOUT when it names no deadline)
in the ``task_request``, the answer's attachments in the response chunk, the workflow
executor as a protocol agent, and HUB_AGENT_PROTOCOL=false registering nothing."""

from __future__ import annotations

from typing import Any

from synadia_ai.agents import Attachment, DiscoverFilter, Envelope, ResponseChunk, StatusChunk

from hub import AgentRunner, TaskRequest
from hub.workflows.executor import WorkflowExecutor
from hub.workflows.store import WorkflowStore
from tests.hub.conftest import unique
from tests.hub.protocol_fixtures import BridgedHub, answering, bridged, owner_token
from tests.hub.test_agent_protocol import found

__all__ = ["bridged"]


async def test_the_envelopes_fields_become_the_requests(bridged: BridgedHub) -> None:
    async def with_file(request: TaskRequest) -> tuple[str, dict[str, Any]]:
        return "success", {"answer": "scored", "attachments": [
            {"filename": "score.txt", "content": "OTA="}]}

    validator = await bridged.agent("validator", with_file, "validate_claim", "score")
    await bridged.start_bridges(hermes_run_timeout=42)
    caller = await bridged.caller()
    agent = await found(caller, bridged.owner, validator.agent_id)
    claim = Attachment.from_bytes("claim.pdf", b"%PDF-1.7 claim C-7")
    chunks = [m async for m in agent.prompt(Envelope(
        prompt="score this", attachments=[claim], intent="score",
        arguments={"claim": "C-7"}, deadline_ms=5000))]
    assert chunks[0] == StatusChunk(status="ack")
    # The answer's files ride in its response chunk.
    assert chunks[-1] == ResponseChunk(text="scored", attachments=[
        Attachment(filename="score.txt", content="OTA=")])
    [request] = validator.seen
    assert request.intent == "score"
    assert request.arguments == {"claim": "C-7", "text": "score this", "attachments": [
        {"filename": "claim.pdf", "content": claim.content}]}
    # The deadline the envelope names, counted from the prompt's arrival.
    assert 4000 < request.deadline_ms <= 5000
    # None named: HERMES_RUN_TIMEOUT's; no intent named: the agent's first capability (in
    # discovery's order, alphabetical).
    [_ async for _ in agent.prompt("and this")]
    second = validator.seen[1]
    assert second.intent == "score" and second.arguments == {"text": "and this"}
    assert 40_000 < second.deadline_ms <= 42_000


async def test_the_workflow_executor_is_a_protocol_agent(bridged: BridgedHub) -> None:
    """A workflow's capability, prompted: its input is the prompt's arguments."""
    validator = await bridged.agent("validator", answering(verdict="valid"), "validate_claim")
    store = WorkflowStore(bridged.bus)
    workflow_id = unique("checked")
    await store.put({"workflow_id": workflow_id, "capability": "claim_check", "steps": [
        {"id": "check", "agent": validator.agent_id, "intent": "validate_claim",
         "input": {"text": "$.input.text"}}]})
    executor = WorkflowExecutor(bridged.bus, store, agent_id=unique("executor"))
    await executor.start()
    bridged.stack.push_async_callback(executor.stop)
    await executor.refresh()
    runner = AgentRunner(bridged.bus, executor)
    await runner.start()
    bridged.runners.append(runner)
    await bridged.start_bridges()
    caller = await bridged.caller()
    agent = await found(caller, bridged.owner, executor.agent_id)
    assert set(agent.metadata["capabilities"].split(",")) == {"run_workflow", "claim_check"}
    chunks = [m async for m in agent.prompt(Envelope(prompt="claim C-7",
                                                     intent="claim_check"))]
    assert isinstance(chunks[-1], ResponseChunk)
    assert '"verdict": "valid"' in chunks[-1].text and '"got": "claim C-7"' in chunks[-1].text
    [request] = validator.seen
    assert request.arguments == {"text": "claim C-7"}


async def test_no_protocol_agent_without_the_setting(bridged: BridgedHub) -> None:
    """HUB_AGENT_PROTOCOL=false: a bridge registers none of our agents (another one, with
    the protocol on, shows that a look has been made meanwhile)."""
    validator = await bridged.agent("validator", answering(), "validate_claim")
    off = bridged.owner
    await bridged.start_bridges(hub_agent_protocol=False)
    bridged.owner = owner_token()
    await bridged.start_bridges()
    caller = await bridged.caller()
    await found(caller, bridged.owner, validator.agent_id)
    assert await caller.discover(filter=DiscoverFilter(owner=off)) == []
