"""The A2A edge against the real a2a-sdk client (a client this project did not write): hub
agents, the workflow executor and the gateway's own agent, over real HTTP and a real
nats-server. Resolve the card, send (blocking and streaming), get, cancel, a TIMEOUT as a
failed task, input-required continued, and what is refused."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError, TaskNotCancelableError, TaskNotFoundError
from google.protobuf.json_format import MessageToDict

from agent_core.models.replay import Reply
from gateway.api.a2a import _EDGE as EDGE
from hub import Agent, AgentRunner, Bus, HubSettings, TaskRequest, TaskResponse
from tests.conftest import NatsServer
from tests.integration.conftest import GatewayFactory, Harness

KEY = "a2a-test-key-0123456789abcdef"


class Claims(Agent):
    """A hub agent: validates claims, asks back about an unknown one, hangs on "slow"."""

    capabilities = ("assess_claim",)

    def __init__(self) -> None:
        super().__init__()
        self.agent_id = f"claims-{uuid.uuid4().hex[:6]}"
        self.seen: list[TaskRequest] = []
        self.release = asyncio.Event()

    async def on_message(self, request: TaskRequest) -> TaskResponse:
        self.seen.append(request)
        text = str(request.arguments.get("text", ""))
        if "slow" in text:
            await self.release.wait()
        if "which" in text:
            return self.respond(request, "partial", {
                "question": "Which policy is it?",
                "next_steps": [{"intent": "assess_claim", "ask": "policy number"}]})
        await self.publish(f"log.{request.task_id}", _note(self, request))
        return self.respond(request, "success", {
            "answer": f"claim {request.arguments.get('claim', text)} is valid",
            "checked": request.arguments})


def _note(agent: Agent, request: TaskRequest) -> Any:
    from hub import LogEvent

    return LogEvent(sender_id=agent.agent_id, correlation_id=request.correlation_id,
                    level="info", event_type="checked_policy", details={"policy": "P-1"})


@dataclass
class Edge:
    h: Harness
    base: str
    agent: Claims
    runner: AgentRunner
    http: httpx.AsyncClient

    async def client(self, agent_id: str, *, streaming: bool = False) -> Any:
        card = await A2ACardResolver(self.http, f"{self.base}/a2a/{agent_id}").get_agent_card()
        return ClientFactory(ClientConfig(httpx_client=self.http, streaming=streaming)
                             ).create(card)


@pytest.fixture
async def edge(make_gateway: GatewayFactory, nats: NatsServer, tmp_path: Path
               ) -> AsyncIterator[Edge]:
    h = await make_gateway(hermes_hub=True, **nats.settings(),
                           hermes_api_keys=[{"key": KEY, "user": "a2a", "role": "admin"}])
    agent = Claims()
    bus = await Bus.connect(HubSettings(  # type: ignore[call-arg]
        _env_file=None, hermes_data_dir=tmp_path, **nats.settings(agent.agent_id)),
        identity=agent.agent_id)
    runner = AgentRunner(bus, agent)
    await runner.start()
    base = str(h.client.make_url("")).rstrip("/")
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"},
                                 timeout=60) as http:
        found = Edge(h, base, agent, runner, http)
        async with asyncio.timeout(20):  # its heartbeat reached the gateway's discovery
            while (await http.get(f"{base}/a2a/{agent.agent_id}/.well-known/agent-card.json"
                                  )).status_code != 200:
                await asyncio.sleep(0.05)
        try:
            yield found
        finally:
            agent.release.set()
            await runner.stop()
            await bus.close()


def message(text: str = "", *, data: dict[str, Any] | None = None, task_id: str = "",
            context_id: str = "", **meta: Any) -> pb.SendMessageRequest:
    parts = [pb.Part(text=text)] if text else []
    if data is not None:
        part = pb.Part()
        part.data.struct_value.update(data)
        parts.append(part)
    msg = pb.Message(message_id=uuid.uuid4().hex, role=pb.ROLE_USER, parts=parts,
                     task_id=task_id, context_id=context_id)
    if meta:
        msg.metadata.update(meta)
    return pb.SendMessageRequest(message=msg)


async def events(client: Any, request: pb.SendMessageRequest) -> list[Any]:
    return [e async for e in client.send_message(request)]


async def test_the_card_says_who_the_agent_is_and_how_to_authenticate(edge: Edge) -> None:
    card = await A2ACardResolver(edge.http, f"{edge.base}/a2a/{edge.agent.agent_id}"
                                 ).get_agent_card()
    assert card.name == edge.agent.agent_id
    assert [s.id for s in card.skills] == ["assess_claim"]
    [interface] = card.supported_interfaces
    assert interface.url == f"{edge.base}/a2a/{edge.agent.agent_id}"
    assert (interface.protocol_binding, interface.protocol_version) == ("JSONRPC", "1.0")
    assert card.capabilities.streaming
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
    executor = await A2ACardResolver(edge.http, f"{edge.base}/a2a/workflow-executor"
                                     ).get_agent_card()
    assert "run_workflow" in [s.id for s in executor.skills]
    missing = await edge.http.get(f"{edge.base}/a2a/nobody/.well-known/agent-card.json")
    assert missing.status_code == 404


async def test_a_message_is_a_task_request_and_its_answer_an_artifact(edge: Edge) -> None:
    client = await edge.client(edge.agent.agent_id)
    [event] = await events(client, message("check it", data={"claim": "C-7"},
                                           context_id="case-7"))
    task = event.task
    assert task.status.state == pb.TASK_STATE_COMPLETED
    assert task.context_id == "case-7"
    [request] = edge.agent.seen
    assert request.intent == "assess_claim"
    assert request.arguments == {"text": "check it", "claim": "C-7"}
    assert request.correlation_id == "case-7", "the context id is the correlation id"
    [artifact] = task.artifacts
    assert artifact.parts[0].text == "claim C-7 is valid"
    assert MessageToDict(artifact.parts[1].data)["checked"]["claim"] == "C-7"
    got = await client.get_task(pb.GetTaskRequest(id=task.id))
    assert got.status.state == pb.TASK_STATE_COMPLETED and got.artifacts[0] == artifact
    assert [m.role for m in got.history] == [pb.ROLE_USER]
    with pytest.raises(TaskNotCancelableError):  # a finished task cannot be cancelled
        await client.cancel_task(pb.CancelTaskRequest(id=task.id))


async def test_streaming_relays_the_tasks_events(edge: Edge) -> None:
    client = await edge.client(edge.agent.agent_id, streaming=True)
    seen = await events(client, message("stream it"))
    kinds = [e.WhichOneof("payload") for e in seen]
    assert kinds[0] == "task" and seen[0].task.status.state == pb.TASK_STATE_SUBMITTED
    states = [e.status_update.status.state for e in seen if e.HasField("status_update")]
    assert states[0] == pb.TASK_STATE_WORKING and states[-1] == pb.TASK_STATE_COMPLETED
    notes = [e.status_update.status.message.parts[0].text for e in seen
             if e.HasField("status_update") and e.status_update.status.message.parts]
    assert "checked_policy: policy=P-1" in notes, "the agent's log event is relayed"
    assert "artifact_update" in kinds and kinds.index("artifact_update") < len(kinds) - 1


async def test_a_question_back_is_input_required_and_the_reply_continues_it(
        edge: Edge) -> None:
    client = await edge.client(edge.agent.agent_id)
    [first] = await events(client, message("which claim?"))
    task = first.task
    assert task.status.state == pb.TASK_STATE_INPUT_REQUIRED
    assert task.status.message.parts[0].text == "Which policy is it?"
    assert MessageToDict(task.status.message.parts[1].data)["next_steps"][0]["ask"] == \
        "policy number"
    [second] = await events(client, message("policy P-1", task_id=task.id))
    assert second.task.id == task.id and second.task.status.state == pb.TASK_STATE_COMPLETED
    asked, answered = edge.agent.seen
    assert answered.correlation_id == asked.correlation_id == task.context_id
    assert answered.task_id == f"{task.id}-1"
    with pytest.raises(InvalidParamsError, match="only an input-required task"):
        await events(client, message("more", task_id=task.id))


async def test_a_timeout_comes_back_as_a_failed_task(edge: Edge) -> None:
    client = await edge.client(edge.agent.agent_id)
    [event] = await events(client, message("slow one", deadline_ms=1500))
    task = event.task
    assert task.status.state == pb.TASK_STATE_FAILED
    assert task.status.message.parts[0].text.startswith("TIMEOUT")
    assert MessageToDict(task.status.message.parts[1].data)["error_code"] == "TIMEOUT"


async def test_a_task_is_cancelled_and_its_late_answer_dropped(edge: Edge) -> None:
    client = await edge.client(edge.agent.agent_id)
    request = message("slow but sure")
    request.configuration.return_immediately = True
    [event] = await events(client, request)
    task_id = event.task.id
    assert event.task.status.state == pb.TASK_STATE_WORKING
    async with asyncio.timeout(20):
        while not edge.agent.seen:
            await asyncio.sleep(0.02)
    cancelled = await client.cancel_task(pb.CancelTaskRequest(id=task_id))
    assert cancelled.status.state == pb.TASK_STATE_CANCELED
    edge.agent.release.set()
    async with asyncio.timeout(20):  # the agent answers anyway
        while edge.runner.handled < 1:
            await asyncio.sleep(0.02)
    served = edge.h.client.app[EDGE][0]
    async with asyncio.timeout(20):  # and the edge is done with the task
        while task_id in served._live:
            await asyncio.sleep(0.02)
    got = await client.get_task(pb.GetTaskRequest(id=task_id))
    assert got.status.state == pb.TASK_STATE_CANCELED, "the late answer was dropped"


async def test_a_workflow_runs_through_the_executors_card(edge: Edge) -> None:
    workflow_id = f"a2a-{uuid.uuid4().hex[:6]}"
    created = await edge.http.post(f"{edge.base}/agent/workflows", json={
        "workflow_id": workflow_id, "steps": [{"id": "check", "agent": edge.agent.agent_id,
                                               "intent": "assess_claim",
                                               "input": {"claim": "$.input.claim"}}],
        "output": {"answer": "$.check.result.answer"}})
    assert created.status_code == 201
    client = await edge.client("workflow-executor", streaming=True)
    seen = await events(client, message(data={"workflow_id": workflow_id,
                                              "input": {"claim": "C-9"}},
                                        skill="run_workflow"))
    final = [e for e in seen if e.HasField("status_update")][-1]
    assert final.status_update.status.state == pb.TASK_STATE_COMPLETED
    artifact = next(e.artifact_update.artifact for e in seen if e.HasField("artifact_update"))
    assert artifact.parts[0].text == "claim C-9 is valid"
    notes = [e.status_update.status.message.parts[0].text for e in seen
             if e.HasField("status_update") and e.status_update.status.message.parts]
    assert any(n.startswith("step_finished") and "step=check" in n for n in notes)


async def test_the_gateways_own_agent_answers(edge: Edge) -> None:
    edge.h.model.add(Reply("Hello from the gateway."))
    client = await edge.client("gateway")
    [event] = await events(client, message("hi there"))
    assert event.task.status.state == pb.TASK_STATE_COMPLETED, event
    assert event.task.artifacts[0].parts[0].text == "Hello from the gateway."


async def test_what_is_refused(edge: Edge) -> None:
    url = f"{edge.base}/a2a/{edge.agent.agent_id}"
    async with httpx.AsyncClient() as bare:
        unauthenticated = await bare.post(url, json={})
    assert unauthenticated.status_code == 401
    for body, code in (("{nope", -32700), ('{"jsonrpc": "2.0"}', -32600),
                       ('{"jsonrpc": "2.0", "id": 1, "method": "message/teleport"}', -32601),
                       ('{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": '
                        '{"message": {"role": "ROLE_USER"}}}', -32602),
                       ('{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": '
                        '{"id": "nope"}}', -32001),
                       ('{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": '
                        '{"message": {"messageId": "m", "role": "ROLE_USER", "parts": '
                        '[{"url": "http://x"}]}}}', -32004)):
        answer = await edge.http.post(url, content=body,
                                      headers={"Content-Type": "application/json"})
        assert answer.status_code == 200
        assert answer.json()["error"]["code"] == code, (body, answer.json())
    client = await edge.client(edge.agent.agent_id)
    with pytest.raises(TaskNotFoundError):
        await client.get_task(pb.GetTaskRequest(id="not-a-task"))


async def test_a_task_whose_process_stopped_following_it_catches_up_on_get(
        edge: Edge) -> None:
    """The process that sent a task's request stops following it (a restart); the answer
    comes while nobody listens; GetTask (any process) reads it from the hub."""
    client = await edge.client(edge.agent.agent_id)
    request = message("slow, then fine")
    request.configuration.return_immediately = True
    [event] = await events(client, request)
    task_id = event.task.id
    async with asyncio.timeout(20):
        while not edge.agent.seen:
            await asyncio.sleep(0.02)
    served = edge.h.client.app[EDGE][0]
    await served.aclose()  # what a stopping gateway does with the tasks it follows
    async with asyncio.timeout(20):
        while task_id in served._live:
            await asyncio.sleep(0.02)
    working = await client.get_task(pb.GetTaskRequest(id=task_id))
    assert working.status.state == pb.TASK_STATE_WORKING
    edge.agent.release.set()
    async with asyncio.timeout(20):  # the agent's answer is kept in HMP_REPLIES
        while edge.runner.handled < 1:
            await asyncio.sleep(0.02)
        while True:
            got = await client.get_task(pb.GetTaskRequest(id=task_id))
            if got.status.state != pb.TASK_STATE_WORKING:
                break
            await asyncio.sleep(0.05)
    assert got.status.state == pb.TASK_STATE_COMPLETED
    assert got.artifacts[0].parts[0].text == "claim slow, then fine is valid"


async def test_an_a2a_caller_cannot_read_a_conversations_archive(
        make_gateway: GatewayFactory, nats: NatsServer) -> None:
    """An A2A caller acts for no conversation: asking the retriever (or the rag_answer
    workflow) for ``conversation:<id>``, with or without a conversation_id, is refused."""
    from agent_core.messages import Message

    h = await make_gateway(hermes_hub=True, hub_rag=True, hermes_api_keys=[KEY],
                           **nats.settings())
    store = h.gateway.parts.opened.store
    said = [Message(role="user", content="my card PIN is 8841")]
    await store.append("telegram:5550123", said)
    await store.rewrite_window("telegram:5550123", [], said, base=[m.id for m in said])
    base = str(h.client.make_url("")).rstrip("/")
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"},
                                 timeout=60) as http:
        async with asyncio.timeout(20):
            while (await http.get(f"{base}/a2a/retriever/.well-known/agent-card.json")
                   ).status_code != 200:
                await asyncio.sleep(0.05)
        edge = Edge(h, base, Claims(), None, http)  # type: ignore[arg-type]
        wanted = {"knowledge_base_id": "conversation:telegram:5550123",
                  "conversation_id": "telegram:5550123"}
        for agent_id, data, code in (
                ("retriever", {"query": "card PIN", **wanted}, "PERMISSION"),
                ("workflow-executor", {"workflow_id": "rag_answer",
                                       "input": {"text": "card PIN?", **wanted}},
                 "STEP_FAILED")):
            client = await edge.client(agent_id)
            [event] = await events(client, message("card PIN", data=data))
            assert event.task.status.state == pb.TASK_STATE_FAILED, agent_id
            assert event.task.status.message.parts[0].text.startswith(code), \
                event.task.status.message
            assert "8841" not in str(MessageToDict(event.task))

