"""OpenTelemetry traces through an in-process OTLP/HTTP receiver: one trace per inbound
message whose id is the task id the logs and events carry; spans for the inbound request,
the queue, the task, each model call (tokens), each tool call, approvals, delivery, and
across the hub (the context travels in NATS headers). Unset, nothing is exported and the
SDK is not imported."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agent_core import tracing
from agent_core.log import ContextFilter
from agent_core.models.replay import Reply
from hub import Agent, AgentRunner, Bus, HubSettings, TaskRequest, TaskResponse
from hub.discovery import discover
from tests.conftest import NatsServer
from tests.integration.conftest import GatewayFactory, Harness
from tests.standins.otlp import OTLPReceiver, ReceivedSpan

SECRET_TEXT = "my-private-words-4711"
QUERY = Reply.call("query_sales_data", {"start_date": "2024-07-01", "end_date": "2024-09-30"})


@pytest.fixture
def otlp(monkeypatch: pytest.MonkeyPatch) -> Iterator[OTLPReceiver]:
    receiver = OTLPReceiver()
    receiver.start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    yield receiver
    tracing.shutdown()
    receiver.stop()


async def spans_of(otlp: OTLPReceiver, trace_id: str, *names: str, count: int = 1,
                   timeout: float = 20.0) -> list[ReceivedSpan]:
    """The trace's spans, once each of ``names`` arrived ``count`` times."""
    deadline = time.monotonic() + timeout
    while True:
        await asyncio.to_thread(tracing.flush)
        spans = otlp.of_trace(trace_id)
        seen = [s.name for s in spans]
        if all(seen.count(n) >= count for n in names):
            return spans
        if time.monotonic() > deadline:
            raise AssertionError(f"spans {names} not all exported; got {seen}")
        await asyncio.sleep(0.05)


def one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    [found] = [s for s in spans if s.name == name]
    return found


async def events_of(h: Harness, task_id: str) -> list[dict[str, Any]]:
    text = await (await h.client.get(f"/agent/tasks/{task_id}/events")).text()
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


async def test_a_message_is_one_trace_with_the_task_s_id(
        otlp: OTLPReceiver, make_gateway: GatewayFactory,
        caplog: pytest.LogCaptureFixture, request: pytest.FixtureRequest) -> None:
    h = await make_gateway()
    h.model.add(QUERY, Reply("Q3 was 1.2M."))
    caplog.set_level("INFO")
    records: list[logging.LogRecord] = []
    tagger = logging.Handler()
    tagger.addFilter(ContextFilter())  # as configure_logging tags every line
    tagger.emit = records.append  # type: ignore[method-assign]
    logging.getLogger("gateway").addHandler(tagger)
    request.addfinalizer(lambda: logging.getLogger("gateway").removeHandler(tagger))
    body = await (await h.client.post("/agent/run", json={
        "text": f"q3 sales {SECRET_TEXT}", "conversation_id": "traced"})).json()
    assert body["status"] == "answered"
    task_id = body["task_id"]
    spans = await spans_of(otlp, task_id, "inbound", "queued", "task", "deliver",
                           "execute_tool query_sales_data")
    inbound, queued, task = one(spans, "inbound"), one(spans, "queued"), one(spans, "task")
    assert inbound.parent_id == "" and inbound.service == "hermes-gateway"
    assert inbound.attributes["hermes.routed"] == "queued"
    assert inbound.attributes["hermes.conversation_id"] == "api:local:traced"
    assert queued.parent_id == inbound.span_id and task.parent_id == inbound.span_id
    assert queued.end_ns >= queued.start_ns >= inbound.start_ns
    assert task.attributes["hermes.outcome"] == "answered"
    chats = [s for s in spans if s.name == "chat scripted"]
    assert len(chats) == 2 and all(c.parent_id == task.span_id for c in chats)
    assert chats[0].attributes["gen_ai.usage.input_tokens"] == 20
    assert chats[0].attributes["gen_ai.usage.output_tokens"] == 10
    assert chats[0].attributes["gen_ai.provider.name"] == "openai"
    assert chats[0].attributes["hermes.tool_calls"] == 1
    tool = one(spans, "execute_tool query_sales_data")
    assert tool.parent_id == task.span_id and tool.attributes["hermes.ok"] is True
    assert one(spans, "deliver").parent_id == task.span_id
    # The same id in the events and in the log lines of the task.
    assert {e["trace_id"] for e in await events_of(h, task_id)} == {task_id}
    tagged = {getattr(r, "trace_id", None) for r in records
              if r.getMessage().startswith(f"task {task_id} answered")}
    assert tagged == {task_id}
    # Neither the message's text nor any secret is in a span.
    dumped = json.dumps([s.attributes for s in otlp.spans])
    assert SECRET_TEXT not in dumped and "sk-test" not in dumped


