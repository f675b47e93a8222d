"""Workflows from the gateway (with HERMES_HUB, a real nats-server): the HTTP API, the
/workflow command in Slack, and the gateway's agent answering from documents through
delegate("answer_from_documents") and the shipped rag_answer workflow."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent_core.models.replay import Reply
from hub import Agent, AgentRunner, Bus, HubSettings, TaskRequest, TaskResponse
from hub.discovery import discover
from hub.enrolment import ensure_consumer
from hub.rag.agents import SYSTEM_PROMPT
from hub.rag.service import SAMPLE
from tests.conftest import NatsServer
from tests.hub.test_rag import reader
from tests.integration.conftest import GatewayFactory, Harness
from tests.integration.test_slack import answers, event_body, mention, send


class Checker(Agent):
    """A hub agent that checks claims."""

    capabilities = ("check_claim",)

    def __init__(self) -> None:
        super().__init__()
        self.agent_id = f"checker-{uuid.uuid4().hex[:6]}"
        self.seen: list[TaskRequest] = []
        #: Set by a test: answers wait for it.
        self.hold: asyncio.Event | None = None

    async def on_message(self, request: TaskRequest) -> TaskResponse:
        self.seen.append(request)
        if self.hold is not None:
            await asyncio.wait_for(self.hold.wait(), 60)
        return self.respond(request, "success", {"answer": f"claim {request.arguments['claim']}"
                                                           " is covered"})


@pytest.fixture
async def checker(nats: NatsServer, tmp_path: Path) -> AsyncIterator[Checker]:
    """The checker, an agent of its own identity, enrolled by a copy of the hub's core
    (it starts before the test's gateways)."""
    agent = Checker()
    core = await Bus.connect(HubSettings(  # type: ignore[call-arg]
        _env_file=None, hermes_data_dir=tmp_path, **nats.settings()))
    await ensure_consumer(core, agent.agent_id)
    await core.close()
    bus = await Bus.connect(HubSettings(  # type: ignore[call-arg]
        _env_file=None, hermes_data_dir=tmp_path, **nats.settings(agent.agent_id)),
        identity=agent.agent_id)
    runner = AgentRunner(bus, agent)
    await runner.start()
    try:
        yield agent
    finally:
        if agent.hold is not None:
            agent.hold.set()
        await runner.stop()
        await bus.close()


async def live(h: Harness, *agent_ids: str, offering: str = "*") -> None:
    """Wait until discovery lists ``agent_ids`` (among those offering that capability)."""
    bus = h.gateway.parts.bus
    assert bus is not None
    async with asyncio.timeout(20):
        while not set(agent_ids) <= {c.agent_id for c in await discover(bus, offering)}:
            await asyncio.sleep(0.05)


def claims_workflow(workflow_id: str, agent_id: str) -> dict[str, Any]:
    return {"workflow_id": workflow_id, "steps": [
        {"id": "check", "agent": agent_id, "intent": "check_claim",
         "input": {"claim": "$.input.text"}}],
        "output": {"answer": "$.check.result.answer"}}


async def test_workflows_through_the_http_api(make_gateway: GatewayFactory, nats: NatsServer,
                                              checker: Checker) -> None:
    h = await make_gateway(hermes_hub=True, **nats.settings())
    await live(h, checker.agent_id, "workflow-executor")
    workflow_id = f"claims-{uuid.uuid4().hex[:6]}"
    bad = claims_workflow(workflow_id, "no-such-agent")
    refused = await h.client.post("/agent/workflows", json=bad)
    assert refused.status == 422
    body = await refused.json()
    assert body["step"] == "check" and "no-such-agent" in body["error"]
    cyclic = {"workflow_id": workflow_id, "steps": [
        {"id": "a", "agent": checker.agent_id, "input": {"x": "$.b.result"}},
        {"id": "b", "agent": checker.agent_id, "input": {"x": "$.a.result"}}]}
    assert (await h.client.post("/agent/workflows", json=cyclic)).status == 422
    assert (await h.client.post("/agent/workflows", data="{not json",
                                headers={"Content-Type": "application/json"})).status == 400
    created = await h.client.post("/agent/workflows", json=claims_workflow(workflow_id,
                                                                           checker.agent_id))
    assert created.status == 201 and (await created.json())["version"] == 1
    again = await h.client.post("/agent/workflows", json=claims_workflow(workflow_id,
                                                                         checker.agent_id))
    assert (await again.json())["version"] == 1, "the same definition is not a new version"
    clash = await h.client.post("/agent/workflows", json={
        **claims_workflow(workflow_id, checker.agent_id), "version": 1, "description": "x"})
    assert clash.status == 409
    listed = await (await h.client.get("/agent/workflows")).json()
    assert any(w["workflow_id"] == workflow_id and w["versions"] == [1]
               for w in listed["workflows"])
    assert (await h.client.get(f"/agent/workflows/{workflow_id}?version=2")).status == 404
    started = await h.client.post(f"/agent/workflows/{workflow_id}/runs",
                                  json={"input": {"text": "C-7"}})
    assert started.status == 202
    run_id = (await started.json())["run_id"]
    async with asyncio.timeout(20):
        while True:
            got = await h.client.get(f"/agent/workflow-runs/{run_id}")
            run = await got.json() if got.status == 200 else {}
            if run.get("status") == "success":
                break
            await asyncio.sleep(0.05)
    assert run["steps"][0]["status"] == "success"
    assert run["document"]["check"]["result"]["answer"] == "claim C-7 is covered"
    assert checker.seen[-1].conversation is None, "a run the API started acts for no chat"
    runs = await (await h.client.get(f"/agent/workflow-runs?workflow_id={workflow_id}")).json()
    assert [r["run_id"] for r in runs["runs"]] == [run_id]
    finished = await h.client.post(f"/agent/workflow-runs/{run_id}/cancel")
    assert finished.status == 200 and (await finished.json())["status"] == "success"
    assert (await h.client.get("/agent/workflow-runs/run-0000")).status == 404
    assert (await h.client.post("/agent/workflows/nope/runs", json={})).status == 404


async def test_without_the_hub_the_workflow_api_says_how_to_enable_it(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway()
    answer = await h.client.get("/agent/workflows")
    assert answer.status == 409 and "HERMES_HUB" in (await answer.json())["error"]


async def test_the_workflow_command_posts_the_result_in_the_thread(
        make_gateway: GatewayFactory, nats: NatsServer, checker: Checker) -> None:
    h = await make_gateway(slack=True, hermes_hub=True, **nats.settings())
    await live(h, checker.agent_id, "workflow-executor")
    workflow_id = f"claims-{uuid.uuid4().hex[:6]}"
    assert (await h.client.post("/agent/workflows", json=claims_workflow(
        workflow_id, checker.agent_id))).status == 201
    assert (await send(h, event_body(mention(f"/workflow {workflow_id} C-9")))).status == 200
    await h.wait_for(lambda: any(a["text"] == "claim C-9 is covered" for a in answers(h)))
    assert [a["text"] for a in answers(h)] == ["claim C-9 is covered"], "answered once"
    assert checker.seen[0].arguments == {"claim": "C-9"}
    assert (await send(h, event_body(mention("/workflow nope x")))).status == 200
    await h.wait_for(lambda: any("There is no workflow 'nope'" in a["text"]
                                 for a in answers(h)))
    assert workflow_id in answers(h)[-1]["text"], "it lists the ones there are"


def delegating_rag(path: str, body: dict[str, Any]) -> Reply:
    """The gateway's agent delegates to answer_from_documents, then passes the answer on;
    the generator (its own system prompt) reads the documents it is shown."""
    if SYSTEM_PROMPT in json.dumps(body["messages"][0]):
        return reader("14 days", "Up to 14 days.", invent=False)(path, body)
    tool = next((m for m in reversed(body["messages"]) if m["role"] == "tool"), None)
    if tool is None:
        return Reply.call("delegate", {"capability": "answer_from_documents",
                                       "task": "How long do I get a rental car?",
                                       "deadline_ms": 60_000})
    result = json.loads(tool["content"])
    if "result" not in result:  # the delegation failed: say how (the test shows it)
        return Reply(f"delegate failed: {tool['content']}")
    output = result["result"]["output"]
    return Reply(f"{output['answer']} (sources: {', '.join(output['citations'])})")


async def test_the_agent_answers_from_documents_through_delegate(
        make_gateway: GatewayFactory, nats: NatsServer) -> None:
    h = await make_gateway(slack=True, hermes_hub=True, **nats.settings(),
                           hub_knowledge_bases={"claims-handbook": str(SAMPLE)})
    h.model.responder = delegating_rag
    await live(h, "retriever", "generator")
    # The executor offers a workflow once it has read it: live alone is not enough.
    await live(h, "workflow-executor", offering="answer_from_documents")
    assert (await send(h, event_body(mention("rental car?")))).status == 200
    await h.wait_for(lambda: len(answers(h)) == 1, timeout=60)
    assert answers(h)[0]["text"] == ("Up to 14 days. [claims-handbook:rental.md#1] "
                                     "(sources: claims-handbook:rental.md#1)")


async def test_a_workflow_task_through_the_api_and_stopped_with_stop(
        make_gateway: GatewayFactory, nats: NatsServer, checker: Checker) -> None:
    """/workflow is a task of the conversation: /agent/run waits for its answer like any
    task's, and /stop cancels the run behind it."""
    h = await make_gateway(hermes_hub=True, **nats.settings())
    await live(h, checker.agent_id, "workflow-executor")
    workflow_id = f"claims-{uuid.uuid4().hex[:6]}"
    assert (await h.client.post("/agent/workflows", json=claims_workflow(
        workflow_id, checker.agent_id))).status == 201
    ran = await h.client.post("/agent/run", json={"text": f"/workflow {workflow_id} C-1",
                                                  "conversation_id": "wf-1"})
    task = await ran.json()
    assert (task["status"], task["text"]) == ("answered", "claim C-1 is covered")
    state = await (await h.client.get(f"/agent/tasks/{task['task_id']}")).json()
    assert checker.seen[0].conversation == state["conversation_id"], \
        "the run's step acts for the chat the /workflow came from"
    events = await h.client.get(f"/agent/tasks/{task['task_id']}/events")
    kinds = [line.split(": ", 1)[1] for line in (await events.text()).splitlines()
             if line.startswith("event: ")]
    assert kinds[0] == "AGENT_STARTED" and kinds[-1] == "AGENT_FINISHED"
    assert "TOOL_STARTED" in kinds, "the step is shown as the task's progress"
    checker.hold = asyncio.Event()
    queued = await h.client.post("/agent/run-async", json={
        "text": f"/workflow {workflow_id} C-2", "conversation_id": "wf-2"})
    task_id = (await queued.json())["task_id"]
    async with asyncio.timeout(20):
        while len(checker.seen) < 2:
            await asyncio.sleep(0.02)
    stop = await h.client.post("/agent/run", json={"text": "/stop", "conversation_id": "wf-2"})
    assert (await stop.json())["text"] == "Stopping the running task."
    async with asyncio.timeout(20):
        while (await (await h.client.get(f"/agent/tasks/{task_id}")).json())["status"] != \
                "cancelled":
            await asyncio.sleep(0.05)
    from hub.workflows.store import WorkflowStore

    bus = h.gateway.parts.bus
    assert bus is not None
    async with asyncio.timeout(20):  # the run behind it is cancelled too
        while True:
            runs = await WorkflowStore(bus).list_runs(workflow_id=workflow_id)
            if runs and runs[0].status == "cancelled":
                break
            await asyncio.sleep(0.05)
    checker.hold.set()


async def test_a_workflow_task_outlives_the_gateway_that_started_it(
        make_gateway: GatewayFactory, nats: NatsServer, checker: Checker) -> None:
    """The gateway stops mid-run; another executor finishes the run while no gateway is
    up; the next gateway continues the task from the answer kept on the hub, without
    starting the run or its step again."""
    first = await make_gateway(hermes_hub=True, **nats.settings(), hermes_shutdown_grace=0.5,
                               hermes_lease_seconds=10)
    await live(first, checker.agent_id, "workflow-executor")
    workflow_id = f"claims-{uuid.uuid4().hex[:6]}"
    assert (await first.client.post("/agent/workflows", json=claims_workflow(
        workflow_id, checker.agent_id))).status == 201
    checker.hold = asyncio.Event()
    queued = await first.client.post("/agent/run-async", json={
        "text": f"/workflow {workflow_id} C-5", "conversation_id": "wf-5"})
    task_id = (await queued.json())["task_id"]
    async with asyncio.timeout(20):
        while not checker.seen:
            await asyncio.sleep(0.02)
    from hub.workflows.service import ExecutorService
    from hub.workflows.store import WorkflowStore

    bus = await Bus.connect(HubSettings(  # type: ignore[call-arg]
        _env_file=None, hermes_data_dir=first.settings.hermes_data_dir, **nats.settings()))
    executor = ExecutorService(bus)  # another copy of the executor, outside the gateways
    await executor.start()
    try:
        await first.client.server.close()  # past the grace: handed back, still running
        checker.hold.set()
        async with asyncio.timeout(30):  # the other executor finishes the run meanwhile
            while [r.status for r in await WorkflowStore(bus).list_runs(
                    workflow_id=workflow_id)] != ["success"]:
                await asyncio.sleep(0.05)
        second = await make_gateway(hermes_hub=True, **nats.settings(),
                                    redis_prefix=first.settings.redis_prefix,
                                    hermes_lease_seconds=10)
        done = await second.wait_task(task_id, "answered")
    finally:
        await executor.stop()
        await bus.close()
    assert done["text"] == "claim C-5 is covered"
    assert len(checker.seen) == 1, "the step ran once"
    assert second.gateway.parts.bus is not None
    runs = await WorkflowStore(second.gateway.parts.bus).list_runs(workflow_id=workflow_id)
    assert [r.status for r in runs] == ["success"], "one run"