async def test_an_approval_and_the_resumed_task_stay_in_the_message_s_trace(
        otlp: OTLPReceiver, make_gateway: GatewayFactory) -> None:
    h = await make_gateway()
    h.model.add(Reply.call("save_daily_report", {"content": "Q3 revenue: 1.2M"}),
                Reply("Saved."))
    paused = await (await h.client.post("/agent/run", json={"text": "save it"})).json()
    assert paused["status"] == "awaiting_approval"
    decided = await h.client.post(f"/agent/approvals/{paused['approval']['id']}",
                                  json={"approved": True})
    assert decided.status == 200
    await h.wait_task(paused["task_id"], "answered")
    spans = await spans_of(otlp, paused["task_id"], "task", "execute_tool save_daily_report",
                           count=2)
    spans = await spans_of(otlp, paused["task_id"], "approval", "deliver", count=1)
    inbound = one(spans, "inbound")
    first, resumed = sorted((s for s in spans if s.name == "task"), key=lambda s: s.start_ns)
    assert first.parent_id == resumed.parent_id == inbound.span_id
    assert first.attributes["hermes.outcome"] == "awaiting_approval"
    assert resumed.attributes["hermes.kind"] == "approval"
    approval = one(spans, "approval")
    assert approval.attributes["hermes.approved"] is True
    assert approval.attributes["hermes.tool"] == "save_daily_report"
    assert approval.parent_id == inbound.span_id and approval.end_ns <= resumed.start_ns
    asked, ran = sorted((s for s in spans if s.name == "execute_tool save_daily_report"),
                        key=lambda s: s.start_ns)
    assert asked.attributes["hermes.approval_required"] is True and asked.status != 2
    assert ran.attributes["hermes.ok"] is True and ran.parent_id == resumed.span_id


class Echo(Agent):
    agent_id = "echo-agent"
    capabilities = ("echo",)

    async def on_message(self, request: TaskRequest) -> TaskResponse:
        return self.respond(request, "success", {"echo": request.arguments.get("text")})


def delegating(path: str, body: dict[str, Any]) -> Reply:
    tool = next((m for m in reversed(body["messages"]) if m["role"] == "tool"), None)
    if tool is None:
        return Reply.call("delegate", {"capability": "echo", "task": "say hi",
                                       "deadline_ms": 10_000})
    return Reply("The echo agent answered.")


async def test_the_trace_continues_across_the_hub_in_nats_headers(
        otlp: OTLPReceiver, make_gateway: GatewayFactory, nats: NatsServer, tmp_path: Any
        ) -> None:
    h = await make_gateway(hermes_hub=True, **nats.settings())
    assert h.gateway.parts.bus is not None
    h.model.responder = delegating
    echo = Echo()
    agent_bus = await Bus.connect(HubSettings(  # type: ignore[call-arg]
        _env_file=None, hermes_data_dir=tmp_path, **nats.settings(echo.agent_id)),
        identity=echo.agent_id)
    runner = AgentRunner(agent_bus, echo)
    await runner.start()
    try:
        async with asyncio.timeout(15):
            while not await discover(h.gateway.parts.bus, "echo"):
                await asyncio.sleep(0.05)
        body = await (await h.client.post("/agent/run", json={"text": "delegate it"})).json()
        assert body["status"] == "answered", body
    finally:
        await runner.stop()
        await agent_bus.close()
    spans = await spans_of(otlp, body["task_id"], "execute_tool delegate",
                           "hub task_request echo-agent")
    delegate = one(spans, "execute_tool delegate")
    hop = one(spans, "hub task_request echo-agent")
    assert hop.parent_id == delegate.span_id  # the context came over NATS
    assert hop.attributes["hmp.intent"] == "echo" and hop.attributes["hmp.status"] == "success"
    assert hop.start_ns >= delegate.start_ns and hop.end_ns <= delegate.end_ns


async def test_without_an_endpoint_nothing_is_exported(make_gateway: GatewayFactory,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    receiver = OTLPReceiver()
    receiver.start()
    try:
        # Only a service name, no endpoint: tracing stays off.
        monkeypatch.setenv("OTEL_SERVICE_NAME", "not-exported")
        h = await make_gateway()
        h.model.add(QUERY, Reply("done"))
        body = await (await h.client.post("/agent/run", json={"text": "x"})).json()
        assert body["status"] == "answered"
        assert not tracing.enabled() and tracing.traceparent() is None
        assert receiver.requests == 0 and receiver.refused == 0
    finally:
        receiver.stop()


def test_without_an_endpoint_the_sdk_is_never_imported() -> None:
    """Our code imports nothing of the tracing SDK or the exporter (redis-py imports the
    SDK's metrics module by itself when the SDK is installed: the `otel` extra)."""
    code = (
        "import sys\n"
        "from gateway.app import create_app\n"
        "from gateway.settings import GatewaySettings\n"
        "import hub.agent, hub.bus, hub.calls\n"
        "from agent_core import tracing\n"
        "create_app(GatewaySettings(_env_file=None))\n"
        "with tracing.span('x') as s:\n"
        "    s.set_attribute('k', 1)\n"
        "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk.trace',"
        " 'opentelemetry.exporter'))))\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_without_an_endpoint_a_span_is_the_shared_no_op_and_lets_errors_through() -> None:
    assert not tracing.enabled()
    first = tracing.span("a", {"k": 1}, trace_id="0" * 32)
    assert first is tracing.span("b", kind="client") is tracing.NO_SPAN
    with first as span:
        span.set_attributes({"k": 2})
        span.fail("ValueError")
    with pytest.raises(ValueError, match="kept"), tracing.span("c"):
        raise ValueError("kept")
